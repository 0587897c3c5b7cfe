"""Figure 11: GRPO side by side, ``swiftcore train --recipe grpo`` vs ``swift rlhf --rlhf_type grpo`` (ms-swift 4.6.0),
CPU, LoRA: seconds per step, rollout tokens/s, peak RSS, and a first step that shows both score the same thing.

A module of its own rather than an extension of figure 10 (``rl_steps.py``): figure 10 runs swiftcore in-process
(the Python API) to split a step by model size and tuner, one system only; a side-by-side needs both systems as
child processes (ms-swift lives in its own interpreter, and peak RSS is per process) and alternating runs, as
figures 3 and 5 (``msswift_train.py``, ``msswift_dpo.py``) have, whose pieces it reuses (``peer_checkpoint``,
``run_child``, ``alternate``).

Same on both sides: the tiny Qwen3.5 (``swiftcore make-tiny qwen3_5``, random weights; ms-swift gets
``peer_checkpoint``'s copy), the same prompts file (figure 10's "Write a word, number i." rows, as ``messages``,
which both read), prompted alike (swiftcore ``--disable-thinking``; ms-swift's qwen3_5 template puts the same empty
``<think>\\n\\n</think>\\n\\n`` into the generation prompt by default: the check below compares the prompt texts),
LoRA r=8/alpha=32/dropout 0 on all linear layers of the language model, lr 5e-3 constant without warm-up,
2 prompts x 8 completions per step (ms-swift's ``--per_device_train_batch_size`` counts completions: 16), up to
16 completion tokens, temperature 1, top-p 1, top-k off, ``grpo`` loss, beta 0 (no reference model), epsilon 0.2,
rewards scaled by group, gradient accumulation 1, no gradient checkpointing (ms-swift's default, on, switched
off), fp32, seed 0, ``OMP_NUM_THREADS=--threads`` (default 1) for both.

The reward: swiftcore's built-in ``format`` (``--reward-option format.pattern=[A-Z]``: 1 when the completion holds a
capital letter) and, on ms-swift, the same regex as an external reward (``_msswift_grpo_plugin.py``,
``--reward_funcs swiftcore_format``). ms-swift's own ``format`` has a fixed ``<think>..</think><answer>..`` pattern
that a random model never matches (all rewards 0: no advantage, no gradient). ``[A-Z]`` is chosen because it is
blind to the two ways the reward texts differ: ms-swift's completion text starts with the generation prompt's
empty think block (a sample's reply is its engine's ``choice.message.content``, ``swift/rl_core/data.py``, which
carries it; the sampled token ids do not), and special tokens may be decoded on one side and skipped on the other;
neither holds a capital letter.

Series, alternating in this order each round (``--rounds``):

- ``swiftcore_trainer``: ``--rollout-engine trainer``, TRL's ``generate`` on the policy in the trainer's process,
  no weight sync. The like-for-like series: ms-swift without vLLM does the same.
- ``msswift``: ``--use_vllm false`` (its default): ms-swift's ``TransformersEngine`` built on the policy model itself
  (``swift/rlhf_trainers/rollout_mixin.py:390-396``, ``_prepare_vllm``), no weight sync.
- ``swiftcore_engine``: ``--rollout-engine transformers``, figure 10's set-up: swiftcore's engine colocated in the
  trainer's process, the LoRA adapter synced to it before each round.

Clock: TRL's ``step_time`` on both sides (``GRPOTrainer.training_step``; ms-swift 4.6.0's GRPOTrainer subclasses
TRL 0.29.1's, swiftcore runs TRL 1.16's): one optimiser step's rollout, rewards, log-probs, loss and backward; the
mean over each run's steps without its first (start-up). Rollout tokens/s = completion tokens / rollout seconds:
swiftcore logs ``rollout_s`` and ``rollout_tokens`` (its ``StepTiming``, around TRL's ``_generate``); ms-swift times
its generation (``profiling_context(self, 'generate')``) but reports that to wandb/swanlab only, so
``_msswift_grpo_plugin.py`` logs the same span (``_generate_completions``) as ``bench/rollout_s``. Peak RSS: the
largest resident set of the run's process tree (``common.run_child``).

First-step check: one step with the whole check set (32 prompts x 2 completions) in one batch, so data order cannot
matter, and top-k 1 (greedy; swiftcore refuses temperature 0, so both sample at temperature 1 from the one most
likely token). Same weights, same prompt ids and greedy decoding give the same completions, so the first step's
reward mean (the share of the 32 greedy completions that hold a capital letter) must be equal on all three series;
ms-swift's prompt texts (``--log_completions``) are compared with swiftcore's rendering of the same rows.

If ms-swift cannot run GRPO here, the check run's error (its last error line and the output's tail) is recorded
in the raw JSON and the section instead of its numbers, and the swiftcore series run alone.

Usage: ``python bench/msswift_grpo.py [--rounds 3] [--steps 6] [--threads 1]``; raw JSON goes to
``bench/raw/msswift_grpo.json`` and the figure replaces the ``msswift-grpo`` section of RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    PEER_SWIFT,
    ROOT,
    alternate,
    machine,
    machine_text,
    pair_ratio,
    replace_section,
    run_child,
    summarize,
    write_raw,
)

__all__ = ["SERIES", "grpo_figure", "msswift_grpo", "read_msswift_log", "read_swiftcore_log", "render", "run",
           "swiftcore_grpo", "write_section"]  # fmt: skip

BEGIN, END = "<!-- msswift-grpo:begin -->", "<!-- msswift-grpo:end -->"
SWIFTCORE = Path(sys.executable).parent / "swiftcore"
HERE = Path(__file__).resolve().parent
PLUGINS = (HERE / "_msswift_plugin.py", HERE / "_msswift_grpo_plugin.py")
SERIES = ("swiftcore_trainer", "msswift", "swiftcore_engine")
LABELS = {
    "swiftcore_trainer": "swiftcore, `--rollout-engine trainer` (TRL generate on the policy)",
    "msswift": "ms-swift, `--use_vllm false` (its TransformersEngine on the policy)",
    "swiftcore_engine": "swiftcore, `--rollout-engine transformers` (engine + LoRA sync, figure 10's)",
}
#: The reward's regex on both sides (see the module docstring).
PATTERN = "[A-Z]"
#: The per-step keys kept in the raw JSON (ms-swift's ``bench/...`` keys are renamed to swiftcore's).
KEYS = ("step_time", "rollout_s", "rollout_tokens", "reward_s", "sync_s", "reward", "completions/mean_length")


def default_setup(steps: int = 6, threads: int = 1) -> dict[str, Any]:
    """The settings both systems get."""
    return {
        "steps": steps, "prompts_per_step": 2, "num_generations": 8, "max_completion_length": 16,
        "temperature": 1.0, "top_p": 1.0, "top_k": 0, "lora_rank": 8, "lora_alpha": 32, "lora_dropout": 0.0,
        "learning_rate": 5e-3, "lr_scheduler": "constant", "loss_type": "grpo", "beta": 0.0, "epsilon": 0.2,
        "scale_rewards": "group", "dtype": "float32", "seed": 0, "threads": threads, "reward_pattern": PATTERN,
    }  # fmt: skip


def check_setup(setup: dict[str, Any], prompts: int = 32) -> dict[str, Any]:
    """The first-step check's settings: one greedy step over ``prompts`` prompts x 2 completions."""
    return {**setup, "steps": 1, "prompts_per_step": prompts, "num_generations": 2, "top_k": 1}


