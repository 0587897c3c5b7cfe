"""Figure 10: where a GRPO step's time goes (rollout, reward, sync, the rest), rollout tokens/s, and the weight sync
of LoRA against full fine-tuning, on three model sizes.

Each run is ``swiftcore train --recipe grpo`` (the Python API of the same command) with ``--rollout-engine
transformers``: swiftcore's engine colocated in the trainer's process, synced before each generation round. The
recipe logs per step (``StepTiming`` in ``swiftcore_recipe_rl.trainer``): ``rollout_s`` (generation, the sync left
out), ``rollout_tokens``, ``reward_s``, ``sync_s``, ``sync_bytes``, and TRL's ``step_time`` (the whole step); "rest"
is ``step_time`` minus the other three: log-probs, loss, backward and the optimiser step. The first step is left
out of the means (start-up). Sizes: the stock tiny Qwen3.5 (``swiftcore make-tiny qwen3_5``, hidden 64) and the same
with hidden 256 (intermediate 768) and 512 (intermediate 1536); all random, the real tokenizer and template. The runs
alternate (``--rounds``), their step means pooled.

ms-swift's ``swift rlhf --rlhf_type grpo`` runs beside swiftcore's GRPO in figure 11 (``msswift_grpo.py``: the stock
tiny model, LoRA, both as child processes, alternating).

Usage: ``python bench/rl_steps.py [--steps 6] [--rounds 1]``; raw JSON goes to ``bench/raw/rl_steps.json`` and the
figure replaces the ``rl-steps`` section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from common import machine, machine_text, replace_section, write_raw

BEGIN, END = "<!-- rl-steps:begin -->", "<!-- rl-steps:end -->"
SIZES = {
    "hidden 64": {},
    "hidden 256": {"hidden_size": 256, "intermediate_size": 768},
    "hidden 512": {"hidden_size": 512, "intermediate_size": 1536},
}
PARTS = ("rollout_s", "reward_s", "sync_s")


def _checkpoint(plugins: Any, root: Path, name: str, overrides: dict[str, int]) -> tuple[Path, int]:
    """The tiny Qwen3.5 with ``overrides`` on its text config (the vision tower's output follows the width)."""
    import torch
    from swiftcore_tiny import make_tiny
    from transformers import AutoConfig

    from swiftcore.api.models import model_class_for, read_hf_config

    spec = plugins.registry.get("model", "qwen3_5")
    path = make_tiny(spec, root / name.replace(" ", "-"), seed=0)
    if overrides:
        data = AutoConfig.from_pretrained(path).to_dict()
        data["text_config"].update(overrides)
        data["vision_config"]["out_hidden_size"] = overrides["hidden_size"]
        config = type(AutoConfig.from_pretrained(path)).from_dict(data)
        torch.manual_seed(0)
        model_class_for(spec, read_hf_config(path))(config).save_pretrained(path)
    model = model_class_for(spec, read_hf_config(path)).from_pretrained(path)
    return path, sum(p.numel() for p in model.parameters())


def _dataset(root: Path) -> str:
    data = root / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Write a word, number {i}."}) + "\n" for i in range(64)))
    return str(data)


def _run(plugins: Any, model: Path, data: str, out: Path, tuner: str, steps: int) -> list[dict[str, Any]]:
    """One GRPO run; its per-step log rows."""
    from swiftcore_recipe_rl.options import GRPOOptions
    from swiftcore_recipe_rl.recipe import run
    from swiftcore_train import TrainConfig

    cfg = TrainConfig(
        model=str(model), dataset=(data,), output_dir=str(out), tuner=tuner, learning_rate=1e-3 if tuner == "full"
        else 5e-3, lr_scheduler="constant", max_steps=steps, batch_size=2, logging_steps=1, save_steps=10_000,
        seed=0, plot=False,
    )  # fmt: skip
    options = GRPOOptions(
        reward=("format",), reward_option=(r"format.pattern=^\s*[aeiouAEIOU]",), num_generations=8,
        max_completion_length=16, rollout_engine="transformers",
    )  # fmt: skip
    run(cfg, plugins, options)
    rows = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    return [row for row in rows if "step_time" in row]


def run_all(steps: int, rounds: int) -> dict[str, Any]:
    """Every size x tuner, ``rounds`` times alternating; the raw per-step rows."""
    from swiftcore.api import load_plugins

    start = time.perf_counter()
    plugins = load_plugins(env={})
    runs: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="swiftcore-bench-rl-") as tmp:
        root = Path(tmp)
        data = _dataset(root)
        models = {name: _checkpoint(plugins, root, name, overrides) for name, overrides in SIZES.items()}
        for r in range(rounds):
            for name, (path, count) in models.items():
                for tuner in ("lora", "full"):
                    key = f"{name} / {tuner}"
                    rows = _run(plugins, path, data, root / f"out-{r}-{name.replace(' ', '-')}-{tuner}", tuner, steps)
                    entry = runs.setdefault(key, {"size": name, "tuner": tuner, "parameters": count, "steps": []})
                    entry["steps"].extend(rows[1:])  # the first step carries start-up
                    print(f"{key}: {len(rows)} steps", flush=True)
    return {"machine": machine(), "seconds": round(time.perf_counter() - start, 1), "steps": steps,
            "rounds": rounds, "runs": runs}  # fmt: skip


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.fmean(float(row[key]) for row in rows)


