"""Figure 18 (informational): every recipe the Megatron engine runs, against the transformers engine.

``swiftcore train --recipe R`` (transformers engine: TRL's trainers for dpo/kto/rm/grpo, swiftcore-train's for sft)
against ``swiftcore train --engine megatron --recipe R`` (TP1, one process), same tiny Qwen3.5 (``make-tiny
qwen3_5``), same rows, full fine-tuning, fp32, one thread per process (``OMP_NUM_THREADS=1``):

- sft: 64 chats of ``conversations.mixed_length_corpus``, batch 2;
- dpo, rm: 64 pairs of the vowel task ("say vowels" prefers four vowels to four consonants; the engines' preference
  tests' task), batch 4; dpo with the policy's own copy as the reference;
- kto: the same rows, unpaired (chosen desirable, rejected undesirable), batch 4;
- grpo: 16 prompts, 2 a step, 8 completions of up to 4 tokens, the vowel format reward, rollouts by swiftcore's
  transformers engine (the rollout engine both engines use), full weights synced every step.

Seconds per step: the run logs every step (``--logging-steps 1``) to ``logs.jsonl``; the benchmark notes when each
step's record appears and takes the median gap between consecutive records after the first (start-up, loading,
encoding, the first step's warm-up and saving left out: neither engine logs a step time for every recipe). Runs
alternate engines, so a busy machine slows both alike; the figure is the ratio.

Usage: ``python bench/megatron_recipes.py [--runs 2] [--steps 8]``; raw JSON goes to
``bench/raw/megatron_recipes.json`` and the figure replaces the ``megatron-recipes`` section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from common import machine, machine_text, replace_section, run_child, summarize, write_raw
from conversations import mixed_length_corpus, write_jsonl

BIN = Path(sys.executable).parent
RECIPES = ("sft", "dpo", "kto", "rm", "grpo")
ENGINES = ("transformers", "megatron")
BEGIN, END = "<!-- megatron-recipes:begin -->", "<!-- megatron-recipes:end -->"
VOWEL = r"format.pattern=^\s*[aeiouAEIOU]"


def _vowel_pairs(n: int, seed: int = 0) -> list[dict]:
    """``n`` preference rows of the vowel task (messages with the chosen reply, ``rejected_response``)."""
    rng = random.Random(seed)

    def letters(pool: str) -> str:
        return " ".join(rng.choice(pool) for _ in range(4))

    rows = []
    for _ in range(n):
        asked = rng.choice(["vowels", "consonants"])
        vowel, consonant = letters("aeiou"), letters("bcdfgklmnprst")
        chosen, rejected = (vowel, consonant) if asked == "vowels" else (consonant, vowel)
        messages = [{"role": "user", "content": f"say {asked}"}, {"role": "assistant", "content": chosen}]
        rows.append({"messages": messages, "rejected_response": rejected})
    return rows


def _kto_rows(pairs: list[dict]) -> list[dict]:
    """The pairs unpaired: each chosen reply desirable, each rejected one undesirable."""
    rows = []
    for pair in pairs:
        prompt, chosen = pair["messages"][0]["content"], pair["messages"][1]["content"]
        rows += [{"prompt": prompt, "completion": chosen, "label": True},
                 {"prompt": prompt, "completion": pair["rejected_response"], "label": False}]  # fmt: skip
    return rows


def _datasets(work: Path) -> dict[str, Path]:
    """Each recipe's rows, written once."""
    pairs = _vowel_pairs(64)
    paths = {
        "sft": write_jsonl(mixed_length_corpus(64, seed=3, max_turns=3), work / "chats.jsonl"),
        "dpo": work / "pairs.jsonl",
        "kto": work / "kto.jsonl",
        "grpo": work / "prompts.jsonl",
    }
    paths["dpo"].write_text("".join(json.dumps(r) + "\n" for r in pairs))
    paths["kto"].write_text("".join(json.dumps(r) + "\n" for r in _kto_rows(pairs)))
    paths["grpo"].write_text("".join(json.dumps({"prompt": f"Write a word, number {i}."}) + "\n" for i in range(16)))
    paths["rm"] = paths["dpo"]
    return paths


def _command(recipe: str, engine: str, model: Path, data: Path, out: Path, steps: int) -> list[str]:
    """The ``swiftcore train`` command of one run."""
    command = [str(BIN / "swiftcore"), "train", "--recipe", recipe, "--model", str(model), "--dataset", str(data),
               "--output-dir", str(out), "--tuner", "full", "--max-steps", str(steps), "--logging-steps", "1",
               "--save-steps", "100000", "--no-plot", "--seed", "0", "--split-ratio", "0"]  # fmt: skip
    if recipe == "sft":
        command += ["--batch-size", "2", "--max-length", "1024"]
    elif recipe == "grpo":
        command += ["--batch-size", "2", "--reward", "format", "--reward-option", VOWEL, "--num-generations", "8",
                    "--max-completion-length", "4", "--rollout-engine", "transformers"]  # fmt: skip
    else:
        command += ["--batch-size", "4"]
    if engine == "megatron":
        command += ["--engine", "megatron"]
    return command


