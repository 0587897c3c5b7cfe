"""Multi-node training as users run it, with two "machines" on this one: two torchrun agents, one process each,
meeting at a c10d rendezvous (``--nnodes 2 --node-rank 0/1 --rdzv-endpoint 127.0.0.1:PORT``).

- The transformers trainer through ``swiftcore train --nnodes 2 --node-rank I --rdzv-endpoint ... --nproc-per-node
  1`` (the command starts the agent): data parallel over the two nodes, batch 1 each, gives the first 3 losses of
  one process with batch 2 to 1e-5.
- The megatron engine under two ``torchrun --nnodes 2 ... swiftcore train --engine megatron --pp 2`` agents (the
  pipeline's two stages on the two nodes, 2 micro-batches of 1 a step) gives the same losses.
- The multi-node options are refused together or not at all, before anything starts.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from swiftcore_testing import free_port, user_env

# make test (CI) leaves this module to make test-all: two torchrun agents meeting at a rendezvous; DDP parity and
# resume stay in make test (tests/test_train_resume_ddp.py) (docs/testing.md, "Two tiers").
pytestmark = [pytest.mark.extended, pytest.mark.slow]

BIN = Path(sys.executable).parent
STEPS = 3


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    """24 chats asking for a sum."""
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


def _train_args(model: Path, dataset: Path, out: Path, batch_size: int) -> list[str]:
    return [
        "train", "--model", str(model), "--dataset", str(dataset), "--output-dir", str(out), "--tuner", "full",
        "--max-steps", str(STEPS), "--batch-size", str(batch_size), "--learning-rate", "5e-4", "--logging-steps", "1",
        "--save-steps", "10", "--seed", "7", "--no-plot",
    ]  # fmt: skip


def _env() -> dict[str, str]:
    return user_env(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")


def _losses(out: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def _two_nodes(command_of) -> None:
    """Start node 0 and node 1 (``command_of(rank, endpoint)``) together; both must finish cleanly."""
    endpoint = f"127.0.0.1:{free_port()}"
    procs = [
        subprocess.Popen(
            command_of(rank, endpoint), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for rank in (0, 1)
    ]
    outputs = [proc.communicate(timeout=600)[0] for proc in procs]
    for rank, (proc, output) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, f"node {rank}:\n{output[-6000:]}"


@pytest.fixture(scope="module")
def one_process(tiny_model_dir, dataset, tmp_path_factory) -> dict[int, float]:
    """The reference: the transformers trainer on one process, batch 2."""
    out = tmp_path_factory.mktemp("one") / "run"
    args = _train_args(tiny_model_dir("qwen3_5"), dataset, out, batch_size=2)
    done = subprocess.run([str(BIN / "swiftcore"), *args], env=_env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-6000:]
    losses = _losses(out)
    assert sorted(losses) == list(range(1, STEPS + 1)) and losses[STEPS] < losses[1]
    return losses


def test_the_transformers_trainer_over_two_nodes_equals_one_process(
    one_process, tiny_model_dir, dataset, tmp_path
) -> None:
    out = tmp_path / "two-nodes"
    args = _train_args(tiny_model_dir("qwen3_5"), dataset, out, batch_size=1)
    nodes = ["--nproc-per-node", "1", "--nnodes", "2", "--rdzv-endpoint"]
    _two_nodes(lambda rank, endpoint: [str(BIN / "swiftcore"), *args, *nodes, endpoint, "--node-rank", str(rank)])
    got = _losses(out)
    assert sorted(got) == sorted(one_process)
    for step, loss in one_process.items():
        assert got[step] == pytest.approx(loss, abs=1e-5), step


def test_the_megatron_pipeline_over_two_nodes_equals_one_process(
    one_process, tiny_model_dir, dataset, tmp_path
) -> None:
    out = tmp_path / "two-nodes-pp2"
    args = _train_args(tiny_model_dir("qwen3_5"), dataset, out, batch_size=1)
    megatron = ["--engine", "megatron", "--pp", "2", "--gradient-accumulation-steps", "2"]
    torchrun = [str(BIN / "torchrun"), "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d"]
    _two_nodes(
        lambda rank, endpoint: [
            *torchrun,
            "--rdzv-endpoint",
            endpoint,
            "--node-rank",
            str(rank),
            str(BIN / "swiftcore"),
            *args,
            *megatron,
        ]
    )
    got = _losses(out)
    assert sorted(got) == sorted(one_process)
    for step, loss in one_process.items():
        assert got[step] == pytest.approx(loss, abs=1e-5), step
    args_record = json.loads((out / f"checkpoint-{STEPS}" / "swiftcore_args.json").read_text())
    assert args_record["engine"]["world_size"] == 2 and args_record["engine"]["pp"] == 2


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--nnodes", "2"], "give every machine its --node-rank (0 to 1) and the same --rdzv-endpoint"),
        (["--node-rank", "1"], "--node-rank and --rdzv-endpoint go with --nnodes N"),
        (["--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", "h:1"], "--node-rank 2: with --nnodes 2 it is 0"),
        (["--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "h"], "--rdzv-endpoint 'h': expected HOST:PORT"),
    ],
    ids=["no-rank", "no-nnodes", "rank-too-high", "no-port"],
)
def test_incomplete_multi_node_options_are_refused_before_launch(options, expected, tmp_path) -> None:
    from swiftcore_train.command import train

    from swiftcore.api.cli import CliState

    result = CliRunner().invoke(train, ["--model", "m", "--dataset", "d.jsonl", *options], obj=CliState())
    assert result.exit_code == 2 and expected in result.output, result.output
