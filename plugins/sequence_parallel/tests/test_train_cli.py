"""``swiftcore train --sequence-parallel-size N`` under torchrun equals the one-process run, step by step.

With one SP group (data parallel 1) the group reads exactly the batches of a one-process run (same sampler,
same seed), so the per-step losses, gradient norms and token counts in ``logs.jsonl`` must agree. OLMoE's tiny
checkpoint is used: plain softmax attention (GQA, q/k norms) and a router, and its losses stay stable enough
over a few steps that float noise does not grow past 1e-5 (a sliding-window Gemma 4 agrees at step 1 but its
steep tiny-model loss amplifies the noise afterwards).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from swiftcore_sequence_parallel.testing import free_port
from swiftcore_testing import failure_report, run_cli, user_env

# make test (CI) leaves this module to make test-all: the CLI's sequence-parallel variants; SP parity stays in make
# test (test_parity.py, test_training.py) (docs/testing.md, "Two tiers").
pytestmark = pytest.mark.extended

BIN = Path(sys.executable).parent
REL = 1e-5


def _env() -> dict[str, str]:
    # A user's shell: no plugin set, rank, world size or rendezvous address an earlier test of this process left.
    return user_env(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """24 short chats of different lengths (so batches pad, and odd lengths need SP padding)."""
    path = tmp_path_factory.mktemp("sp_data") / "train.jsonl"
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Count to {i}."},
                {"role": "assistant", "content": " ".join(str(j) for j in range(1, i % 7 + 2))},
            ]
        }
        for i in range(24)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _args(model: Path, dataset: Path, out: Path, *extra: str) -> list[str]:
    """The ``swiftcore train`` arguments of a 5-step run (``extra`` last: it may override the defaults). No loss
    plot: the runs' logs.jsonl is what is compared (a plot would import and draw matplotlib in every run)."""
    return ["--model", str(model), "--dataset", str(dataset), "--output-dir", str(out), "--tuner", "full",
            "--max-steps", "5", "--logging-steps", "1", "--save-steps", "100", "--batch-size", "2",
            "--learning-rate", "1e-3", "--lr-scheduler", "constant", "--seed", "3", "--no-plot", *extra]  # fmt: skip


def _train(model: Path, dataset: Path, out: Path, *extra: str, nproc: int) -> subprocess.CompletedProcess:
    """``swiftcore train`` on ``nproc`` ranks under torchrun."""
    swiftcore = str(BIN / "swiftcore")
    cmd = [str(BIN / "torchrun"), "--nproc-per-node", str(nproc), "--master-port", str(free_port()), swiftcore]
    cmd += ["train", *_args(model, dataset, out, *extra)]
    return subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=400)


def _one_process(model: Path, dataset: Path, out: Path, *extra: str) -> None:
    """The one-process reference run, in this process: the reference, not the CLI, is the point (no process to
    start, no second import of the training stack)."""
    run_cli("train", *_args(model, dataset, out, *extra))


def _steps(out: Path) -> dict[int, dict]:
    rows = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r for r in rows if "loss" in r}


def _eval_losses(out: Path) -> list[float]:
    rows = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines() if line.strip()]
    return [r["eval_loss"] for r in rows if "eval_loss" in r]


def _assert_same_steps(one: dict[int, dict], sp: dict[int, dict], steps: tuple[int, ...] = (1, 2, 3, 4, 5)) -> None:
    assert sorted(one) == sorted(sp) == [1, 2, 3, 4, 5]
    for step in steps:
        a, b = one[step], sp[step]
        assert b["loss"] == pytest.approx(a["loss"], rel=REL), f"step {step}: loss {a['loss']} vs SP {b['loss']}"
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=REL), f"step {step}: grad norm"
        # Same tokens: the SP group trained on exactly the one-process batches (the head recipes count none).
        assert b.get("num_input_tokens_seen") == a.get("num_input_tokens_seen"), f"step {step}: tokens seen"


def _run_ok(proc: subprocess.CompletedProcess) -> None:
    if proc.returncode != 0:  # a rank's own cause, not only torchrun's summary that follows it
        pytest.fail(failure_report(proc))


@pytest.fixture(scope="module")
def olmoe(tiny_model_dir) -> Path:
    """The tiny OLMoE checkpoint."""
    return tiny_model_dir("olmoe")


#: Batches of 4 over 18 training rows (step 5 is the epoch's short batch), 6 validation rows (a short last
#: evaluation batch).
EXTRA4 = ("--batch-size", "4", "--split-ratio", "0.25", "--eval-steps", "5")