def _step_seconds(command: list[str], log: Path, env: dict[str, str]) -> tuple[list[float], float]:
    """Run ``command`` and return (the gaps in seconds between its consecutive step records after the first, its
    process tree's peak RSS in MB)."""
    seen: list[float] = []

    def watch() -> None:
        if log.is_file():
            lines = sum(1 for line in log.read_text().splitlines() if '"loss"' in line)
            seen.extend([time.perf_counter()] * (lines - len(seen)))

    child = run_child(command, env=env, watch=watch)
    if child.returncode != 0:
        raise SystemExit(f"{shlex.join(command)} failed:\n{child.output[-3000:]}")
    gaps = [b - a for a, b in itertools.pairwise(seen[1:])]
    if not gaps:
        raise SystemExit(f"{shlex.join(command)}: fewer than 3 step records seen in {log}")
    return gaps, child.peak_rss_mb


def run(runs: int, steps: int, recipes: tuple[str, ...] = RECIPES) -> dict:
    """Measure every recipe on both engines ``runs`` times, alternating engines; return the raw result."""
    if steps < 4:
        raise SystemExit(f"--steps {steps}: at least 4 (the first step and its record are left out)")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}, "OMP_NUM_THREADS": "1"}
    seconds: dict[str, dict[str, list[float]]] = {r: {e: [] for e in ENGINES} for r in recipes}
    peak: dict[str, dict[str, list[float]]] = {r: {e: [] for e in ENGINES} for r in recipes}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        from swiftcore_tiny import make_tiny

        from swiftcore import load_plugins

        model = make_tiny(load_plugins(env={}).registry.get("model", "qwen3_5"), work / "tiny", seed=0)
        data = _datasets(work)
        for i in range(runs):
            for recipe in recipes:
                for engine in ENGINES:
                    out = work / f"{recipe}-{engine}-{i}"
                    gaps, rss = _step_seconds(_command(recipe, engine, model, data[recipe], out, steps),
                                              out / "logs.jsonl", env)  # fmt: skip
                    seconds[recipe][engine].append(statistics.median(gaps))
                    peak[recipe][engine].append(rss)
                    shutil.rmtree(out)
                    print(f"run {i + 1}/{runs} {recipe:5s} {engine:12s} {seconds[recipe][engine][-1]:.3f} s/step",
                          flush=True)  # fmt: skip
    return {
        "machine": machine(), "runs": runs, "steps": steps, "seconds": round(time.perf_counter() - start, 1),
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "recipes": {r: {e: {"seconds_per_step": summarize(seconds[r][e]), "peak_rss_mb": summarize(peak[r][e])}
                        for e in ENGINES} for r in recipes},
    }  # fmt: skip


def render(raw: dict) -> str:
    """The Markdown section of figure 18."""
    lines = [BEGIN, "", "## 18. Megatron engine recipes vs the transformers engine (informational)", "",
             f"`bench/megatron_recipes.py`, {raw['runs']} alternating runs of {raw['steps']} steps; seconds per step "
             "= the median gap between consecutive step records after the first; tiny Qwen3.5, full "
             f"fine-tuning, fp32, one thread per process, megatron at TP1; {raw['machine']['date']}, "
             f"{machine_text(raw['machine'])}; load average {raw.get('load_average', ['?'])[-1]} (15 min). "
             "Median (min–max).", "",
             "| recipe | transformers engine s/step | megatron engine s/step | megatron / transformers | "
             "peak RSS MB (transformers / megatron) |", "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for recipe, engines in raw["recipes"].items():
        t, m = engines["transformers"]["seconds_per_step"], engines["megatron"]["seconds_per_step"]
        ratio = m["median"] / t["median"] if t["median"] > 0 else float("nan")
        rss = " / ".join(f"{engines[e]['peak_rss_mb']['median']:.0f}" for e in ENGINES)
        lines.append(f"| {recipe} | {t['median']:.3f} ({t['min']:.3f}–{t['max']:.3f}) | "
                     f"{m['median']:.3f} ({m['min']:.3f}–{m['max']:.3f}) | {ratio:.2f}x | {rss} |")  # fmt: skip
    lines += [
        "",
        "Informational: a 0.5 M-parameter model, where a step is mostly Python and per-layer overhead, and GRPO's "
        "step is mostly its rollouts (the same transformers rollout engine on both; the megatron engine adds the "
        "bridge's export of the weights to the engine each step). The GPU script (`scripts/gpu_check.sh`) is where "
        "the engines are compared at a size where the split of work matters. Peak RSS is the process tree's, "
        "start-up included.",
        "",
        END,
    ]
    return "\n".join(lines)


def write_section(raw: dict) -> Path:
    """Replace (or append) figure 18's section of RESULTS.md."""
    return replace_section(render(raw), BEGIN, END)


def main() -> None:
    """Run figure 18 and write its raw JSON and RESULTS.md section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8, help="steps of each run (the first is left out)")
    parser.add_argument("--recipes", default=",".join(RECIPES), help="comma-separated, from " + ",".join(RECIPES))
    args = parser.parse_args()
    raw = run(args.runs, args.steps, tuple(args.recipes.split(",")))
    write_raw("megatron_recipes", raw)
    print(write_section(raw))


if __name__ == "__main__":
    main()
