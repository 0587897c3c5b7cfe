"""``--fsdp`` (torch FSDP2) and ``--deepspeed zero2|zero3|FILE`` for the transformers trainer (issue 48, point 5).

The slow tests train a tiny model on two CPU processes (gloo) and compare with one process at the same global batch:
the losses of the first steps, the exported weights (a plain transformers checkpoint, or a peft adapter), and a run
resumed from a sharded checkpoint against the uninterrupted one. The fast tests check the refusals and the configs.

The worlds cost their start (each rank imports the training stack), not their 4 steps: one world trains every
``--fsdp`` run and its resume, one every ``--deepspeed`` run (:func:`_world`), and the one-process references run in
this process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from swiftcore_testing import failure_report, run_cli, user_env
from swiftcore_train import command, distributed
from swiftcore_train.command import train
from swiftcore_train.config import TrainConfig
from swiftcore_train.distributed import check_launch, deepspeed_config, fsdp_config, validate_deepspeed_file

from swiftcore.api import SwiftcoreError
from swiftcore.api.cli import CliState, cli

BIN = Path(sys.executable).parent
#: Holds the rank lock (conftest.py): the worlds of this module run one at a time across the xdist workers.
STARTS_RANKS = True
# A softmax-attention family: each rank pads its half-batch to its own length, and Qwen3-ASR's Qwen3 decoder is
# padding-exact to float noise (Qwen3.5's linear-attention fallback only to ~3e-4; see tests/test_train_resume_ddp.py).
FAMILY = "qwen3_asr"
STEPS = 4
# One process: batch 4. Two processes: batch 2 each. Same global batch, same samples per step. No loss plot: the
# runs' logs.jsonl is what is compared (a plot would import and draw matplotlib in every run).
COMMON = ["--max-steps", str(STEPS), "--save-steps", "2", "--logging-steps", "1", "--lr-scheduler", "constant",
          "--max-length", "96", "--seed", "5", "--no-plot"]  # fmt: skip
LEARNING_RATE = {"full": "1e-3", "lora": "1e-2"}
# Two ranks reduce gradients in another order than one process: float32 noise, grown by the steps (LoRA's larger
# learning rate grows it more). A per-rank mean instead of the token-weighted global mean is off by ~1e-2.
TOLERANCE = {"full": 2e-5, "lora": 1e-4}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
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


def _args(model: Path, dataset: Path, out: Path, tuner: str, *extra: str, nproc: int = 1) -> list[str]:
    """The ``swiftcore train`` arguments of a run on ``nproc`` processes (global batch 4), without the launcher's."""
    args = ["--model", str(model), "--dataset", str(dataset), "--output-dir", str(out)]
    return [*args, "--tuner", tuner, "--learning-rate", LEARNING_RATE[tuner], *COMMON, *extra,
            "--batch-size", str(4 // nproc)]  # fmt: skip


def _check(proc: subprocess.CompletedProcess) -> None:
    if proc.returncode != 0:  # a rank's own cause, not only torchrun's summary that follows it
        pytest.fail(failure_report(proc))


def _launch(model: Path, dataset: Path, out: Path, tuner: str, *extra: str) -> None:
    """``swiftcore train --nproc-per-node 2 ...``: the CLI starts the world itself (torch.distributed.run)."""
    args = [str(BIN / "swiftcore"), "train", *_args(model, dataset, out, tuner, *extra, nproc=2)]
    args += ["--nproc-per-node", "2"]
    env = user_env(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    _check(subprocess.run(args, env=env, capture_output=True, text=True, timeout=600))


def _world(model: Path, dataset: Path, *runs: tuple[Path, str, tuple[str, ...], bool], **env_vars: str) -> None:
    """One two-rank world (torchrun, ``swiftcore_testing.cli_runs``) for ``runs`` (output directory, tuner, extra
    arguments, resumed), in order: each is trained for :data:`STEPS` steps; a resumed one is then copied to
    :func:`_resumed` without its last checkpoint, and that copy resumed from its step-2 checkpoint. The ranks import
    the training stack once for all the runs; each run reads its checkpoints from disk. ``env_vars`` are added to the
    ranks' environment."""
    steps: list[dict[str, Any]] = []
    for run, tuner, extra, resume in runs:
        steps.append(["train", *_args(model, dataset, run, tuner, *extra, nproc=2)])
        if resume:
            again = _args(model, dataset, _resumed(run), tuner, *extra, nproc=2)
            steps.append({"copy": [str(run), str(_resumed(run))], "drop": f"checkpoint-{STEPS}"})
            steps.append(["train", *again, "--resume-from-checkpoint", "latest"])
    plan = runs[0][0].parent / "steps.json"
    plan.write_text(json.dumps(steps))
    args = [str(BIN / "torchrun"), "--standalone", "--nproc-per-node", "2", "-m", "swiftcore_testing.cli_runs"]
    args.append(str(plan))
    env = user_env(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", **env_vars)
    _check(subprocess.run(args, env=env, capture_output=True, text=True, timeout=600))


def _resumed(run: Path) -> Path:
    """Where :func:`_world` resumes a copy of ``run``."""
    return run.with_name(f"{run.name}-resumed")


def _losses(output_dir: Path) -> list[tuple[int, float]]:
    rows = [json.loads(line) for line in (output_dir / "logs.jsonl").read_text().splitlines()]
    return [(r["step"], r["loss"]) for r in rows if "loss" in r]


def _weights(checkpoint: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    name = "adapter_model.safetensors" if (checkpoint / "adapter_model.safetensors").exists() else "model.safetensors"
    return load_file(str(checkpoint / name))


def _max_diff(a: dict[str, Any], b: dict[str, Any]) -> float:
    assert sorted(a) == sorted(b)
    return max((a[k] - b[k]).abs().max().item() for k in a)


@pytest.fixture(scope="module")
def two_ranks() -> None:
    """Two training processes fit this machine: gloo on CPUs, or one GPU each (a rank per device under NCCL)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() < 2:
        pytest.skip("two ranks need two GPUs here (on a CPU-only machine they run over gloo)")


@pytest.fixture(scope="module")
def fsdp_runs(tiny_model_dir, dataset, tmp_path_factory, two_ranks) -> dict[str, Path]:
    """``{tuner: run}``: the ``--fsdp`` runs of both tuners, each resumed (see :func:`_resumed`), in one world."""
    root = tmp_path_factory.mktemp("fsdp")
    runs = {tuner: root / tuner for tuner in ("full", "lora")}
    _world(tiny_model_dir(FAMILY), dataset, *((run, tuner, ("--fsdp",), True) for tuner, run in runs.items()))
    return runs


@pytest.fixture(scope="module")
def deepspeed_runs(tiny_model_dir, dataset, tmp_path_factory, two_ranks) -> dict[str, Path]:
    """``{stage: run}``: the ``--deepspeed zero2`` run, then the ``zero3`` run and its resume, in one world (ZeRO-2
    first, in fresh ranks: transformers keeps a process-wide reference to the ZeRO-3 config a run set up). DeepSpeed
    compiles its ops under ``root/torch_extensions`` (see :func:`test_deepspeed_on_a_cpu_compiles_no_op`)."""
    pytest.importorskip("deepspeed")
    root = tmp_path_factory.mktemp("deepspeed")
    runs = {stage: root / stage for stage in ("zero2", "zero3")}
    extensions = str(root / "torch_extensions")
    _world(
        tiny_model_dir(FAMILY),
        dataset,
        *((run, "full", ("--deepspeed", s), s == "zero3") for s, run in runs.items()),
        TORCH_EXTENSIONS_DIR=extensions,
    )
    return runs


@pytest.fixture(scope="module")
def reference(tiny_model_dir, dataset, tmp_path_factory) -> Any:
    """``reference(tuner)``: the one-process run (batch 4) of that tuner, trained once per module, in this process
    (the reference, not the CLI, is the point: no process to start and no second import of the training stack)."""
    made: dict[str, Path] = {}

    def run(tuner: str) -> Path:
        if tuner not in made:
            made[tuner] = tmp_path_factory.mktemp(f"single-{tuner}")
            run_cli("train", *_args(tiny_model_dir(FAMILY), dataset, made[tuner], tuner))
        return made[tuner]

    return run


def _assert_resumed_exactly(run: Path) -> None:
    """The copy of ``run`` resumed from its step-2 checkpoint (:func:`_resumed`): steps 3-4 and the final weights
    equal the uninterrupted run's, and each step is logged once (a run that ignored the checkpoint would log steps 1-4
    again)."""
    resumed = _resumed(run)
    uninterrupted, again = _losses(run), _losses(resumed)
    assert [s for s, _ in again] == list(range(1, STEPS + 1)), "each step logged once after the resume"
    for (step, expected), (_, loss) in zip(uninterrupted, again, strict=True):
        assert loss == pytest.approx(expected, abs=1e-6), f"step {step}: resumed {loss}, uninterrupted {expected}"
    final = f"checkpoint-{STEPS}"
    assert _max_diff(_weights(resumed / final), _weights(run / final)) <= 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("tuner", ["full", "lora"])
def test_fsdp_matches_one_process_resumes_exactly_and_saves_a_transformers_checkpoint(
    tiny_model_dir, dataset, reference, fsdp_runs, tuner
) -> None:
    model = tiny_model_dir(FAMILY)
    single = reference(tuner)
    fsdp = fsdp_runs[tuner]

    one, two = _losses(single), _losses(fsdp)
    assert [s for s, _ in one] == [s for s, _ in two] == list(range(1, STEPS + 1))
    for (step, a), (_, b) in zip(one, two, strict=True):
        assert b == pytest.approx(a, abs=TOLERANCE[tuner]), f"step {step}: 1 process {a}, FSDP {b}"

    checkpoint = fsdp / f"checkpoint-{STEPS}"
    # Sharded: one distributed-checkpoint file per rank for the model and for the optimizer, resumable.
    for part in ("pytorch_model_fsdp_0", "optimizer_0"):
        assert sorted(p.name for p in (checkpoint / part).glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"], part
    # ... and the full model gathered into a plain checkpoint: the same tensors, the same values as one process.
    assert _max_diff(_weights(checkpoint), _weights(single / f"checkpoint-{STEPS}")) <= TOLERANCE[tuner]
    if tuner == "full":
        from transformers import Qwen3ASRForConditionalGeneration

        _, info = Qwen3ASRForConditionalGeneration.from_pretrained(checkpoint, output_loading_info=True)
        assert not (info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]), info
    else:
        from peft import PeftModel
        from transformers import Qwen3ASRForConditionalGeneration

        base = Qwen3ASRForConditionalGeneration.from_pretrained(model)
        adapted = PeftModel.from_pretrained(base, checkpoint)
        lora = {k for k, _ in adapted.named_parameters() if "lora_" in k}
        assert len(lora) == len(_weights(checkpoint))

    _assert_resumed_exactly(fsdp)
    if tuner == "full":  # a sharded checkpoint resumed without --fsdp: named, not a bare transformers ValueError
        args = [*_args(model, dataset, fsdp, tuner), "--resume-from-checkpoint", "latest"]
        result = CliRunner().invoke(
            cli, ["train", *args], env={"SWIFTCORE_PLUGINS": None, "SWIFTCORE_PLUGINS_STRICT": None}
        )
        assert isinstance(result.exception, SwiftcoreError), result.output[-2000:]
        assert "was saved by a --fsdp run, and this run uses neither --fsdp nor --deepspeed" in str(result.exception)


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_deepspeed_matches_one_process_and_resumes_exactly(reference, deepspeed_runs, stage) -> None:
    single = reference("full")
    run = deepspeed_runs[stage]

    one, two = _losses(single), _losses(run)
    assert [s for s, _ in one] == [s for s, _ in two] == list(range(1, STEPS + 1))
    for (step, a), (_, b) in zip(one, two, strict=True):
        assert b == pytest.approx(a, abs=TOLERANCE["full"]), f"step {step}: 1 process {a}, {stage} {b}"
    checkpoint = run / f"checkpoint-{STEPS}"
    shards = sorted(p.name for p in (checkpoint / f"global_step{STEPS}").iterdir())
    assert sum("optim_states" in name for name in shards) == 2, shards  # one optimizer shard per rank
    assert _max_diff(_weights(checkpoint), _weights(single / f"checkpoint-{STEPS}")) <= TOLERANCE["full"]
    if stage == "zero3":
        _assert_resumed_exactly(run)


@pytest.mark.slow
def test_deepspeed_on_a_cpu_compiles_no_op(deepspeed_runs) -> None:
    """DeepSpeed's CPU backend would compile its shared-memory all-reduce op (a minute or more of C++ before the first
    step, in every fresh environment) that ZeRO training never calls; swiftcore keeps it from doing so."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("the op is DeepSpeed's CPU accelerator's")
    extensions = deepspeed_runs["zero2"].parent / "torch_extensions"
    built = sorted(p.name for p in extensions.iterdir()) if extensions.exists() else []
    assert not any("shm_comm" in name for name in built), f"DeepSpeed compiled {built} under {extensions}"
    assert (deepspeed_runs["zero2"] / f"checkpoint-{STEPS}").is_dir()  # the runs trained, on gloo's all-reduce


@pytest.mark.slow
@pytest.mark.gpu
def test_fsdp_offload_matches_one_process_on_two_gpus(tiny_model_dir, dataset, reference, tmp_path) -> None:
    import torch

    if torch.cuda.device_count() < 2:
        pytest.skip("--fsdp-offload needs accelerators, and two ranks need two GPUs (scripts/gpu_check.sh)")
    model = tiny_model_dir(FAMILY)
    single = reference("full")
    run = tmp_path / "offload"
    _launch(model, dataset, run, "full", "--fsdp", "--fsdp-offload")
    for (step, a), (_, b) in zip(_losses(single), _losses(run), strict=True):
        assert b == pytest.approx(a, abs=TOLERANCE["full"]), f"step {step}: 1 process {a}, FSDP offload {b}"
    assert _max_diff(_weights(run / f"checkpoint-{STEPS}"), _weights(single / f"checkpoint-{STEPS}")) <= 1e-4


# ---- refusals and configs (no process group) ----


def _cfg(**kwargs: Any) -> TrainConfig:
    return TrainConfig(model="m", dataset=("d.jsonl",), **kwargs)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"fsdp": True, "deepspeed": "zero2"}, "--fsdp and --deepspeed: pick one"),
        ({"fsdp_offload": True}, "--fsdp-offload: offloads FSDP shards; add --fsdp"),
        ({"fsdp": True, "engine": "megatron"}, "--fsdp with --engine megatron"),
        ({"deepspeed": "zero3", "engine": "megatron"}, "--deepspeed zero3 with --engine megatron"),
        ({"fsdp": True, "recipe": "dpo"}, "--fsdp with recipe 'dpo'"),
        ({"deepspeed": "zero4"}, "--deepspeed: 'zero4' is neither zero2, zero3 nor a DeepSpeed config file"),
    ],
    ids=["fsdp-and-deepspeed", "offload-alone", "fsdp-megatron", "deepspeed-megatron", "fsdp-dpo", "bad-stage"],
)
def test_bad_combinations_are_refused_naming_the_options(kwargs: dict[str, Any], expected: str) -> None:
    with pytest.raises(SwiftcoreError, match="invalid training arguments") as info:
        _cfg(**kwargs).validate()
    assert expected in str(info.value)


