"""``swiftcore train`` never destroys what it did not write: bad arguments change nothing, a non-empty output
directory is refused, ``--overwrite-output-dir`` removes only an earlier run's outputs and never an input,
resume errors name the folder, bad data names the file and line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from swiftcore_testing import run_swiftcore

RECORD = {"messages": [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "hi"}]}


def _train(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    return run_swiftcore("train", *args, env=env, timeout=600)


def _listing(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "train.jsonl"
    path.write_text(json.dumps(RECORD) + "\n" * 1, encoding="utf-8")
    return path


@pytest.fixture
def finished_run(tmp_path: Path) -> Path:
    """An output directory as a finished swiftcore run leaves it, plus a file of the user's."""
    from swiftcore_train import MANIFEST, OUTPUT_PATTERNS

    out = tmp_path / "out"
    (out / "checkpoint-5").mkdir(parents=True)
    (out / "checkpoint-5" / "model.safetensors").write_bytes(b"weights")
    (out / "checkpoint-5" / "trainer_state.json").write_text('{"global_step": 5}')
    (out / "logs.jsonl").write_text('{"step": 5, "loss": 1.0}\n')
    (out / "args.json").write_text("{}")
    (out / MANIFEST).write_text(json.dumps({"outputs": list(OUTPUT_PATTERNS)}))
    (out / "notes.txt").write_text("the user's own notes")
    return out


@pytest.mark.parametrize(
    ("flag", "value", "named"),
    [("--learning-rate", "-1", "--learning-rate"), ("--learning-rate", "nan", "--learning-rate"),
     ("--warmup-ratio", "inf", "--warmup-ratio"), ("--max-steps", "0", "--max-steps"),
     ("--max-grad-norm", "nan", "--max-grad-norm")],
)
def test_bad_arguments_change_nothing(flag: str, value: str, named: str, finished_run: Path, data: Path,
                                      tiny_model_dir) -> None:
    before = _listing(finished_run)
    proc = _train("--model", str(tiny_model_dir("qwen3_5")), "--dataset", str(data), "--output-dir",
                  str(finished_run), "--overwrite-output-dir", flag, value)
    assert proc.returncode != 0 and named in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert _listing(finished_run) == before


def test_a_non_empty_output_dir_is_refused(finished_run: Path, data: Path, tiny_model_dir) -> None:
    before = _listing(finished_run)
    proc = _train("--model", str(tiny_model_dir("qwen3_5")), "--dataset", str(data), "--output-dir",
                  str(finished_run), "--max-steps", "1")
    assert proc.returncode != 0 and "is not empty" in proc.stderr and "--overwrite-output-dir" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert _listing(finished_run) == before


def test_overwrite_plan_removes_only_swiftcore_outputs_and_never_an_input(finished_run: Path) -> None:
    from swiftcore_train import plan_output_dir

    (finished_run / "checkpoint-9").mkdir()  # the model this run starts from sits in the old run's folder
    plan = plan_output_dir(finished_run, resume=False, overwrite=True, inputs=(str(finished_run / "checkpoint-9"),))
    assert sorted(p.name for p in plan.remove) == ["args.json", "checkpoint-5", "logs.jsonl", "swiftcore_outputs.json"]
    assert [p.name for p in plan.kept] == ["checkpoint-9"]
    # an input holding the whole output dir protects all of it
    holder = plan_output_dir(finished_run, resume=False, overwrite=True, inputs=(str(finished_run / "logs.jsonl"),))
    assert "logs.jsonl" in [p.name for p in holder.kept]


def test_overwrite_keeps_an_input_inside_the_output_dir(finished_run: Path, data: Path, tiny_model_dir) -> None:
    model = finished_run / "checkpoint-1"
    shutil.copytree(tiny_model_dir("qwen3_5"), model)
    proc = _train("--model", str(model), "--dataset", str(data), "--output-dir", str(finished_run),
                  "--overwrite-output-dir", "--tuner", "full", "--max-steps", "2", "--save-steps", "2", "--no-plot")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (model / "config.json").is_file(), "the run deleted its own input model"
    assert (finished_run / "notes.txt").read_text() == "the user's own notes"
    assert not (finished_run / "checkpoint-5").exists()  # the earlier run's output went
    assert (finished_run / "checkpoint-2" / "trainer_state.json").is_file()
    steps = [json.loads(line)["step"] for line in (finished_run / "logs.jsonl").read_text().splitlines()]
    assert 5 not in steps