def make_prompts(path: Path, n: int, start: int = 0) -> Path:
    """``n`` one-turn prompts (figure 10's) as ``messages`` rows, which both systems read."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [{"messages": [{"role": "user", "content": f"Write a word, number {i}."}]} for i in range(start, start + n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _env(setup: dict[str, Any]) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(setup["threads"]), "SWIFTCORE_BENCH_REWARD_PATTERN": PATTERN}


def _step_rows(rows: list[dict[str, Any]], rename: dict[str, str] | None = None) -> list[dict[str, float]]:
    out = []
    for row in rows:
        if "step_time" not in row:
            continue
        row = {(rename or {}).get(k, k): v for k, v in row.items()}
        out.append({k: float(row[k]) for k in KEYS if k in row})
    return out


def read_swiftcore_log(out_dir: Path) -> list[dict[str, float]]:
    """swiftcore's per-step rows (``OUT/logs.jsonl``), the :data:`KEYS` only."""
    rows = [json.loads(line) for line in (out_dir / "logs.jsonl").read_text().splitlines() if line.strip()]
    return _step_rows(rows)


def read_msswift_log(out_dir: Path) -> list[dict[str, float]]:
    """ms-swift's per-step rows (``OUT/v*/logging.jsonl``), the :data:`KEYS` only."""
    logs = sorted(out_dir.glob("v*/logging.jsonl"))
    if not logs:
        raise RuntimeError(f"ms-swift wrote no logging.jsonl under {out_dir}")
    rows = [json.loads(line) for line in logs[-1].read_text().splitlines() if line.strip()]
    rename = {"bench/rollout_s": "rollout_s", "bench/rollout_tokens": "rollout_tokens", "bench/reward_s": "reward_s"}
    return _step_rows(rows, rename)