@pytest.fixture(scope="module")
def reference4(olmoe: Path, dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The one-process run the ulysses and data-parallel runs are compared with."""
    out = tmp_path_factory.mktemp("sp_reference") / "one"
    _one_process(olmoe, dataset, out, *EXTRA4)
    return out


@pytest.mark.slow
def test_ulysses_sp2_matches_one_process(olmoe: Path, dataset: Path, reference4: Path, tmp_path: Path) -> None:
    """Training and validation losses equal the one-process run's, the short batches included."""
    sp = ("--sequence-parallel-size", "2", "--sp-mode", "ulysses")
    _run_ok(_train(olmoe, dataset, tmp_path / "sp", *EXTRA4, *sp, nproc=2))
    _assert_same_steps(_steps(reference4), _steps(tmp_path / "sp"))
    one, two = _eval_losses(reference4), _eval_losses(tmp_path / "sp")
    assert len(one) == len(two) == 1
    assert two[0] == pytest.approx(one[0], rel=REL), f"eval loss {one[0]} vs SP {two[0]}"
    # The checkpoint is a plain one: no SP attention recorded in its config.
    config = (tmp_path / "sp" / "checkpoint-5" / "config.json").read_text()
    assert "sp_ulysses" not in config


@pytest.mark.slow
def test_ring_sp2_lora_padding_free_accumulation_matches_one_process(
    olmoe: Path, dataset: Path, tmp_path: Path
) -> None:
    """Ring attention, LoRA, packed rows (padded with a dummy sample) and 2 accumulation steps."""
    extra = ("--tuner", "lora", "--padding-free", "--gradient-accumulation-steps", "2")
    _one_process(olmoe, dataset, tmp_path / "one", *extra)
    sp = ("--sequence-parallel-size", "2", "--sp-mode", "ring")
    _run_ok(_train(olmoe, dataset, tmp_path / "sp", *extra, *sp, nproc=2))
    _assert_same_steps(_steps(tmp_path / "one"), _steps(tmp_path / "sp"))
    assert (tmp_path / "sp" / "checkpoint-5" / "adapter_model.safetensors").is_file()


@pytest.mark.slow
def test_qwen3_5_ring_padding_free_matches_one_process(tiny_model_dir, dataset: Path, tmp_path: Path) -> None:
    """Qwen3.5's gated DeltaNet layers (three of its four) carry their state and conv halo across the shards.

    Padding-free rows, so samples restart inside a shard and one crosses the shard border; 2 accumulation
    steps (both sides weight the step by tokens, although Qwen3.5's class sets ``accepts_loss_kwargs = False``).
    """
    model = tiny_model_dir("qwen3_5")
    extra = ("--padding-free", "--gradient-accumulation-steps", "2")
    _one_process(model, dataset, tmp_path / "one", *extra)
    sp = ("--sequence-parallel-size", "2", "--sp-mode", "ring")
    _run_ok(_train(model, dataset, tmp_path / "sp", *extra, *sp, nproc=2))
    _assert_same_steps(_steps(tmp_path / "one"), _steps(tmp_path / "sp"))


@pytest.mark.slow
def test_sp2_times_data_parallel2_matches_one_process_with_the_doubled_batch(
    olmoe: Path, dataset: Path, reference4: Path, tmp_path: Path
) -> None:
    """4 ranks = 2 SP groups of batch 2: the groups split the data as 2-rank DDP would.

    Steps 1-4 only: at the epoch's end DDP tops the second group's batch up from the epoch's start (accelerate's
    even batches), where one process trains on the short batch alone; that is data parallelism, not SP.
    """
    args = (*EXTRA4, "--batch-size", "2", "--sequence-parallel-size", "2")
    _run_ok(_train(olmoe, dataset, tmp_path / "sp", *args, nproc=4))
    _assert_same_steps(_steps(reference4), _steps(tmp_path / "sp"), steps=(1, 2, 3, 4))


# ------------------------------------------------------------------------------------------------ refusals

REFUSALS = [
    # (recipe args, WORLD_SIZE as torchrun would set it, config.json changes, SP args, the message)
    ((), None, {}, ("--sequence-parallel-size", "2"), "does not divide the world size 1"),
    (("--task", "embedding"), None, {}, ("--sequence-parallel-size", "2"), "does not divide the world size 1"),
    ((), "3", {}, ("--sequence-parallel-size", "3"), "the model has 4 heads"),
    (("--task", "classification"), "2", {"layer_types": ["full_attention", "indexed_attention"]},
     ("--sequence-parallel-size", "2"), "indexer-selected sparse attention"),
    ((), "2", {"output_router_logits": True}, ("--sequence-parallel-size", "2", "--sp-mode", "ring"),
     "output_router_logits"),
]  # fmt: skip


@pytest.mark.parametrize("recipe, world, config, sp, message", REFUSALS)
def test_refused_before_the_model_loads(
    olmoe: Path, dataset: Path, tmp_path: Path, recipe: tuple, world: str | None, config: dict, sp: tuple, message: str
) -> None:
    """Refused from config.json and the world size, before the weights load (there are none) or anything is written."""
    model = tmp_path / "config-only"
    model.mkdir()
    for f in olmoe.iterdir():
        if f.suffix in (".json", ".jinja"):
            (model / f.name).write_text(f.read_text())
    cfg = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**cfg, **config}))
    env = {**_env(), **({"WORLD_SIZE": world} if world else {})}
    cmd = [str(BIN / "swiftcore"), "train", "--model", str(model), "--dataset", str(dataset), "--output-dir",
           str(tmp_path / "out"), *recipe, *sp]  # fmt: skip
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert message in proc.stderr and "--sequence-parallel-size" in proc.stderr, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "family, message",
    [("deepseek_v4", "compressed sparse attention layers (DeepSeek-V4)"), ("glm5", "indexer-selected sparse")],
)
def test_families_sp_cannot_split_are_refused_before_loading(
    tiny_model_dir, dataset: Path, tmp_path: Path, family: str, message: str
) -> None:
    """The project's families whose attention is not softmax over the sequence: refused from their config.json."""
    cmd = [str(BIN / "swiftcore"), "train", "--model", str(tiny_model_dir(family)), "--dataset", str(dataset),
           "--output-dir", str(tmp_path / "out"), "--sequence-parallel-size", "2", "--sp-mode", "ring"]  # fmt: skip
    proc = subprocess.run(cmd, env={**_env(), "WORLD_SIZE": "2"}, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr[-2000:]
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_mimo_attention_sinks_refused_under_torchrun(tiny_model_dir, dataset: Path, tmp_path: Path) -> None:
    """MiMo-V2-Flash's learned attention sinks are parameters, not config: refused once loaded, before training."""
    proc = _train(tiny_model_dir("mimo_v2_flash"), dataset, tmp_path / "out", "--sequence-parallel-size", "2",
                  "--sp-mode", "ring", nproc=2)  # fmt: skip
    assert proc.returncode != 0
    assert "learned sinks" in proc.stderr and "drop --sequence-parallel-size" in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "out" / "logs.jsonl").exists()