def render(raw: dict[str, Any]) -> str:
    """The RESULTS.md section of ``raw``."""
    m = raw["machine"]
    lines = [BEGIN, "", "## 10. Online RL: where a GRPO step's time goes, LoRA vs full sync, by model size", "",
             f"`bench/rl_steps.py --steps {raw['steps']} --rounds {raw['rounds']}`, {m.get('date', '?')}, "
             f"{raw['seconds']:.0f} s, {machine_text(m)}: `swiftcore train --recipe grpo --rollout-engine "
             "transformers` on a tiny Qwen3.5 at three widths (random weights), 2 prompts x 8 completions of up to 16 "
             "tokens a step, the `format` reward; step means without each run's first step (which carries the "
             "first sync: a LoRA policy's adapter loaded, a full policy's whole state dict; the later full syncs "
             "leave out the frozen vision tower, and a LoRA sync copies the adapter's tensors in place). \"rest\" "
             "is TRL's `step_time` minus rollout, reward and sync: log-probs, loss, backward, optimiser.", "",
             "| model / tuner | parameters | step (s) | rollout | reward | sync | rest | rollout tokens/s "
             "| sync MB | sync ms |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for key, entry in raw["runs"].items():
        rows = entry["steps"]
        step = _mean(rows, "step_time")
        parts = {part: _mean(rows, part) for part in PARTS}
        rest = step - sum(parts.values())
        tokens = sum(float(r["rollout_tokens"]) for r in rows) / sum(float(r["rollout_s"]) for r in rows)
        share = " | ".join(f"{parts[p]:.3f} ({parts[p] / step:.0%})" for p in PARTS)
        lines.append(f"| {key} | {entry['parameters'] / 1e6:.2f} M | {step:.3f} | {share} | {rest:.3f} "
                     f"({rest / step:.0%}) | {tokens:.0f} | {_mean(rows, 'sync_bytes') / 1e6:.3f} "
                     f"| {parts['sync_s'] * 1e3:.1f} |")  # fmt: skip
    by = {(e["size"], e["tuner"]): e for e in raw["runs"].values()}
    ratios = []
    for size in dict.fromkeys(e["size"] for e in raw["runs"].values()):
        if (size, "lora") in by and (size, "full") in by:
            lora, full = by[size, "lora"]["steps"], by[size, "full"]["steps"]
            ratios.append(f"{size}: full sync {_mean(full, 'sync_bytes') / _mean(lora, 'sync_bytes'):.1f}x the LoRA "
                          f"sync's bytes, {_mean(full, 'sync_s') / _mean(lora, 'sync_s'):.1f}x its time")  # fmt: skip
    scaling = []
    for tuner in ("lora", "full"):
        points = [(by[size, tuner]["parameters"], by[size, tuner]["steps"]) for size in SIZES if (size, tuner) in by]
        if len(points) > 1:
            cells = ", ".join(f"{_mean(rows, 'sync_s') * 1e3:.1f} ms for {_mean(rows, 'sync_bytes') / 1e6:.2f} MB "
                              f"({n / 1e6:.1f} M parameters)" for n, rows in points)  # fmt: skip
            (n0, first), (n1, last) = points[0], points[-1]
            grow = [_mean(last, key) / _mean(first, key) for key in ("sync_s", "sync_bytes")]
            scaling.append(f"{tuner}: {cells}; from the smallest to the largest model the sync's time grew "
                           f"{grow[0]:.1f}x for {grow[1]:.1f}x the bytes ({n1 / n0:.1f}x the parameters)")  # fmt: skip
    lines += ["", "Side by side in this run: " + "; ".join(ratios) + ".", "",
              "Scaling with the model: " + "; ".join(scaling) + ".", "",
              "ms-swift's `swift rlhf --rlhf_type grpo` beside this recipe on the same model: figure 11 "
              "(`bench/msswift_grpo.py`).", "", END]  # fmt: skip
    return "\n".join(lines)


def write_section(raw: dict[str, Any]) -> Path:
    """Replace the figure's section of RESULTS.md."""
    return replace_section(render(raw), BEGIN, END)


def main() -> None:
    """Run the figure, write its raw JSON and its RESULTS.md section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="optimiser steps per run (the first is left out)")
    parser.add_argument("--rounds", type=int, default=1, help="alternating rounds of every run")
    args = parser.parse_args()
    raw = run_all(args.steps, args.rounds)
    print(write_raw("rl_steps", raw))
    print(write_section(raw))


if __name__ == "__main__":
    main()
