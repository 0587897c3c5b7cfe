"""Training robustness: kill -9 mid-run and resume to the same losses; two-process DDP equals one process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from swiftcore_testing import failure_report, run_swiftcore

SWIFTCORE = str(Path(sys.executable).parent / "swiftcore")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    return env


def _swiftcore(*args: str) -> None:
    """``swiftcore ARGS`` run to completion (forked: no signal is sent to it), which must succeed."""
    proc = run_swiftcore(*args, env=_env())
    assert proc.returncode == 0, failure_report(proc)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Count to {i}."},
                {"role": "assistant", "content": " ".join(str(j) for j in range(1, i % 7 + 2))},
            ]
        }
        for i in range(40)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _losses(output_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (output_dir / "logs.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def _args(model: Path, dataset: Path, out: Path, *extra: str) -> list[str]:
    return [
        "train",
        "--model",
        str(model),
        "--dataset",
        str(dataset),
        "--output-dir",
        str(out),
        "--tuner",
        "lora",
        "--max-steps",
        "10",
        "--batch-size",
        "2",
        "--save-steps",
        "2",
        "--logging-steps",
        "1",
        "--learning-rate",
        "2e-3",
        "--lr-scheduler",
        "constant",
        "--max-length",
        "96",
        "--seed",
        "3",
        *extra,
    ]


def test_sigkill_then_resume_reproduces_the_uninterrupted_losses(tiny_model_dir, dataset, tmp_path) -> None:
    model = tiny_model_dir("qwen3_5")
    reference = tmp_path / "reference"
    _swiftcore(*_args(model, dataset, reference))
    expected = _losses(reference)
    assert sorted(expected) == list(range(1, 11))

    killed = tmp_path / "killed"
    proc = subprocess.Popen(
        [SWIFTCORE, *_args(model, dataset, killed)], env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 300
    while not (killed / "checkpoint-4").exists():
        assert proc.poll() is None, "training ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # Whatever was on disk at the kill: every checkpoint under a final name is complete.
    for checkpoint in killed.glob("checkpoint-*"):
        assert (checkpoint / "trainer_state.json").exists(), f"{checkpoint.name} is half-written"
        assert (checkpoint / "adapter_model.safetensors").exists()
        assert (checkpoint / "swiftcore_args.json").exists()
    last_saved = max(int(c.name.split("-")[1]) for c in killed.glob("checkpoint-*"))
    assert last_saved < 10

    _swiftcore(*_args(model, dataset, killed, "--resume-from-checkpoint", "latest"))
    steps = [json.loads(line)["step"] for line in (killed / "logs.jsonl").read_text().splitlines()
             if "loss" in json.loads(line)]
    assert steps == list(range(1, 11)), "logs.jsonl must hold each step once after a resume"
    resumed = _losses(killed)
    for step, loss in expected.items():
        assert resumed[step] == pytest.approx(loss, abs=1e-5), f"step {step}"
    # Resume, not restart: a process that ignored the checkpoint would have logged steps 1.. again (each
    # step once fails), and a run restarted from scratch for the remaining steps logs other losses.
    restarted = tmp_path / "restarted"
    _swiftcore(*_args(model, dataset, restarted)[:-2], "--seed", "3", "--max-steps", str(10 - last_saved))
    from_scratch = list(_losses(restarted).values())
    after_resume = [resumed[s] for s in range(last_saved + 1, 11)]
    assert len(from_scratch) == len(after_resume)
    assert any(abs(a - b) > 1e-3 for a, b in zip(from_scratch, after_resume, strict=True)), (
        "a restart from scratch gives the same losses as the resume: this test could not tell them apart"
    )
    assert not (killed / ".staging").exists()


def test_two_process_ddp_matches_one_process_with_the_doubled_batch(tiny_model_dir, dataset, tmp_path) -> None:
    # A softmax-attention family: each rank pads its half-batch to its own length, and Qwen3.5's chunked
    # linear-attention fallback is padding-exact only to ~3e-4; Qwen3-ASR's Qwen3 decoder is exact to float noise.
    model = tiny_model_dir("qwen3_asr")
    common = [
        "--max-steps",
        "4",
        "--save-steps",
        "100",
        "--logging-steps",
        "1",
        "--tuner",
        "full",
        "--learning-rate",
        "1e-3",
        "--lr-scheduler",
        "constant",
        "--max-length",
        "96",
        "--seed",
        "5",
    ]
    single = tmp_path / "single"
    _swiftcore("train", "--model", str(model), "--dataset", str(dataset), "--output-dir", str(single),
               "--batch-size", "4", *common)  # fmt: skip
    ddp = tmp_path / "ddp"
    torchrun = str(Path(sys.executable).parent / "torchrun")
    proc = subprocess.run(
        [
            torchrun,
            "--nproc-per-node",
            "2",
            "--master-port",
            str(_free_port()),
            "-m",
            "swiftcore.cli.main",
            "train",
            "--model",
            str(model),
            "--dataset",
            str(dataset),
            "--output-dir",
            str(ddp),
            "--batch-size",
            "2",
            *common,
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    one, two = _losses(single), _losses(ddp)
    assert sorted(one) == sorted(two) == [1, 2, 3, 4]
    for step in one:
        assert two[step] == pytest.approx(one[step], abs=2e-5), f"step {step}: 1 process {one[step]}, DDP {two[step]}"
    # Every rank's RNG state is in the checkpoint (rank 0 once moved the staging checkpoint into place before
    # rank 1 had written its file: the state was lost, or rank 1 crashed writing into a vanished directory).
    rng_files = sorted(p.name for p in (ddp / "checkpoint-4").glob("rng_state_*.pth"))
    assert rng_files == ["rng_state_0.pth", "rng_state_1.pth"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
