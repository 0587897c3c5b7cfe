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

A second table times the verification itself (``swiftcore_eagle3.speculative_generate`` on the same 8 encoded
prompts with the trained draft, alternating): the target's KV cache kept across steps (rejected proposals cropped;
Qwen3.5's linear-attention state restored and the kept tokens fed again) against the whole sequence run at every
step, and speculative sampling at temperature 1 (cached, seeded per prompt); with the tokens the target's forwards
were fed per generated token, counted at its forward in an untimed pass.

Usage: ``python bench/speculative.py [--runs 5] [--steps 40] [--results] [--target DIR --trained-draft DIR]
[--verification-only]`` (``--target``/``--trained-draft`` reuse a target and draft made as above, e.g. by
plugins/eagle3/tests; ``--verification-only`` measures only the second table, kept beside the first table's
numbers already in the raw JSON); raw JSON goes to ``bench/raw/speculative.json``; ``--results`` also replaces the
``speculative`` section of RESULTS.md.
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
    verification = _verification(target_dir, trained, plugins, runs)
    data = {
        "command": f"python bench/speculative.py --runs {runs} --steps {steps}",
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
        "verification": verification,
    }
    path = write_raw("speculative", data)
    text = render(data)
    print(text)
    print(f"raw: {path}", file=sys.stderr)
    if results:
        replace_section(text, BEGIN, END)
    return data


def _verification(target_dir: Path, trained: Path, plugins: Any, runs: int) -> dict[str, Any]:
    """The second table: ``speculative_generate`` with the trained draft, cached vs whole-sequence verification and
    cached sampling; greedy tokens checked equal between the two verifications first."""
    import torch
    from swiftcore_eagle3 import load_draft, speculative_generate

    from swiftcore.api.models import load_model, load_tokenizer, resolve_model_spec
    from swiftcore.api.template import SampleEncoder, get_template

    spec = resolve_model_spec(str(target_dir), plugins)
    target = load_model(spec, str(target_dir), plugins).eval()
    draft = load_draft(trained, target)
    encoder = SampleEncoder(get_template(spec.default_template, plugins), load_tokenizer(str(target_dir)))
    prompts = [encoder.prompt({"messages": [{"role": "user", "content": f"Greet {n}."}]})[0] for n in HELD_OUT]
    eos = target.generation_config.eos_token_id
    eos = list(eos) if isinstance(eos, list | tuple) else [eos]
    modes: dict[str, dict[str, Any]] = {
        "KV-cached verification, greedy": {"kv_cache": True},
        "whole sequence at every step, greedy": {"kv_cache": False},
        "KV-cached verification, sampling T=1": {"kv_cache": True, "temperature": 1.0},
    }

    def generate(options: dict[str, Any]) -> list[Any]:
        return [
            speculative_generate(
                target, draft, ids, max_new_tokens=MAX_NEW_TOKENS, num_speculative_tokens=3, eos_token_ids=eos,
                generator=torch.Generator().manual_seed(i), **options,
            )
            for i, ids in enumerate(prompts)
        ]  # fmt: skip

    fed: list[int] = []
    hook = target.register_forward_pre_hook(lambda _m, _a, kw: fed.append(kw["input_ids"].shape[1]), with_kwargs=True)
    counts: dict[str, dict[str, Any]] = {}
    outputs: dict[str, list[list[int]]] = {}
    try:
        for name, options in modes.items():
            fed.clear()
            outs = generate(options)
            tokens = sum(len(o.tokens) for o in outs)
            steps = sum(len(o.accepted) for o in outs)
            outputs[name] = [o.tokens for o in outs]
            prompt_tokens = sum(len(p) for p in prompts)
            counts[name] = {
                "tokens": tokens,
                "target_forwards": len(fed),
                "fed_after_prompt_per_token": (sum(fed) - prompt_tokens) / tokens,
                "accepted_per_step": sum(sum(o.accepted) for o in outs) / steps if steps else 0.0,
            }
    finally:
        hook.remove()
    if outputs["KV-cached verification, greedy"] != outputs["whole sequence at every step, greedy"]:
        raise SystemExit("KV-cached verification's tokens differ from the whole-sequence verification's")

    def tokens_per_s(options: dict[str, Any]) -> Any:
        def once() -> float:
            begin = time.perf_counter()
            done = generate(options)
            return sum(len(o.tokens) for o in done) / (time.perf_counter() - begin)

        return once

    values = alternate(runs, {name: tokens_per_s(options) for name, options in modes.items()})
    baseline = "whole sequence at every step, greedy"
    return {
        name: {
            **counts[name],
            "tokens_per_s": summarize(values[name]),
            "runs": values[name],
            "speed_vs_whole_sequence": pair_ratio(values[name], values[baseline]),
        }
        for name in modes
    }