def test_overwrite_of_a_folder_swiftcore_did_not_write_is_refused(tmp_path: Path, data: Path, tiny_model_dir) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "checkpoint-3").mkdir()  # looks like ours, but no manifest says so
    proc = _train("--model", str(tiny_model_dir("qwen3_5")), "--dataset", str(data), "--output-dir", str(out),
                  "--overwrite-output-dir", "--max-steps", "1")
    assert proc.returncode != 0 and "swiftcore_outputs.json" in proc.stderr, proc.stderr
    assert (out / "checkpoint-3").is_dir()


@pytest.mark.parametrize("case", ["none", "corrupt", "other_model"])
def test_resume_errors_name_the_folder(case: str, tmp_path: Path, data: Path, tiny_model_dir) -> None:
    out = tmp_path / "out"
    checkpoint = out / "checkpoint-4"
    checkpoint.mkdir(parents=True)
    if case == "none":
        shutil.rmtree(checkpoint)
        expected = f"no checkpoint-N directory in {str(out)!r}"
    elif case == "corrupt":
        (checkpoint / "trainer_state.json").write_text('{"global_st')
        expected = "trainer_state.json is unreadable"
    else:
        (checkpoint / "trainer_state.json").write_text('{"global_step": 4}')
        (checkpoint / "swiftcore_args.json").write_text(json.dumps({"model_spec": {"name": "gemma4"}}))
        expected = "checkpoint of model 'gemma4'"
    before = _listing(out)
    proc = _train("--model", str(tiny_model_dir("qwen3_5")), "--dataset", str(data), "--output-dir", str(out),
                  "--resume-from-checkpoint", "latest", "--max-steps", "8")
    assert proc.returncode != 0 and expected in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert _listing(out) == before


def test_resume_drops_the_log_records_it_logs_again(tmp_path: Path) -> None:
    from swiftcore_train import trim_log

    log = tmp_path / "logs.jsonl"
    log.write_text("".join(json.dumps({"step": s, "loss": 1.0 / s}) + "\n" for s in (1, 2, 3, 4)) + '{"step": 5, "lo')
    assert trim_log(log, 2) == 3
    assert [json.loads(line)["step"] for line in log.read_text().splitlines()] == [1, 2]


