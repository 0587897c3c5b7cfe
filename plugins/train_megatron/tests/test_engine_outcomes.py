"""``swiftcore train --engine megatron`` against the transformers engine, on gloo with real torchrun processes.

- Loss parity: the first 10 step losses at TP1, TP2 and EP2 equal the transformers trainer's on the same init
  and data to 1e-4 relative (fp32), for Qwen3.5 dense, Qwen3.5-MoE and OLMoE.
- kill -9 and resume from the megatron checkpoint: the remaining losses equal the uninterrupted run's.
- The exported checkpoint is a plain transformers model whose logits equal the trained mcore model's to 1e-5.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from swiftcore_testing.processes import free_port, user_env

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
STEPS = 10


def _env() -> dict[str, str]:
    return user_env(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"What is {i} plus {2 * i + 1}?"},
                {"role": "assistant", "content": f"{i} plus {2 * i + 1} is {3 * i + 1}."},
            ]
        }
        for i in range(24)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _command(model: Path, dataset: Path, out: Path, *, batch_size: int, ranks: int = 1, extra: tuple = ()) -> list:
    train = [
        "train",
        "--model", str(model),
        "--dataset", str(dataset),
        "--output-dir", str(out),
        "--tuner", "full",
        "--max-steps", str(STEPS),
        "--batch-size", str(batch_size),
        "--learning-rate", "5e-4",
        "--logging-steps", "1",
        "--save-steps", "5",
        "--seed", "7",
        "--no-plot",
        *extra,
    ]  # fmt: skip
    if ranks == 1:
        return [str(BIN / "swiftcore"), *train]
    launcher = [str(BIN / "torchrun"), "--nproc-per-node", str(ranks), "--master-port", str(free_port())]
    return [*launcher, str(BIN / "swiftcore"), *train]


def _run(command: list) -> None:
    done = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]


def _losses(output_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (output_dir / "logs.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


@pytest.fixture(scope="module")
def reference(tiny_model_dir, dataset, tmp_path_factory):
    """The transformers engine's run of a family (batch 2 on one process), made once per module."""
    made: dict[str, Path] = {}

    def run(family: str) -> Path:
        if family not in made:
            out = tmp_path_factory.mktemp("reference") / family
            _run(_command(tiny_model_dir(family), dataset, out, batch_size=2))
            made[family] = out
        return made[family]

    return run


