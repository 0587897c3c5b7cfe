"""Side-by-side benchmarks against ms-swift 4.6.0 (issue 9): start-up, encoding, training, inference.

Each figure alternates the systems run by run (A B A B ...) and reports medians, min/max and the
median per-pair ratio. ms-swift runs in ``.venv-peers`` (created by ``bench/peers.py``) through its CLI
or, for encoding and inference, a long-lived worker (``_msswift_worker.py``) in that environment;
swiftcore never imports it. Raw JSON goes to ``bench/raw/msswift_compare.json``.

Usage: ``python bench/msswift_compare.py [--runs 5] [--encode-n 10000] [--figures cli,encode,train,infer]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import PEER_SWIFT, RAW, alternate, machine, pair_ratio, run_child, summarize, write_raw
from conversations import prompt_corpus, write_jsonl

__all__ = ["cli_figure", "infer_figure", "run"]

SWIFTCORE = Path(sys.executable).parent / "swiftcore"
FIGURES = ("cli", "encode", "train", "infer")


def cli_figure(runs: int) -> dict[str, Any]:
    """Figure 1: wall seconds of ``swiftcore --help`` / ``swiftcore plugins`` vs ``swift --help``.

    ms-swift 4.6.0's ``swift --help`` imports its route table and then fails with ``KeyError: '--help'``
    (exit 1); it is timed as is (that is what a user typing it waits for) and ``swift sft --help``, which
    does print help, is timed too.
    """
    commands = {
        "swiftcore --help": [str(SWIFTCORE), "--help"],
        "swiftcore plugins": [str(SWIFTCORE), "plugins"],
        "swift --help": [str(PEER_SWIFT), "--help"],
        "swift sft --help": [str(PEER_SWIFT), "sft", "--help"],
    }
    codes: dict[str, int] = {}

    def timer(name: str) -> Any:
        def once() -> float:
            child = run_child(commands[name])
            codes[name] = child.returncode
            return child.seconds
        return once

    for argv in commands.values():  # warm the page cache once
        run_child(argv)
    values = alternate(runs, {name: timer(name) for name in commands})
    return {"seconds": {k: summarize(v) for k, v in values.items()}, "raw_seconds": values, "exit_codes": codes,
            "ratio_swift_help_over_swiftcore_help": pair_ratio(values["swift --help"], values["swiftcore --help"]),
            "ratio_swift_help_over_swiftcore_plugins": pair_ratio(values["swift --help"], values["swiftcore plugins"]),
            "ratio_swift_sft_help_over_swiftcore_help": pair_ratio(values["swift sft --help"],
                                                                   values["swiftcore --help"])}


def infer_figure(peer: Any, model: Path, peer_model: Path, n: int, max_new_tokens: int, batch_size: int, runs: int,
                 work: Path) -> dict[str, Any]:
    """Figure 4: completion tokens/s, swiftcore ``TransformersEngine`` vs ms-swift ``TransformersEngine``.

    Same checkpoint, same ``n`` prompts, greedy, ``max_new_tokens``, ``batch_size`` prompts per batch.
    Also counts the prompts where the two generated texts differ (same weights + greedy should agree
    unless the prompts are encoded differently).
    """
    from swiftcore_infer import TransformersEngine

    import swiftcore

    records = prompt_corpus(n, seed=2)
    data = write_jsonl(records, work / f"prompts{n}.jsonl")
    engine = TransformersEngine(model, swiftcore.load_plugins())
    engine.generate(records[:2], max_new_tokens=4, batch_size=2)  # warm-up
    peer.request("infer_load", model=str(peer_model), model_type="qwen3_5", template="qwen3_5")
    peer.request("infer_run", data=str(write_jsonl(records[:2], work / "warm.jsonl")), max_new_tokens=4,
                 batch_size=2)
    texts: dict[str, list[str]] = {}
    tokens: dict[str, list[int]] = {"swiftcore": [], "msswift": []}

    def ours() -> float:
        start = time.perf_counter()
        out = engine.generate(records, max_new_tokens=max_new_tokens, batch_size=batch_size)
        seconds = time.perf_counter() - start
        failed = [g.error for g in out if g.error]
        if failed:
            raise RuntimeError(f"swiftcore: {len(failed)} requests failed: {failed[:2]}")
        count = sum(g.completion_tokens for g in out)
        tokens["swiftcore"].append(count)
        texts["swiftcore"] = [g.text for g in out]
        return count / seconds

    def theirs() -> float:
        reply = peer.request("infer_run", data=str(data), max_new_tokens=max_new_tokens, batch_size=batch_size)
        tokens["msswift"].append(reply["completion_tokens"])
        texts["msswift"] = reply["texts"]
        return reply["completion_tokens"] / reply["seconds"]

    values = alternate(runs, {"swiftcore": ours, "msswift": theirs})
    differ = sum(a != b for a, b in zip(texts["swiftcore"], texts["msswift"], strict=True))
    return {"n": n, "max_new_tokens": max_new_tokens, "batch_size": batch_size,
            "tokens_per_s": {k: summarize(v) for k, v in values.items()}, "raw_tokens_per_s": values,
            "completion_tokens": tokens, "ratio": pair_ratio(values["swiftcore"], values["msswift"]),
            "texts_differ": differ,
            "example": {"swiftcore": texts["swiftcore"][0][:200], "msswift": texts["msswift"][0][:200]}}


def _versions() -> dict[str, str]:
    from importlib import metadata

    return {d: metadata.version(d) for d in ("swiftcore", "torch", "transformers", "peft", "accelerate")}


def _guard(name: str, fn: Any, errors: dict[str, str]) -> Any:
    """Run one figure; a failure is recorded (and shown in RESULTS.md) instead of ending the run."""
    try:
        return fn()
    except Exception as exc:  # one broken figure must not hide the others
        import traceback

        errors[name] = f"{type(exc).__name__}: {exc}"
        print(f"figure {name} failed:\n{traceback.format_exc()}", file=sys.stderr)
        return None


def run(figures: tuple[str, ...] = FIGURES, runs: int = 5, encode_n: int = 10_000, train_samples: int = 8,
        train_max_turns: int = 8, batch_size: int = 4, infer_n: int = 16, max_new_tokens: int = 16,
        work: Path | None = None, merge: bool = False) -> dict[str, Any]:
    """Run the chosen figures and write ``bench/raw/msswift_compare.json``; returns the raw result.

    With ``merge``, only the chosen figures are replaced in the existing raw JSON (each keeps a
    ``measured`` date), e.g. to redo one figure after a fix without re-running the others.
    """
    from encode_compare import encode_figure
    from msswift_train import peer_checkpoint, train_figure
    from peer_worker import PeerWorker
    from train_throughput import default_setup, make_dataset, make_tiny

    work = work or Path(tempfile.mkdtemp(prefix="swiftcore-bench-"))
    result: dict[str, Any] = {"machine": machine(), "runs": runs, "errors": {}, "versions": _versions()}
    errors = result["errors"]
    started = time.perf_counter()
    if "cli" in figures:
        result["cli"] = _guard("cli", lambda: cli_figure(runs), errors)
    tiny = {name: make_tiny(name, work / f"tiny-{name}") for name in ("qwen3_5", "gemma4")}
    peer_tiny = {name: peer_checkpoint(path, work / f"peer-{name}") for name, path in tiny.items()}
    with PeerWorker() as peer:
        if "encode" in figures:
            result["encode"] = _guard("encode", lambda: encode_figure(peer, tiny, peer_tiny, encode_n, runs, work),
                                      errors)
        if "infer" in figures:
            result["infer"] = _guard("infer", lambda: infer_figure(peer, tiny["qwen3_5"], peer_tiny["qwen3_5"],
                                                                   infer_n, max_new_tokens, batch_size, runs, work),
                                     errors)
    if "train" in figures:
        data = make_dataset(work, train_samples, train_max_turns)
        check = make_dataset(work / "check", batch_size * 2, train_max_turns, seed=3)
        result["train"] = _guard("train", lambda: train_figure(
            tiny["qwen3_5"], peer_tiny["qwen3_5"], data, check, batch_size * 2, default_setup(batch_size), runs,
            work / "train"), errors)
        if result["train"]:
            result["train"]["samples"] = train_samples
    result["seconds"] = round(time.perf_counter() - started, 1)
    for figure in figures:
        if isinstance(result.get(figure), dict):
            result[figure]["measured"] = result["machine"]["date"]
    existing = RAW / "msswift_compare.json"
    if merge and existing.exists():
        merged = json.loads(existing.read_text())
        merged.setdefault("errors", {})
        for figure in figures:
            merged[figure] = result.get(figure)
            merged["errors"].pop(figure, None)
            if figure in errors:
                merged["errors"][figure] = errors[figure]
        merged.setdefault("remeasured", {}).update({f: result["machine"]["date"] for f in figures})
        result = merged
    write_raw("msswift_compare", result)
    return result


def main() -> None:
    """Parse the options, run, and print where the raw JSON went."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--figures", default=",".join(FIGURES))
    parser.add_argument("--encode-n", type=int, default=10_000)
    parser.add_argument("--train-samples", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--infer-n", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    parser.add_argument("--merge", action="store_true", help="replace only these figures in the existing raw JSON")
    args = parser.parse_args()
    result = run(tuple(args.figures.split(",")), args.runs, args.encode_n, args.train_samples,
                 batch_size=args.batch_size, infer_n=args.infer_n, max_new_tokens=args.max_new_tokens,
                 merge=args.merge)
    print(json.dumps({k: v for k, v in result.items() if k in ("errors", "seconds")}, indent=2))


if __name__ == "__main__":
    main()