def _measure(steps: list[dict[str, float]], child: Any) -> dict[str, Any]:
    """One run's numbers: means over its steps without the first, and the run's first-step values."""
    if not steps:
        raise RuntimeError(f"the run logged no step:\n{child.output[-2000:]}")
    rest = steps[1:] or steps
    mean = {k: statistics.fmean(r.get(k, 0.0) for r in rest) for k in ("step_time", "rollout_s", "reward_s", "sync_s")}
    rollout = sum(r.get("rollout_s", 0.0) for r in rest)
    tokens = sum(r.get("rollout_tokens", 0.0) for r in rest)
    return {
        "step_s": mean["step_time"], "rollout_s": mean["rollout_s"], "reward_s": mean["reward_s"],
        "sync_s": mean["sync_s"], "rollout_tokens_per_s": tokens / rollout if rollout else None,
        "first_reward": steps[0].get("reward"), "first_mean_length": steps[0].get("completions/mean_length"),
        "steps": steps, "wall_s": child.seconds, "peak_rss_mb": child.peak_rss_mb,
    }  # fmt: skip


def swiftcore_grpo(model: Path, data: Path, setup: dict[str, Any], *, engine: str, out_dir: Path) -> dict[str, Any]:
    """Run ``swiftcore train --recipe grpo`` once (``--rollout-engine engine``) and measure it."""
    shutil.rmtree(out_dir, ignore_errors=True)
    s = setup
    argv = [
        str(SWIFTCORE), "train", "--recipe", "grpo", "--model", str(model), "--dataset", str(data),
        "--output-dir", str(out_dir), "--tuner", "lora", "--lora-rank", str(s["lora_rank"]),
        "--lora-alpha", str(s["lora_alpha"]), "--lora-dropout", str(s["lora_dropout"]),
        "--learning-rate", str(s["learning_rate"]), "--lr-scheduler", s["lr_scheduler"], "--warmup-ratio", "0",
        "--max-steps", str(s["steps"]), "--batch-size", str(s["prompts_per_step"]),
        "--gradient-accumulation-steps", "1", "--no-gradient-checkpointing", "--dtype", s["dtype"],
        "--seed", str(s["seed"]), "--logging-steps", "1", "--save-steps", "100000", "--no-plot", "--disable-thinking",
        "--reward", "format", "--reward-option", f"format.pattern={s['reward_pattern']}",
        "--num-generations", str(s["num_generations"]), "--max-completion-length", str(s["max_completion_length"]),
        "--rollout-temperature", str(s["temperature"]), "--rollout-top-p", str(s["top_p"]),
        "--rollout-top-k", str(s["top_k"]), "--grpo-loss-type", s["loss_type"], "--grpo-beta", str(s["beta"]),
        "--grpo-epsilon", str(s["epsilon"]), "--scale-rewards", s["scale_rewards"], "--rollout-engine", engine,
    ]  # fmt: skip
    child = run_child(argv, cwd=ROOT, env=_env(setup))
    if child.returncode != 0:
        raise RuntimeError(f"swiftcore train --recipe grpo failed (rc {child.returncode}):\n{child.output[-3000:]}")
    return _measure(read_swiftcore_log(out_dir), child)


