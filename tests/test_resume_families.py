"""`swiftcore train --resume-from-checkpoint latest` for every family and tuner (issue 27).

Each case trains 3 steps with a checkpoint every 2, copies ``checkpoint-2`` into a fresh output
directory (the issue's repro) and resumes it to ``--max-steps 3``. The resumed run must start at step 3,
finish, log the uninterrupted run's loss for step 3 (float32, same seed) and end on its weights, which
also proves the checkpoint's weights were loaded (DeepSeek-V4 saves them renamed: a plain load skipped them).

Those runs use a constant learning rate; one more case (Qwen3.5, LoRA and full) trains 6 steps with a cosine
schedule and 3 warm-up steps and resumes from step 2, inside the warm-up: the resumed run logs only steps
3..6, each step's loss *and* learning rate equal the uninterrupted run's, and the final weights are equal,
so the scheduler's state (not only the optimizer's and the weights) survives the checkpoint.

The runs go through the CLI in this process (``swiftcore.cli.main.main``): a subprocess per run would
spend most of its time importing torch, and this file must stay at a couple of minutes.
"""

from __future__ import annotations

import itertools
import json
import shutil
from pathlib import Path

import pytest

FAMILIES = ["qwen3_5", "gemma4", "deepseek_v4", "qwen3_asr", "mimo_v2_flash", "olmoe", "glm5"]
TUNERS = ["full", "lora"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """12 short conversations: 3 steps of batch 2 stop mid-epoch, so resuming must skip seen batches."""
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Say {words[i % 6]} {i}."},
                {"role": "assistant", "content": f"{words[i % 6]} {i}" + " again" * (i % 3)},
            ]
        }
        for i in range(12)
    ]
    path = tmp_path_factory.mktemp("resume-data") / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _train(
    model: Path,
    dataset: Path,
    out: Path,
    tuner: str,
    *extra: str,
    steps: int = 3,
    save_steps: int = 2,
    scheduler: str = "constant",
) -> None:
    from swiftcore.cli.main import main

    code = main(
        [
            "train",
            "--model",
            str(model),
            "--dataset",
            str(dataset),
            "--output-dir",
            str(out),
            "--tuner",
            tuner,
            "--max-steps",
            str(steps),
            "--save-steps",
            str(save_steps),
            "--batch-size",
            "2",
            "--logging-steps",
            "1",
            "--learning-rate",
            "1e-3",
            "--lr-scheduler",
            scheduler,
            "--max-length",
            "64",
            "--dtype",
            "float32",
            "--seed",
            "7",
            "--no-plot",
            *extra,
        ]
    )
    assert code == 0, f"swiftcore train exited {code}"


def _losses(out: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r["loss"] for r in rows if "loss" in r}


def _weights(checkpoint: Path) -> dict:
    from safetensors.torch import load_file

    name = "adapter_model.safetensors" if (checkpoint / "adapter_config.json").exists() else "model.safetensors"
    return load_file(str(checkpoint / name))