def test_sharding_on_one_process_is_refused_with_what_to_do() -> None:
    with pytest.raises(SwiftcoreError, match=r"--fsdp shards .* add --nproc-per-node N"):
        check_launch(_cfg(fsdp=True), world_size=1)
    with pytest.raises(SwiftcoreError, match=r"--deepspeed zero3 shards .* \(--deepspeed FILE\.json\)"):
        check_launch(_cfg(deepspeed="zero3"), world_size=1)
    check_launch(_cfg(fsdp=True), world_size=2)  # accepted


def test_fsdp_offload_is_refused_on_a_machine_without_accelerator() -> None:
    import torch

    if distributed._accelerator() is not None:
        pytest.skip(f"this machine has an accelerator ({torch.accelerator.current_accelerator()})")
    with pytest.raises(SwiftcoreError, match="--fsdp-offload moves FSDP shards .* no accelerator"):
        check_launch(_cfg(fsdp=True, fsdp_offload=True), world_size=2)


def test_the_launcher_refuses_before_starting_any_process(monkeypatch: pytest.MonkeyPatch) -> None:
    launched: list[Any] = []
    monkeypatch.setattr(command.subprocess, "run", lambda *a, **k: launched.append(a))
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    result = runner.invoke(train, ["--model", "m", "--dataset", "d.jsonl", "--fsdp"], obj=CliState())
    assert result.exit_code != 0 and "--fsdp shards the model over several processes" in str(result.exception)
    assert not launched