# ------------------------------------------------------------------------------------------------ head recipes

#: The head runs: full tuning, a small learning rate (the tiny models' contrastive loss is steep).
HEAD_ARGS = ("--learning-rate", "1e-4", "--batch-size", "4", "--no-plot")


@pytest.mark.slow
def test_embedding_ulysses_sp2_matches_one_process(olmoe: Path, tmp_path: Path) -> None:
    """``--task embedding`` (InfoNCE, mean pooling, padded): the decoder is split, pooling sees the whole text."""
    from swiftcore_heads import load_head_model, make_retrieval_task

    data = make_retrieval_task(seed=0).write_train(tmp_path / "retrieval.jsonl")
    head = ("--task", "embedding", "--pooling", "mean", *HEAD_ARGS)
    _one_process(olmoe, data, tmp_path / "one", *head)
    sp = ("--sequence-parallel-size", "2", "--sp-mode", "ulysses")
    _run_ok(_train(olmoe, data, tmp_path / "sp", *head, *sp, nproc=2))
    _assert_same_steps(_steps(tmp_path / "one"), _steps(tmp_path / "sp"))
    checkpoint = tmp_path / "sp" / "checkpoint-5"
    assert "sp_ulysses" not in (checkpoint / "config.json").read_text()
    model, _ = load_head_model(checkpoint)  # a plain embedding checkpoint
    assert model.head_info["pooling"] == "mean"


@pytest.mark.slow
def test_qwen3_5_classification_ring_padding_free_matches_one_process(tiny_model_dir, tmp_path: Path) -> None:
    """``--task classification`` on Qwen3.5, packed rows: the DeltaNet state crosses the shards, the pooled last
    token of each sample (and the score layer, the same on both ranks) sees the whole sample."""
    colours = ("red", "blue", "green")
    rows = [
        {"text": " ".join(["fox"] * (i % 7) + [colours[i % 3]] + ["owl"] * (i % 4)), "label": i % 3} for i in range(24)
    ]
    data = tmp_path / "colours.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    model = tiny_model_dir("qwen3_5")
    head = ("--task", "classification", "--num-labels", "3", "--padding-free", *HEAD_ARGS)
    _one_process(model, data, tmp_path / "one", *head)
    sp = ("--sequence-parallel-size", "2", "--sp-mode", "ring")
    _run_ok(_train(model, data, tmp_path / "sp", *head, *sp, nproc=2))
    _assert_same_steps(_steps(tmp_path / "one"), _steps(tmp_path / "sp"))