def run_verification_only(runs: int, results: bool, target_dir: Path, trained: Path) -> dict[str, Any]:
    """Measure the second table only (with ``target_dir`` and its ``trained`` draft) and keep it in the raw JSON
    beside the engine table already there, with its own machine, date and command."""
    from common import RAW

    import swiftcore

    plugins = swiftcore.load_plugins(env={})
    path = RAW / "speculative.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data["verification"] = _verification(target_dir, trained, plugins, runs)
    data["verification_setup"] = {
        "machine": machine(),
        "runs": runs,
        "command": f"python bench/speculative.py --verification-only --runs {runs} --target DIR --trained-draft DIR",
        "draft": "the target and draft of plugins/eagle3/tests/conftest.py (40-step fine-tune, 40-step eagle3 run)",
    }
    write_raw("speculative", data)
    text = render(data)
    print(text)
    if results:
        replace_section(text, BEGIN, END)
    return data


def render(data: dict[str, Any]) -> str:
    """The RESULTS.md section of :func:`run`'s data."""
    command = data.get("command", "python bench/speculative.py")
    lines = [
        BEGIN,
        "",
        "## 16. Speculative decoding on a CPU (Eagle3 draft, transformers engine)",
        "",
        f"`{command}`, {data['machine'].get('date', 'n/a')}, "
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
    verification = data.get("verification")
    if verification:
        setup = data.get("verification_setup")
        if setup:
            lines += [
                "",
                f"`{setup['command']}`, {setup['machine'].get('date', 'n/a')}, {machine_text(setup['machine'])}; "
                f"{setup['draft']}; median of {setup['runs']} alternating runs.",
            ]
        lines += [
            "",
            "Verification (`speculative_generate`, trained draft, the same 8 prompts, k = 3): the target's KV cache "
            "kept across steps against the whole sequence run at every step; tokens fed to the target after the "
            "prompt, per generated token, counted at its forward. Greedy tokens of the two are equal.",
            "",
            "| verification | tokens/s (median, min-max) | accepted per step (of 3) | target tokens fed per generated "
            "token | speed vs whole sequence |",
            "| --- | --- | --- | --- | --- |",
        ]
        for name, row in verification.items():
            t = row["tokens_per_s"]
            lines.append(
                f"| {name} | {t['median']:.0f} ({t['min']:.0f}-{t['max']:.0f}) | {row['accepted_per_step']:.2f} | "
                f"{row['fed_after_prompt_per_token']:.2f} | {row['speed_vs_whole_sequence']['median']:.2f}x |"
            )
    lines += ["", END]
    return "\n".join(lines)


def main() -> None:
    """Parse the options and run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="alternating rounds of the three systems")
    parser.add_argument("--steps", type=int, default=40, help="fine-tune and draft training steps")
    parser.add_argument("--results", action="store_true", help="also replace the section of RESULTS.md")
    parser.add_argument("--target", type=Path, help="a target already fine-tuned as above (skips the training)")
    parser.add_argument("--trained-draft", type=Path, help="with --target: its draft, trained as above")
    parser.add_argument("--verification-only", action="store_true", help="only the verification table (--target)")
    args = parser.parse_args()
    if args.verification_only:
        if args.target is None or args.trained_draft is None:
            parser.error("--verification-only needs --target and --trained-draft")
        run_verification_only(args.runs, args.results, args.target, args.trained_draft)
        return
    run(args.runs, args.steps, args.results, args.target, args.trained_draft)


if __name__ == "__main__":
    main()