@pytest.mark.parametrize("tuner", TUNERS)
@pytest.mark.parametrize("family", FAMILIES)
def test_resume_continues_the_run_exactly(family: str, tuner: str, tiny_model_dir, dataset, tmp_path) -> None:
    import torch

    model = tiny_model_dir(family)
    reference = tmp_path / "reference"
    _train(model, dataset, reference, tuner)
    expected = _losses(reference)
    assert sorted(expected) == [1, 2, 3]

    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(reference / "checkpoint-2", resumed / "checkpoint-2")
    _train(model, dataset, resumed, tuner, "--resume-from-checkpoint", "latest")

    got = _losses(resumed)
    assert sorted(got) == [3], f"the resumed run did not continue from step 2: logged steps {sorted(got)}"
    assert got[3] == pytest.approx(expected[3], abs=1e-5)
    state = json.loads((resumed / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    want, have = _weights(reference / "checkpoint-3"), _weights(resumed / "checkpoint-3")
    assert want.keys() == have.keys()
    for key in want:
        assert torch.allclose(want[key], have[key], atol=1e-6), key


def _log(out: Path) -> dict[int, tuple[float, float]]:
    """step -> (loss, learning rate) of every training log record (each step logged once: a repeat fails)."""
    rows = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines() if line.strip()]
    steps = [r["step"] for r in rows if "loss" in r]
    assert len(steps) == len(set(steps)), f"a step was logged twice: {steps}"
    return {r["step"]: (r["loss"], r["learning_rate"]) for r in rows if "loss" in r}


COSINE_STEPS = 6


@pytest.mark.parametrize("tuner", TUNERS)
def test_resume_keeps_the_cosine_schedule_and_its_warmup(tuner: str, tiny_model_dir, dataset, tmp_path) -> None:
    """Cosine with warm-up: resuming at step 2 (inside the 3 warm-up steps) goes on with the uninterrupted
    run's learning rates, not a schedule restarted at 0, and so with its losses and its final weights."""
    import torch

    model = tiny_model_dir("qwen3_5")
    schedule = ("--warmup-ratio", "0.5")  # ceil(0.5 * 6) = 3 warm-up steps, then cosine decay to step 6
    reference = tmp_path / "reference"
    _train(model, dataset, reference, tuner, *schedule, steps=COSINE_STEPS, scheduler="cosine")
    expected = _log(reference)
    assert sorted(expected) == list(range(1, COSINE_STEPS + 1))
    lrs = [expected[step][1] for step in sorted(expected)]
    peak = lrs.index(max(lrs))
    # The schedule is really warm-up then cosine (a constant LR would make the comparison below vacuous).
    assert 0 < peak < COSINE_STEPS - 1, f"no warm-up then decay in the logged learning rates {lrs}"
    assert all(a < b for a, b in itertools.pairwise(lrs[: peak + 1])), f"warm-up does not rise: {lrs}"
    assert all(a > b for a, b in itertools.pairwise(lrs[peak:])), f"cosine does not decay: {lrs}"

    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copytree(reference / "checkpoint-2", resumed / "checkpoint-2")
    _train(model, dataset, resumed, tuner, *schedule, "--resume-from-checkpoint", "latest",
           steps=COSINE_STEPS, scheduler="cosine")

    got = _log(resumed)
    assert sorted(got) == list(range(3, COSINE_STEPS + 1)), f"resumed run logged steps {sorted(got)}, not 3..6"
    for step, (loss, lr) in got.items():
        want_loss, want_lr = expected[step]
        assert lr == pytest.approx(want_lr, rel=1e-9, abs=1e-12), f"step {step}: lr {lr} != uninterrupted {want_lr}"
        assert loss == pytest.approx(want_loss, abs=1e-5), f"step {step}: loss {loss} != uninterrupted {want_loss}"
    last = f"checkpoint-{COSINE_STEPS}"
    want, have = _weights(reference / last), _weights(resumed / last)
    assert want.keys() == have.keys()
    for key in want:
        assert torch.allclose(want[key], have[key], atol=1e-6), key


def _run(model: Path, dataset: Path, out: Path, *extra: str) -> int:
    from swiftcore.cli.main import main

    args = ["train", "--model", str(model), "--dataset", str(dataset), "--output-dir", str(out), "--no-plot"]
    return main([*args, "--max-steps", "2", "--max-length", "64", *extra])


def test_resume_without_a_checkpoint_is_a_clear_error(tiny_model_dir, dataset, tmp_path, capsys) -> None:
    code = _run(tiny_model_dir("deepseek_v4"), dataset, tmp_path / "empty", "--resume-from-checkpoint", "latest")
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--resume-from-checkpoint latest: no checkpoint-N directory in" in err and "Traceback" not in err


def test_resuming_a_lora_checkpoint_as_full_names_the_tuner(tiny_model_dir, dataset, tmp_path, capsys) -> None:
    # Only the file layout matters: the mismatch is refused before any weight is read.
    checkpoint = tmp_path / "out" / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "adapter_config.json").write_text("{}")
    (checkpoint / "adapter_model.safetensors").write_bytes(b"")
    (checkpoint / "trainer_state.json").write_text("{}")
    code = _run(
        tiny_model_dir("deepseek_v4"),
        dataset,
        tmp_path / "out",
        "--tuner",
        "full",
        "--resume-from-checkpoint",
        "latest",
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert "holds a LoRA adapter" in err and "--tuner lora" in err
