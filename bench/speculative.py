"""Figure 16: speculative decoding on a CPU: the Eagle3 draft's acceptance (trained against untrained) and greedy
tokens/s of ``swiftcore infer``'s transformers engine with and without the draft, side by side in one run.

The target is the tiny Qwen3.5 (``swiftcore make-tiny qwen3_5``) fully fine-tuned on 24 greeting chats ("Greet
NAME." -> "Hello NAME, welcome to the Zorbia club! Your seat is by the blue window."), the draft ``swiftcore train
--recipe eagle3`` on the same chats (plugins/eagle3/tests/conftest.py's set-up, same steps). Each system is a
:class:`~swiftcore_infer.TransformersEngine` answering the 8 held-out greetings greedily (48 tokens at most): the
target alone (transformers ``generate``, KV cache), with the trained draft and with the untrained draft
(speculators' initialisation; draft decoding runs each request alone). The systems alternate (``--runs`` rounds,
:func:`common.alternate`), the target alone twice: its 8 prompts in one batch, and one at a time as draft decoding
runs them; tokens/s is the completion tokens over the wall time of the 8.
Acceptance is the engine's own count (``speculative_stats``): draft tokens accepted per verification step (of
``k`` = 3) and tokens per target forward. The answers are checked equal to the target's alone before timing.

Usage: ``python bench/speculative.py [--runs 5] [--steps 40] [--results] [--target DIR --trained-draft DIR]``
(the last two reuse a target and draft made as above, e.g. by plugins/eagle3/tests); raw JSON goes to
``bench/raw/speculative.json``; ``--results`` also replaces the ``speculative`` section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import alternate, machine, machine_text, pair_ratio, replace_section, summarize, write_raw

BEGIN, END = "<!-- speculative:begin -->", "<!-- speculative:end -->"
TRAIN_NAMES = "Alice Bruno Chen Dara Emil Fatou Gita Hugo Ines Jon Kira Lev Mina Noor Omar Pia Quin Rosa".split()
TRAIN_NAMES += ["Sami", "Tove", "Uma", "Vik", "Wren", "Yara"]
HELD_OUT = ["Zed", "Ada", "Bea", "Cyd", "Dov", "Eli", "Fay", "Gus"]
REPLY = "Hello {}, welcome to the Zorbia club! Your seat is by the blue window."
MAX_NEW_TOKENS = 48


def _cli(*args: str) -> None:
    """``swiftcore ARGS`` in this process (as plugins/eagle3/tests does with ``run_cli``)."""
    from click.testing import CliRunner

    from swiftcore.api.cli import cli

    result = CliRunner().invoke(cli, list(args), env={"SWIFTCORE_PLUGINS": None})
    if result.exit_code != 0:
        raise SystemExit(f"swiftcore {' '.join(args)} failed:\n{result.output[-3000:]}\n{result.exception!r}")


def _prepare(root: Path, steps: int, plugins: Any) -> tuple[Path, Path, Path]:
    """The fine-tuned target, the trained draft and the untrained draft (directories under ``root``)."""
    rows = [
        {"messages": [{"role": "user", "content": f"Greet {n}."}, {"role": "assistant", "content": REPLY.format(n)}]}
        for n in TRAIN_NAMES
    ]
    data = root / "greetings.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _cli("make-tiny", "qwen3_5", str(root / "tiny"))
    common = ["--dataset", str(data), "--max-steps", str(steps), "--batch-size", "8", "--learning-rate", "3e-3",
              "--lr-scheduler", "constant", "--save-steps", str(steps), "--no-plot", "--seed", "0"]  # fmt: skip
    _cli("train", "--model", str(root / "tiny"), "--output-dir", str(root / "target"), "--tuner", "full", *common)
    target_dir = root / "target" / f"checkpoint-{steps}"
    _cli("train", "--recipe", "eagle3", "--model", str(target_dir), "--output-dir", str(root / "draft"), *common)
    trained = root / "draft" / f"checkpoint-{steps}"
    return target_dir, trained, _untrained(target_dir, trained, root, plugins)


def _untrained(target_dir: Path, trained: Path, root: Path, plugins: Any) -> Path:
    """An untrained draft of ``trained``'s shape for the target (speculators' initialisation), saved under ``root``."""
    from swiftcore_eagle3.draft import build_draft, save_draft

    from swiftcore.api.models import load_model, resolve_model_spec

    target = load_model(resolve_model_spec(str(target_dir), plugins), str(target_dir), plugins).eval()
    aux = json.loads((trained / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"]
    return save_draft(build_draft(target, str(target_dir), aux_layer_ids=aux, seed=0), root / "untrained")


def run(
    runs: int, steps: int, results: bool, target_dir: Path | None = None, trained: Path | None = None
) -> dict[str, Any]:
    """Build (or take ``target_dir`` and its ``trained`` draft, made the same way), check, time; write the raw JSON
    (and the RESULTS.md section with ``results``)."""
    from swiftcore_infer import Request, SamplingParams, TransformersEngine

    import swiftcore

    plugins = swiftcore.load_plugins(env={})
    work = Path(tempfile.mkdtemp(prefix="swiftcore-bench-speculative-"))
    start = time.perf_counter()
    if target_dir is None or trained is None:
        target_dir, trained, untrained = _prepare(work, steps, plugins)
    else:
        untrained = _untrained(target_dir, trained, work, plugins)
    prepare_s = time.perf_counter() - start
    requests = [
        Request(
            record={"messages": [{"role": "user", "content": f"Greet {n}."}]},
            sampling=SamplingParams(max_new_tokens=MAX_NEW_TOKENS),
        )
        for n in HELD_OUT
    ]
    plain = TransformersEngine(target_dir, plugins)
    # name -> (engine, requests per engine call): the target alone batches the 8 (what it serves best) and also runs
    # them one at a time, as draft decoding does.
    systems_run: dict[str, tuple[Any, int]] = {
        "target alone, batch of 8": (plain, len(requests)),
        "target alone, one at a time": (plain, 1),
        "trained draft": (TransformersEngine(target_dir, plugins, draft=trained), 1),
        "untrained draft": (TransformersEngine(target_dir, plugins, draft=untrained), 1),
    }
    expected = [g.token_ids for g in plain.generate_requests(requests)]
    for name, (engine, _) in systems_run.items():
        got = [g.token_ids for g in engine.generate_requests(requests)]
        if got != expected:
            raise SystemExit(f"{name}: answers differ from the target alone's")
        if engine.speculative_stats is not None:  # counted from the timed runs only
            engine.speculative_stats = dict.fromkeys(engine.speculative_stats, 0)

    def tokens_per_s(engine: Any, batch_size: int) -> Any:
        def once() -> float:
            begin = time.perf_counter()
            done = engine.generate_requests(requests, batch_size=batch_size)
            return sum(g.completion_tokens for g in done) / (time.perf_counter() - begin)

        return once

    values = alternate(runs, {name: tokens_per_s(*pair) for name, pair in systems_run.items()})
    baseline = "target alone, one at a time"
    systems: dict[str, Any] = {}
    for name, (engine, _) in systems_run.items():
        row: dict[str, Any] = {"tokens_per_s": summarize(values[name]), "runs": values[name]}
        stats = engine.speculative_stats
        if stats is not None:
            row["accepted_per_step"] = stats["accepted"] / stats["steps"]
            row["tokens_per_target_forward"] = stats["tokens"] / stats["forwards"]
            row["counts"] = stats
        row["speed_vs_one_at_a_time"] = pair_ratio(values[name], values[baseline])
        systems[name] = row
    for engine, _ in systems_run.values():
        engine.close()
    data = {
        "machine": machine(),
        "setup": {
            "target": f"tiny Qwen3.5 (swiftcore make-tiny qwen3_5), full fine-tune {steps} steps on 24 greetings",
            "draft": f"swiftcore train --recipe eagle3, 1 layer, ttt 3, {steps} steps on the same chats",
            "prompts": len(requests),
            "max_new_tokens": MAX_NEW_TOKENS,
            "num_speculative_tokens": 3,
            "runs": runs,
            "prepare_s": round(prepare_s, 1),
            "answers_equal": True,
        },
        "systems": systems,
    }
    path = write_raw("speculative", data)
    text = render(data)
    print(text)
    print(f"raw: {path}", file=sys.stderr)
    if results:
        replace_section(text, BEGIN, END)
    return data


def render(data: dict[str, Any]) -> str:
    """The RESULTS.md section of :func:`run`'s data."""
    lines = [
        BEGIN,
        "### Figure 16: speculative decoding on a CPU (Eagle3 draft, transformers engine)",
        "",
        f"{machine_text(data['machine'])}; {data['setup']['target']}; {data['setup']['draft']}; "
        f"{data['setup']['prompts']} held-out prompts, greedy, up to {data['setup']['max_new_tokens']} tokens, "
        f"k = 3; median of {data['setup']['runs']} alternating runs. Answers equal the target's alone.",
        "",
        "| system | tokens/s (median, min-max) | accepted per verification step (of 3) | tokens per target forward "
        "| speed vs the target alone one at a time |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, row in data["systems"].items():
        t = row["tokens_per_s"]
        accepted = f"{row['accepted_per_step']:.2f}" if "accepted_per_step" in row else "-"
        per_forward = f"{row['tokens_per_target_forward']:.2f}" if "tokens_per_target_forward" in row else "1.00"
        speed = f"{row['speed_vs_one_at_a_time']['median']:.2f}x"
        lines.append(
            f"| {name} | {t['median']:.0f} ({t['min']:.0f}-{t['max']:.0f}) | {accepted} | {per_forward} | {speed} |"
        )
    lines.append(END)
    return "\n".join(lines)


def main() -> None:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="alternating rounds of the three systems")
    parser.add_argument("--steps", type=int, default=40, help="fine-tune and draft training steps")
    parser.add_argument("--results", action="store_true", help="also replace the section of RESULTS.md")
    parser.add_argument("--target", type=Path, help="a target already fine-tuned as above (skips the training)")
    parser.add_argument("--trained-draft", type=Path, help="with --target: its draft, trained as above")
    args = parser.parse_args()
    run(args.runs, args.steps, args.results, args.target, args.trained_draft)


if __name__ == "__main__":
    main()