@pytest.fixture(scope="module")
def megatron_run(tiny_model_dir, dataset, tmp_path_factory):
    """A megatron run of a family at a layout, made once per module: ``megatron_run("qwen3_5", tp=2)``."""
    made: dict[tuple, Path] = {}

    def run(family: str, tp: int = 1, ep: int = 1) -> Path:
        key = (family, tp, ep)
        if key not in made:
            out = tmp_path_factory.mktemp("megatron") / f"{family}-tp{tp}-ep{ep}"
            # Expert parallelism splits the data-parallel ranks: batch 1 on each of 2 ranks = the reference's 2.
            ranks, batch = (tp * ep, 2 // ep)
            extra = ("--engine", "megatron", "--tp", str(tp), "--ep", str(ep))
            _run(_command(tiny_model_dir(family), dataset, out, batch_size=batch, ranks=ranks, extra=extra))
            made[key] = out
        return made[key]

    return run


LAYOUTS = [
    ("qwen3_5", 1, 1),
    ("qwen3_5", 2, 1),
    ("qwen3_5_moe", 1, 2),
    ("qwen3_5_moe", 2, 1),  # MoE under TP trains with megatron's sequence parallelism
    ("olmoe", 1, 1),
    ("olmoe", 1, 2),
]


@pytest.mark.parametrize(("family", "tp", "ep"), LAYOUTS, ids=[f"{f}-tp{t}-ep{e}" for f, t, e in LAYOUTS])
def test_the_first_ten_losses_equal_the_transformers_engine(family, tp, ep, reference, megatron_run) -> None:
    expected = _losses(reference(family))
    got = _losses(megatron_run(family, tp, ep))
    assert sorted(got) == list(range(1, STEPS + 1)) == sorted(expected)
    worst = max(abs(got[s] - expected[s]) / abs(expected[s]) for s in expected)
    assert worst < 1e-4, {s: (expected[s], got[s]) for s in expected}
    assert expected[STEPS] < expected[1], "the reference must learn, or equal losses prove little"


def test_kill_9_then_resume_gives_the_uninterrupted_losses(tiny_model_dir, dataset, megatron_run, tmp_path) -> None:
    uninterrupted = _losses(megatron_run("qwen3_5", tp=2))
    killed = tmp_path / "killed"
    command = _command(
        tiny_model_dir("qwen3_5"), dataset, killed, batch_size=2, ranks=2, extra=("--engine", "megatron", "--tp", "2")
    )
    proc = subprocess.Popen(
        command, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 300
        while not (killed / "checkpoint-5").exists():
            assert proc.poll() is None, "training ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # every rank and the launcher, at once
        proc.wait()
    assert (killed / "checkpoint-5" / "mcore" / "swiftcore_mcore.json").is_file()
    assert not (killed / f"checkpoint-{STEPS}").exists(), "the run must be killed before its end"
    _run([*command, "--resume-from-checkpoint", "latest"])
    resumed = _losses(killed)
    assert sorted(resumed) == list(range(1, STEPS + 1))
    for step in range(6, STEPS + 1):
        assert resumed[step] == pytest.approx(uninterrupted[step], rel=1e-6), step
    assert not (killed / ".staging").exists()


def test_the_checkpoint_is_a_transformers_model_with_the_trained_logits(megatron_run, tiny_model_dir) -> None:
    """checkpoint-10 of the TP2 run: transformers loads it plainly; its logits equal the mcore model's, built
    from the checkpoint's megatron shards, to 1e-5; the weights moved away from the initial checkpoint."""
    import torch
    from safetensors.torch import load_file
    from swiftcore_megatron.convert import load_mcore_state
    from swiftcore_megatron.parity import check_parity
    from swiftcore_megatron.resolve import read_hf_config, resolve_bridge

    from swiftcore._plugins import load_plugins

    checkpoint = megatron_run("qwen3_5", tp=2) / f"checkpoint-{STEPS}"
    _, bridge = resolve_bridge(read_hf_config(checkpoint), load_plugins(env={}))
    report = check_parity(checkpoint, bridge, load_mcore_state(checkpoint / "mcore", bridge))
    assert report.ok and report.max_abs <= 1e-5, str(report)
    trained = load_file(str(checkpoint / "model.safetensors"))
    base = load_file(str(tiny_model_dir("qwen3_5") / "model.safetensors"))
    key = "model.language_model.layers.0.mlp.down_proj.weight"
    assert not torch.equal(trained[key], base[key])
    args = json.loads((checkpoint / "swiftcore_args.json").read_text())
    assert args["engine"]["name"] == "megatron" and args["engine"]["tp"] == 2


def test_validation_loss_falls_and_old_checkpoints_rotate(tiny_model_dir, dataset, tmp_path) -> None:
    """--val-dataset with --eval-steps: eval_loss logged at steps 5 and 10, lower at 10 (the model learns the held-
    out sums' shared wording); --save-total-limit 1 keeps only checkpoint-10."""
    out = tmp_path / "run"
    extra = ("--engine", "megatron", "--val-dataset", str(dataset), "--eval-steps", "5", "--save-total-limit", "1")
    _run(_command(tiny_model_dir("qwen3_5"), dataset, out, batch_size=2, extra=extra))
    rows = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    evals = {r["step"]: r["eval_loss"] for r in rows if "eval_loss" in r}
    assert sorted(evals) == [5, 10] and evals[10] < evals[5], evals
    assert sorted(p.name for p in out.glob("checkpoint-*")) == [f"checkpoint-{STEPS}"]
