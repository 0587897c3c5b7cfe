"""``make demo`` / ``python -m swiftcore_tiny.demo``: the main job end to end on a built-in default.

1. ``make-tiny``: a random tiny model with its real special tokens and official chat template: the model
   spec an installed plugin offers as the demo's (``ModelSpec(demo=True)``; Qwen3.5's plugin does), or
   ``--model NAME``.
2. A small synthetic task (is a number even or odd?) bundled as generated data, with held-out numbers.
3. Ask the untrained model the held-out questions; train with ``swiftcore train``'s recipe; ask again.
4. Show accuracy before vs after and where the checkpoint, log and loss plot are.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["DemoResult", "demo_model", "main", "parity_records", "run_demo"]


def demo_model(plugins: PluginSet) -> Any:
    """The model spec the installed plugins offer for the demo (``ModelSpec.demo``).

    The core names no model family: the demo's default is whatever an installed model plugin declares.
    When several do, the first by name is taken (so the choice is stable); ``--model`` picks another.

    Raises:
        SwiftcoreError: no installed plugin offers a demo model.
    """
    from swiftcore.api import SwiftcoreError

    offered = sorted((s for s in plugins.registry.all("model") if s.demo), key=lambda s: (s.name, str(s.provider)))
    if not offered:
        names = ", ".join(sorted(s.name for s in plugins.registry.all("model") if s.tiny_config)) or "none"
        raise SwiftcoreError(
            "no installed model plugin offers a demo model (ModelSpec(demo=True)); install a model plugin "
            f"(`swiftcore plugins` lists what is installed) or pass --model NAME (models that make tiny: {names})"
        )
    return offered[0]


def parity_records(numbers: list[int]) -> list[dict]:
    """Conversations asking whether each number is even or odd, answered correctly."""
    return [
        {
            "messages": [
                {"role": "user", "content": f"Is {n} even or odd?"},
                {"role": "assistant", "content": "even" if n % 2 == 0 else "odd"},
            ]
        }
        for n in numbers
    ]


def _accuracy(engine, records: list[dict]) -> tuple[float, list[tuple[str, str, str]]]:
    questions = [{"messages": r["messages"][:1]} for r in records]
    replies = engine.generate(questions, max_new_tokens=8, batch_size=32)
    rows = []
    correct = 0
    for record, reply in zip(records, replies):
        expected = record["messages"][1]["content"]
        answer = reply.content.strip()
        correct += answer == expected
        rows.append((record["messages"][0]["content"], expected, answer))
    return correct / len(records), rows


@dataclass
class DemoResult:
    """What the demo measured and where it left its outputs."""

    before: float
    after: float
    rows: list[tuple[str, str, str]]
    training: Any
    seconds: float


def run_demo(
    out: str | Path = "demo-out",
    model: str | None = None,
    steps: int = 160,
    tuner: str = "full",
    echo: Any = print,
) -> DemoResult:
    """Make a tiny model, ask it the held-out questions, train it, ask again (see the module docstring).

    Args:
        out: the output folder (replaced).
        model: the model spec to make tiny (default: the one an installed plugin offers, see
            :func:`demo_model`).
        steps: training steps.
        tuner: ``full`` or ``lora``.
        echo: where progress lines go (``print``; a no-op to run quietly).
    """
    import logging

    logging.basicConfig(level=logging.WARNING)
    from swiftcore_infer import create_engine
    from swiftcore_train import TrainConfig, run_training

    from swiftcore.api import load_plugins
    from swiftcore_tiny.checkpoint import make_tiny

    started = time.perf_counter()
    out = Path(out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    plugins = load_plugins(export_env=True)
    spec = plugins.registry.get("model", model) if model else demo_model(plugins)

    echo(f"[1/4] making a tiny random {spec.name} checkpoint ({spec.provider})")
    model_dir = make_tiny(spec, out / "tiny-model", seed=0)

    rng = random.Random(0)
    numbers = rng.sample(range(10, 1000), 640)
    train_numbers, held_out = numbers[:600], numbers[600:]
    data = out / "parity_train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in parity_records(train_numbers)))
    test_records = parity_records(held_out)
    echo(f"[2/4] task: 'Is N even or odd?' — {len(train_numbers)} training numbers, {len(held_out)} held out ({data})")

    before, _ = _accuracy(create_engine("transformers", model_dir, plugins), test_records)
    echo(f"      before training: {before:.0%} of held-out questions answered correctly")

    echo(f"[3/4] training ({tuner}, {steps} steps on CPU)")
    cfg = TrainConfig(
        model=str(model_dir),
        dataset=(str(data),),
        output_dir=str(out / "run"),
        tuner=tuner,
        learning_rate=3e-3 if tuner == "full" else 1e-2,
        lora_rank=16,
        lora_alpha=32,
        lr_scheduler="cosine",
        warmup_ratio=0.05,
        max_steps=steps,
        batch_size=16,
        max_length=64,
        logging_steps=10,
        save_steps=steps,
        seed=0,
        plugins=tuple(plugins.resolved_specs),
    )
    result = run_training(cfg, plugins)

    # The checkpoint records how it was trained to be prompted (thinking off: the replies carry no
    # reasoning), and the engine prompts it that way: the same prompt as in training.
    after, rows = _accuracy(create_engine("transformers", result.last_checkpoint, plugins), test_records)
    echo(f"[4/4] after training: {after:.0%} of held-out questions answered correctly (before: {before:.0%})")
    for question, expected, answer in rows[:6]:
        mark = "ok " if answer == expected else "MISS"
        echo(f"      {mark} {question!r:28} -> {answer!r} (expected {expected!r})")
    seconds = time.perf_counter() - started
    echo(f"\ncheckpoint: {result.last_checkpoint}\nlog:        {result.log_file}\nloss plot:  {result.plot_file}")
    echo(f"done in {seconds:.0f} s")
    return DemoResult(before=before, after=after, rows=rows, training=result, seconds=seconds)


def main(argv: list[str] | None = None) -> None:
    """Run the demo (see the module docstring)."""
    parser = argparse.ArgumentParser(
        prog="swiftcore demo", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default="demo-out", help="output folder (replaced)")
    parser.add_argument("--model", default=None, help="model spec to make tiny (default: the one a plugin offers)")
    parser.add_argument("--steps", type=int, default=160)
    parser.add_argument("--tuner", default="full", choices=("full", "lora"))
    args = parser.parse_args(argv)
    from swiftcore.api import SwiftcoreError

    try:
        run_demo(args.out, args.model, args.steps, args.tuner)
    except SwiftcoreError as exc:
        raise SystemExit(f"swiftcore demo: {exc}") from None


if __name__ == "__main__":
    main()