def test_missing_deepspeed_package_is_named_with_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(distributed, "_deepspeed_available", lambda: False)
    with pytest.raises(SwiftcoreError, match=r"pip install 'swiftcore-train\[deepspeed\]'"):
        check_launch(_cfg(deepspeed="zero2"), world_size=2)


def test_generated_configs() -> None:
    assert fsdp_config(_cfg(fsdp=True)) == {
        "version": 2,
        "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "reshard_after_forward": True,
        "state_dict_type": "SHARDED_STATE_DICT",
        "cpu_offload": False,
        "cpu_ram_efficient_loading": False,
    }
    assert fsdp_config(_cfg(fsdp=True, fsdp_offload=True))["cpu_offload"] is True
    zero2, zero3 = deepspeed_config(2), deepspeed_config(3)
    assert zero2["zero_optimization"]["stage"] == 2 and zero3["zero_optimization"]["stage"] == 3
    # Every checkpoint of a ZeRO-3 run holds the gathered weights (transformers loads it).
    assert zero3["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    for generated in (zero2, zero3):  # sizes from swiftcore's flags, never a second source
        for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping"):
            assert generated[key] == "auto"
        assert "optimizer" not in generated and "scheduler" not in generated


def test_transformers_accepts_the_generated_deepspeed_configs() -> None:
    pytest.importorskip("deepspeed")
    from transformers.integrations import HfTrainerDeepSpeedConfig

    for stage in (2, 3):
        config = HfTrainerDeepSpeedConfig(deepspeed_config(stage))
        assert config.is_zero3() is (stage == 3)


def test_a_deepspeed_file_is_checked_field_by_field(tmp_path: Path) -> None:
    good = tmp_path / "ds.json"
    good.write_text(json.dumps({"zero_optimization": {"stage": 1}, "train_micro_batch_size_per_gpu": 2}))
    assert validate_deepspeed_file(good, _cfg(batch_size=2))["zero_optimization"]["stage"] == 1

    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "zero_optimization": {"stage": 4},
                "bf16": {"enabled": True},
                "fp16": {"enabled": True},
                "gradient_accumulation_steps": 8,
            }
        )
    )
    with pytest.raises(SwiftcoreError) as info:
        validate_deepspeed_file(bad, _cfg())
    message = str(info.value)
    for expected in (
        "zero_optimization.stage: 4 is not one of 0, 1, 2, 3",
        "bf16.enabled and fp16.enabled: both true",
        "bf16.enabled: true, but --dtype is float32",
        "gradient_accumulation_steps: 8 differs from --gradient-accumulation-steps 1",
    ):
        assert expected in message, message
    assert message.startswith(f"--deepspeed {str(bad)!r}")

    (tmp_path / "list.json").write_text("[1]")
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "nozero.json").write_text("{}")
    cases = {
        "missing.json": "no such file; give zero2, zero3 or a DeepSpeed JSON config file",
        "list.json": "expected a JSON object",
        "broken.json": "not valid JSON",
        "nozero.json": "zero_optimization: missing",
    }
    for name, expected in cases.items():
        with pytest.raises(SwiftcoreError, match=expected):
            validate_deepspeed_file(tmp_path / name, _cfg())