def _error_line(output: str) -> str:
    lines = [ln for ln in output.splitlines() if "Error" in ln or "error" in ln]
    return (lines[-1] if lines else output[-500:]).strip()


def msswift_grpo(
    model: Path,
    data: Path,
    setup: dict[str, Any],
    *,
    out_dir: Path,
    log_completions: bool = False,
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Run ``swift rlhf --rlhf_type grpo`` once with the settings of :func:`swiftcore_grpo`; measure it.

    Returns the measurements, or ``{"refused": line, "returncode", "tail"}`` when ms-swift exits with an error.
    """
    shutil.rmtree(out_dir, ignore_errors=True)
    s = setup
    argv = [
        str(PEER_SWIFT), "rlhf", "--rlhf_type", "grpo", "--use_vllm", "false", "--model", str(model),
        "--model_type", "qwen3_5", "--template", "qwen3_5", "--external_plugins", *map(str, PLUGINS),
        "--dataset", str(data), "--reward_funcs", "swiftcore_format", "--tuner_type", "lora",
        "--lora_rank", str(s["lora_rank"]), "--lora_alpha", str(s["lora_alpha"]),
        "--lora_dropout", str(s["lora_dropout"]), "--target_modules", "all-linear",
        "--per_device_train_batch_size", str(s["prompts_per_step"] * s["num_generations"]),
        "--num_generations", str(s["num_generations"]), "--max_completion_length", str(s["max_completion_length"]),
        "--temperature", str(s["temperature"]), "--top_p", str(s["top_p"]), "--top_k", str(s["top_k"] or -1),
        "--loss_type", s["loss_type"], "--beta", str(s["beta"]), "--epsilon", str(s["epsilon"]),
        "--scale_rewards", s["scale_rewards"], "--gradient_accumulation_steps", "1",
        "--gradient_checkpointing", "false", "--learning_rate", str(s["learning_rate"]),
        "--lr_scheduler_type", s["lr_scheduler"], "--warmup_ratio", "0", "--max_steps", str(s["steps"]),
        "--logging_steps", "1", "--save_steps", "100000", "--output_dir", str(out_dir),
        "--dataloader_num_workers", "0", "--dataset_num_proc", "1", "--split_dataset_ratio", "0",
        "--report_to", "none", "--torch_dtype", s["dtype"], "--seed", str(s["seed"]), "--save_only_model", "true",
        "--log_completions", "true" if log_completions else "false", *extra,
    ]  # fmt: skip
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    child = run_child(argv, cwd=out_dir.parent, env=_env(setup))
    if child.returncode != 0:
        return {"refused": _error_line(child.output), "returncode": child.returncode, "tail": child.output[-1500:]}
    return _measure(read_msswift_log(out_dir), child)


def _msswift_prompts(out_dir: Path) -> list[str]:
    """The prompt texts ms-swift logged (``--log_completions``), one per completion."""
    logs = sorted(out_dir.glob("v*/completions.jsonl"))
    texts: list[str] = []
    for line in logs[-1].read_text().splitlines() if logs else []:
        if line.strip():
            texts += json.loads(line).get("prompt", [])
    return texts


def _swiftcore_prompts(data: Path, work: Path) -> list[str]:
    """swiftcore's generation-prompt texts of ``data``'s rows, thinking off (what ``--disable-thinking`` encodes)."""
    rows = [json.loads(line) for line in data.read_text().splitlines() if line.strip()]
    path = work / "render.jsonl"
    path.write_text("".join(json.dumps({**r, "chat_template_kwargs": {"enable_thinking": False}}) + "\n"
                            for r in rows))  # fmt: skip
    out = subprocess.run([str(SWIFTCORE), "template", "render", "--template", "qwen3_5", "--input", str(path),
                          "--generation-prompt"], capture_output=True, text=True, check=True).stdout  # fmt: skip
    return [json.loads(line)["text"] for line in out.splitlines() if line.startswith("{")]


def _trimmed(r: dict[str, Any]) -> dict[str, Any]:
    """A check run's result without its per-step rows (one step: its numbers are the first-step values)."""
    return {k: v for k, v in r.items() if k != "steps"}


def grpo_figure(
    model: Path, peer_model: Path, data: Path, check_data: Path, setup: dict[str, Any], rounds: int, work: Path
) -> dict[str, Any]:
    """Figure 11 (see the module docstring); returns the raw result."""
    check = check_setup(setup, prompts=sum(1 for line in check_data.read_text().splitlines() if line.strip()))
    first: dict[str, Any] = {}
    # The ms-swift check runs first: if ms-swift cannot run GRPO here, its reason is what the figure reports.
    theirs_check = msswift_grpo(peer_model, check_data, check, out_dir=work / "check-msswift", log_completions=True)
    msswift_ok = "refused" not in theirs_check
    first["msswift"] = _trimmed(theirs_check)
    prompts: dict[str, Any] = {}
    if msswift_ok:
        logged = set(_msswift_prompts(work / "check-msswift"))
        ours = _swiftcore_prompts(check_data, work)
        prompts = {"prompts": len(ours), "identical": sum(t in logged for t in ours), "example": ours[0]}
    for kind, engine in (("swiftcore_trainer", "trainer"), ("swiftcore_engine", "transformers")):
        first[kind] = _trimmed(swiftcore_grpo(model, check_data, check, engine=engine, out_dir=work / f"check-{kind}"))

    results: dict[str, list[dict[str, Any]]] = {k: [] for k in SERIES if msswift_ok or k != "msswift"}

    def ours_run(kind: str, engine: str) -> float:
        r = swiftcore_grpo(model, data, setup, engine=engine, out_dir=work / kind)
        results[kind].append(r)
        return r["step_s"]

    def theirs_run() -> float:
        r = msswift_grpo(peer_model, data, setup, out_dir=work / "msswift")
        if "refused" in r:
            raise RuntimeError(f"swift rlhf --rlhf_type grpo failed after its check run had passed: {r}")
        results["msswift"].append(r)
        return r["step_s"]

    systems = {"swiftcore_trainer": lambda: ours_run("swiftcore_trainer", "trainer")}
    if msswift_ok:
        systems["msswift"] = theirs_run
    systems["swiftcore_engine"] = lambda: ours_run("swiftcore_engine", "transformers")
    values = alternate(rounds, systems)
    out: dict[str, Any] = {
        "setup": setup, "check_setup": check, "per_run": results,
        "step_s": {k: summarize(v) for k, v in values.items()}, "raw_step_s": values,
        "rollout_tokens_per_s": {k: summarize([r["rollout_tokens_per_s"] for r in v]) for k, v in results.items()},
        "rollout_s": {k: summarize([r["rollout_s"] for r in v]) for k, v in results.items()},
        "reward_s": {k: summarize([r["reward_s"] for r in v]) for k, v in results.items()},
        "sync_s": {k: summarize([r["sync_s"] for r in v]) for k, v in results.items()},
        "peak_rss_mb": {k: summarize([r["peak_rss_mb"] for r in v]) for k, v in results.items()},
        "wall_s": {k: summarize([r["wall_s"] for r in v]) for k, v in results.items()},
        "first_step": first, "check_prompts": prompts,
    }  # fmt: skip
    if msswift_ok:  # ms-swift's step time over swiftcore's: > 1 means swiftcore is faster
        out["ratio_msswift_over_swiftcore_trainer"] = pair_ratio(values["msswift"], values["swiftcore_trainer"])
        out["ratio_msswift_over_swiftcore_engine"] = pair_ratio(values["msswift"], values["swiftcore_engine"])
        tps = {k: [r["rollout_tokens_per_s"] for r in v] for k, v in results.items()}
        out["ratio_rollout_tokens_per_s_swiftcore_trainer_over_msswift"] = pair_ratio(
            tps["swiftcore_trainer"], tps["msswift"]
        )
    else:
        out["msswift_error"] = theirs_check
    return out


def _versions() -> dict[str, str]:
    import importlib.metadata as m

    return {d: m.version(d) for d in ("swiftcore", "torch", "transformers", "peft", "trl")}


def _tree() -> dict[str, Any]:
    """The commit measured and the files under ``plugins/`` that differed from it (uncommitted work measured too)."""
    git = ["git", "--no-optional-locks", "-C", str(ROOT)]
    try:
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        status = subprocess.run([*git, "status", "--porcelain", "--", "plugins", "core"], capture_output=True,
                                text=True).stdout  # fmt: skip
    except OSError:
        return {}
    return {"commit": head, "uncommitted": [line[3:] for line in status.splitlines() if line.strip()]}


def run(rounds: int = 3, steps: int = 6, threads: int = 1, work: Path | None = None,
        command: str | None = None) -> dict[str, Any]:  # fmt: skip
    """Run figure 11, write ``bench/raw/msswift_grpo.json`` and its RESULTS.md section; returns the raw result."""
    from msswift_train import peer_checkpoint
    from peers import versions as peer_versions
    from train_throughput import make_tiny

    if steps < 2:
        raise ValueError("--steps must be >= 2: the first step of every run is left out")
    work = work or Path(tempfile.mkdtemp(prefix="swiftcore-bench-grpo-"))
    started = time.perf_counter()
    result: dict[str, Any] = {
        "machine": machine(), "rounds": rounds, "versions": {"swiftcore": _versions()}, "tree": _tree(),
        "command": command or f"python bench/msswift_grpo.py --rounds {rounds} --steps {steps} --threads {threads}",
    }  # fmt: skip
    try:
        result["versions"]["msswift"] = peer_versions()
        model = make_tiny("qwen3_5", work / "tiny-qwen3_5")
        peer_model = peer_checkpoint(model, work / "peer-qwen3_5")
        data = make_prompts(work / "prompts.jsonl", 64)
        check = make_prompts(work / "check" / "prompts.jsonl", 32, start=1000)
        result.update(grpo_figure(model, peer_model, data, check, default_setup(steps, threads), rounds, work / "runs"))
    except Exception as exc:  # recorded and shown in RESULTS.md instead of numbers
        import traceback

        result["error"] = f"{type(exc).__name__}: {exc}"
        print(f"figure 11 failed:\n{traceback.format_exc()}", file=sys.stderr)
    result["seconds"] = round(time.perf_counter() - started, 1)
    write_raw("msswift_grpo", result)
    write_section(result)
    return result


def _m(stats: dict[str, float] | None, fmt: str = "{:.3f}") -> str:
    if not stats or stats.get("median") is None:
        return "n/a"
    return f"{fmt.format(stats['median'])} ({fmt.format(stats['min'])}–{fmt.format(stats['max'])})"


def _r(stats: dict[str, float] | None) -> str:
    return "n/a" if not stats else f"{stats['median']:.2f}x ({stats['min']:.2f}–{stats['max']:.2f})"


def render(raw: dict[str, Any]) -> str:
    """The RESULTS.md section of ``raw``."""
    m = raw.get("machine", {})
    head = [BEGIN, "", "## 11. Online RL side by side: GRPO, swiftcore vs ms-swift (`swift rlhf --rlhf_type grpo`)", ""]
    if "error" in raw:
        return "\n".join([*head, f"`{raw.get('command')}`, {m.get('date', '?')}: FAILED: `{raw['error']}`", "", END])
    s, n = raw["setup"], raw["rounds"]
    peer = raw.get("versions", {}).get("msswift", {}).get("ms-swift", "?")
    lines = [
        *head,
        f"`{raw['command']}`, {m.get('date', '?')}, {raw['seconds']:.0f} s, {machine_text(m)}: "
        f"`swiftcore train --recipe grpo` vs `swift rlhf --rlhf_type grpo` (ms-swift {peer}) on the same tiny "
        "Qwen3.5 (random weights), "
        f"{s['prompts_per_step']} prompts x {s['num_generations']} completions of up to "
        f"{s['max_completion_length']} tokens a step, temperature {s['temperature']:g}, LoRA r={s['lora_rank']} "
        f"alpha={s['lora_alpha']}, lr {s['learning_rate']:g} constant, `{s['loss_type']}` loss, beta {s['beta']:g}, "
        f"{s['steps']} steps a run, `OMP_NUM_THREADS={s['threads']}`, the same reward on both (swiftcore's `format` "
        f"with pattern `{s['reward_pattern']}`; on ms-swift the same regex as an external reward). Each cell: median "
        f"(min–max) of {n} alternating runs; a run's value is the mean over its steps without the first. Step = TRL's "
        "`step_time` on both sides (rollout, rewards, log-probs, loss, backward of one optimiser step).",
        "",
        "| series | step (s) | rollout (s) | rollout tokens/s | reward (s) | sync (s) | rest (s) | peak RSS (MB) "
        "| run wall (s) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for kind in SERIES:
        if kind not in raw["step_s"]:
            lines.append(f"| {LABELS[kind]} | could not run | — | — | — | — | — | — | — |")
            continue
        sync = "—" if kind != "swiftcore_engine" else _m(raw["sync_s"][kind])
        runs = raw.get("per_run", {}).get(kind) or []
        rest = summarize([r["step_s"] - r["rollout_s"] - r["reward_s"] - r["sync_s"] for r in runs]) if runs else None
        lines.append(
            f"| {LABELS[kind]} | {_m(raw['step_s'][kind])} | {_m(raw['rollout_s'][kind])} "
            f"| {_m(raw['rollout_tokens_per_s'][kind], '{:.0f}')} | {_m(raw['reward_s'][kind], '{:.4f}')} | {sync} "
            f"| {_m(rest)} | {_m(raw['peak_rss_mb'][kind], '{:.0f}')} | {_m(raw['wall_s'][kind], '{:.1f}')} |"
        )
    lines += [
        "",
        "rest = step - rollout - reward - sync: log-probs, loss and backward. Run wall = the whole command, start-up "
        "and saving included (outside the step clock); ms-swift's start-up here includes about 7 s of retries "
        "(1 + 2 + 4 s) of a ModelScope hub listing that this offline machine cannot answer (`modelscope_hub` logs "
        "`listing failed (NetworkError)`).",
        "",
    ]
    if "msswift_error" in raw:
        e = raw["msswift_error"]
        lines += [f"ms-swift could not run GRPO here: `{e.get('refused')}` (exit {e.get('returncode')}; the output's "
                  "tail is in `bench/raw/msswift_grpo.json`).", ""]  # fmt: skip
    else:
        lines += [
            "Ratios of this run (median of the per-round ratios): ms-swift's step time / swiftcore's "
            f"{_r(raw['ratio_msswift_over_swiftcore_trainer'])} with TRL's generate (like for like: both generate "
            f"with the policy itself, no sync), {_r(raw['ratio_msswift_over_swiftcore_engine'])} with swiftcore's "
            "rollout engine (which also syncs the adapter each step); swiftcore's rollout tokens/s (trainer) / "
            f"ms-swift's {_r(raw['ratio_rollout_tokens_per_s_swiftcore_trainer_over_msswift'])}.",
            "",
        ]
    lines += _check_lines(raw)
    lines += [
        "",
        "How ms-swift ran GRPO on a CPU: `--use_vllm false` (its default; with it the rollouts come from its "
        "`TransformersEngine` on the policy model, `swift/rlhf_trainers/rollout_mixin.py:390-396`), plus the "
        "flags of figures 3 and 5 (`--model_type qwen3_5 --template qwen3_5`, the image-processor plugin, "
        "`--gradient_checkpointing false`). It needed one package more in `.venv-peers`: `msgspec`, which "
        "`swift/rlhf_trainers/utils.py:18` imports without ms-swift declaring it (without it: "
        "`ModuleNotFoundError: No module named 'msgspec'`); `bench/peers.py` installs it. Rollout tokens/s of "
        "ms-swift: its generation span (`_generate_completions`), logged by `bench/_msswift_grpo_plugin.py` "
        "because ms-swift reports its own `profiling/` timings to wandb/swanlab only.",
    ]
    tree = raw.get("tree") or {}
    dirty = tree.get("uncommitted") or []
    if dirty:
        more = f" and {len(dirty) - 8} more" if len(dirty) > 8 else ""
        paths = ", ".join(f"`{p}`" for p in dirty[:8])
        lines += ["", f"swiftcore was measured at {tree.get('commit')} with uncommitted changes in {paths}{more}."]
    lines += ["", END]
    return "\n".join(lines)


def _check_lines(raw: dict[str, Any]) -> list[str]:
    """The first-step check's paragraph."""
    first, c = raw.get("first_step", {}), raw.get("check_setup", {})
    cells = []
    for kind in SERIES:
        r = first.get(kind) or {}
        if "first_reward" in r:
            cells.append(f"{kind} {r['first_reward']:.5f} (mean length {r['first_mean_length']:.1f})")
        else:
            cells.append(f"{kind} n/a")
    rewards = {first[k]["first_reward"] for k in SERIES if "first_reward" in (first.get(k) or {})}
    same = (
        "equal on every series that ran, as the same greedy completions scored by the same regex give (swiftcore "
        "does not log its completion texts, so the texts themselves are not compared)"
    )
    verdict = same if len(rewards) == 1 else "NOT equal: the two do not generate or score the same completions"
    p = raw.get("check_prompts") or {}
    prompts = (f" Prompt texts: swiftcore's rendering (`--disable-thinking`) equals the prompt ms-swift logs for "
               f"{p['identical']} of {p['prompts']} prompts (e.g. `{p['example']!r}`)." if p else "")  # fmt: skip
    return [
        f"First step, the whole check set in one batch ({c.get('prompts_per_step', '?')} prompts outside the timed "
        f"set x {c.get('num_generations', '?')} completions, top-k 1, i.e. greedy): reward mean " + "; ".join(cells)
        + f" — {verdict}." + prompts
        + " With sampling (the timed runs) the first-step rewards differ by chance: each side draws its own random "
        "numbers" + _sampled(raw) + "."
    ]  # fmt: skip


def _sampled(raw: dict[str, Any]) -> str:
    """The timed runs' first-step reward means, per series (seed 0 on both sides)."""
    cells = []
    for kind, runs in (raw.get("per_run") or {}).items():
        values = [r["first_reward"] for r in runs if r.get("first_reward") is not None]
        if values:
            cells.append(f"{kind} {', '.join(f'{v:g}' for v in values)}")
    return f" (seed 0 on both; first-step reward of each timed run: {'; '.join(cells)})" if cells else ""


def write_section(raw: dict[str, Any]) -> Path:
    """Replace the figure's section of RESULTS.md."""
    return replace_section(render(raw), BEGIN, END)


def main() -> None:
    """Parse the options, run figure 11, print its summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of the three series")
    parser.add_argument("--steps", type=int, default=6, help="optimiser steps per run (the first is left out)")
    parser.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every run (both sides)")
    parser.add_argument("--work", type=Path, help="scratch directory (default: a temporary one)")
    args = parser.parse_args()
    result = run(args.rounds, args.steps, args.threads, args.work)
    keys = (
        "error",
        "msswift_error",
        "step_s",
        "rollout_tokens_per_s",
        "peak_rss_mb",
        "ratio_msswift_over_swiftcore_trainer",
        "ratio_msswift_over_swiftcore_engine",
        "check_prompts",
        "seconds",
    )
    print(json.dumps({k: result.get(k) for k in keys}, indent=2, default=str))  # fmt: skip


if __name__ == "__main__":
    main()