@pytest.mark.parametrize(
    ("content", "expected"),
    [(b"\xff\xfe{}\n", "train.jsonl:1: not UTF-8 text"), (b"", "train.jsonl: holds no rows"),
     (json.dumps(RECORD).encode() + b'\n{"messages": [{"ro', "train.jsonl:2: invalid JSON")],
    ids=["not-utf8", "empty", "truncated-line"],
)
def test_bad_data_names_the_file_and_line(content: bytes, expected: str, tmp_path: Path, tiny_model_dir) -> None:
    path = tmp_path / "train.jsonl"
    path.write_bytes(content)
    proc = _train("--model", str(tiny_model_dir("qwen3_5")), "--dataset", str(path), "--output-dir",
                  str(tmp_path / "out"), "--max-steps", "1")
    assert proc.returncode != 0 and expected in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_truncated_weights_file_is_named(tmp_path: Path, data: Path, tiny_model_dir) -> None:
    model = tmp_path / "model"
    shutil.copytree(tiny_model_dir("qwen3_5"), model)
    weights = next(model.glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    proc = _train("--model", str(model), "--dataset", str(data), "--output-dir", str(tmp_path / "out"),
                  "--max-steps", "1")
    assert proc.returncode != 0 and weights.name in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_save_that_fails_midway_leaves_earlier_checkpoints_intact(tmp_path: Path, tiny_model_dir,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Disk full while writing checkpoint-2: checkpoint-1 is untouched, nothing appears as checkpoint-2, and
    the error says what happened and what to do."""
    import errno

    from swiftcore_train import SwiftTrainer, TrainConfig, run_training

    from swiftcore import load_plugins
    from swiftcore.errors import SwiftcoreError

    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps(RECORD) + "\n", encoding="utf-8")
    out = tmp_path / "out"
    original = SwiftTrainer._save
    saved: dict[str, dict[str, int]] = {}

    def failing_save(self, output_dir=None, state_dict=None):
        if self.state.global_step == 2:
            saved["checkpoint-1"] = _listing(out / "checkpoint-1")
            Path(output_dir).mkdir(parents=True, exist_ok=True)
            Path(output_dir, "model.safetensors").write_bytes(b"half a file")
            raise OSError(errno.ENOSPC, "No space left on device")
        original(self, output_dir, state_dict)

    monkeypatch.setattr(SwiftTrainer, "_save", failing_save)
    cfg = TrainConfig(model=str(tiny_model_dir("qwen3_5")), dataset=(str(data),), output_dir=str(out), tuner="full",
                      max_steps=2, save_steps=1, logging_steps=1, plot=False)
    with pytest.raises(SwiftcoreError, match="No space left on device.*earlier checkpoints are intact"):
        run_training(cfg, load_plugins(env={}))
    assert _listing(out / "checkpoint-1") == saved["checkpoint-1"] != {}
    assert not (out / "checkpoint-2").exists() and not (out / ".staging").exists()


def test_the_config_file_is_an_input_never_removed(finished_run: Path) -> None:
    """A --config file kept inside the old run's folder (named like an output) is protected by --overwrite."""
    from swiftcore_train import TrainConfig, plan_output_dir, run_inputs

    cfg = TrainConfig(model="m", dataset=("d.jsonl",), config_file=str(finished_run / "args.json"))
    plan = plan_output_dir(finished_run, resume=False, overwrite=True, inputs=run_inputs(cfg))
    assert "args.json" in [p.name for p in plan.kept] and "args.json" not in [p.name for p in plan.remove]


_FAIL_IN_PROCESS = """
import json, sys
from swiftcore.cli.main import main
code = main(sys.argv[1:])
print(json.dumps([code, [m for m in ("torch", "transformers") if m in sys.modules]]))
"""


@pytest.mark.parametrize("case", ["sft-bad-row", "sft-resume-latest-none", "dpo-bad-pair"])
def test_bad_data_and_a_missing_checkpoint_fail_before_transformers_loads(case: str, tmp_path: Path,
                                                                          tiny_model_dir) -> None:
    """The rows and the checkpoint to resume are checked before the tokenizer loads: a mistake costs a second,
    not the seconds importing torch and transformers takes."""
    data = tmp_path / "train.jsonl"
    recipe = ["--recipe", "dpo"] if case.startswith("dpo") else []
    if case == "sft-bad-row":
        data.write_text(json.dumps(RECORD) + '\n{"messages": [{"ro\n')
    elif case == "dpo-bad-pair":
        data.write_text(json.dumps({"prompt": "hi", "chosen": "a"}) + "\n")
    else:
        data.write_text(json.dumps(RECORD) + "\n")
        recipe = ["--resume-from-checkpoint", "latest"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    args = ["train", "--model", str(tiny_model_dir("qwen3_5")), "--dataset", str(data), "--output-dir",
            str(tmp_path / "out"), *recipe]
    proc = subprocess.run([sys.executable, "-c", _FAIL_IN_PROCESS, *args], capture_output=True, text=True, env=env,
                          timeout=300)
    code, heavy = json.loads(proc.stdout.strip().splitlines()[-1])
    assert code != 0 and ("train.jsonl" in proc.stderr or "no checkpoint-N" in proc.stderr), proc.stderr
    assert heavy == [], f"{case}: {heavy} imported before the error: {proc.stderr}"
