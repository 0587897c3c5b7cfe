"""Evaluation during training (``--eval-every``): options checked before anything loads, the dataset checked line by
line, checkpoints scored by exact match as ``swiftcore eval`` scores them, logged, plotted, the best one kept.

The generation itself is a scripted engine here; a real tiny run, compared with ``swiftcore eval`` through the served
endpoint, is in ``plugins/eval/tests/test_eval_e2e.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from swiftcore_train.config import TrainConfig
from swiftcore_train.generation_eval import (
    EVAL_SAMPLES,
    GenerationEvalCallback,
    GenerationEvalOptions,
    exact_match,
    load_eval_records,
)

from swiftcore.api import SwiftcoreError, load_plugins
from swiftcore.api.cli import cli, main

ROW = {"messages": [{"role": "user", "content": "Is 7 even or odd?"}, {"role": "assistant", "content": "odd"}]}


def _write(path: Path, rows: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def _train(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """``swiftcore train`` as the console script runs it (an error: one line, exit code 2)."""
    data = _write(tmp_path / "train.jsonl", [ROW])
    argv = ["train", "--model", str(tmp_path / "no-model"), "--dataset", str(data), "--output-dir",
            str(tmp_path / "out"), *args]  # fmt: skip
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out + err


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"eval_every": 5}, "--eval-every needs --eval-dataset"),
        ({"eval_dataset": "q.jsonl"}, "--eval-dataset is read with --eval-every"),
        ({"eval_every": 0, "eval_dataset": "q.jsonl"}, "--eval-every: 0 must be at least 1"),
        ({"eval_every": 5, "eval_dataset": "q.jsonl", "best_metric": "eval_loss"}, "--best-metric: 'eval_loss'"),
        ({"best_metric": "eval_accuracy"}, "--best-metric needs --eval-every"),
        ({"eval_every": 5, "eval_dataset": "q.jsonl", "eval_max_tokens": 0}, "--eval-max-tokens"),
    ],
)
def test_bad_options_are_refused_naming_the_flags(options: dict, message: str) -> None:
    with pytest.raises(SwiftcoreError, match="invalid evaluation options") as info:
        GenerationEvalOptions.from_options(options)
    assert message in str(info.value)


def test_other_recipe_options_are_ignored_and_defaults_apply() -> None:
    options = GenerationEvalOptions.from_options({"beta": 0.1, "eval_every": 3, "eval_dataset": "q.jsonl"})
    assert options.enabled and options.eval_max_tokens == 64 and options.eval_at_start
    assert not GenerationEvalOptions.from_options(None).enabled


def test_eval_every_without_a_dataset_is_a_usage_error_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, message = _train(tmp_path, capsys, "--eval-every", "5")
    assert code == 2 and "--eval-every needs --eval-dataset" in message, message
    assert not (tmp_path / "out").exists()


def test_a_bad_eval_dataset_line_is_named_before_training(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _write(tmp_path / "questions.jsonl", [ROW, "{not json", {"question": "Is 2 even?"}])
    code, message = _train(tmp_path, capsys, "--eval-every", "5", "--eval-dataset", str(bad))
    assert code == 2, message
    assert f"{bad}:2: not valid JSON" in message and f"{bad}:3: 'answer' must be a string" in message, message
    assert "no-model" not in message  # refused before the model is even looked at
    assert not (tmp_path / "out").exists()


def test_a_missing_eval_dataset_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, message = _train(tmp_path, capsys, "--eval-every", "5", "--eval-dataset", str(tmp_path / "nope.jsonl"))
    assert code == 2 and "--eval-dataset" in message and "nope.jsonl: no such file" in message, message


def test_the_options_are_explained_by_help() -> None:
    result = CliRunner().invoke(cli, ["train", "--help"], env={"SWIFTCORE_PLUGINS_STRICT": None})
    assert result.exit_code == 0
    for flag in ("--eval-every", "--eval-dataset", "--eval-max-tokens", "--best-metric", "--no-eval-at-start"):
        assert flag in result.output
    assert "[recipe sft] Save a checkpoint every N" in " ".join(result.output.split())


def test_the_eval_dataset_is_read_as_swiftcore_eval_reads_it(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "q.jsonl", [ROW, {"question": "Is 4 even or odd?", "answer": "even", "system": "Be brief."}]
    )
    records = load_eval_records(str(path), load_plugins())
    assert [(r.question, r.answer, r.line) for r in records] == [
        ("Is 7 even or odd?", "odd", 1),
        ("Is 4 even or odd?", "even", 2),
    ]
    assert records[1].messages[0] == {"role": "system", "content": "Be brief."}
    assert len(load_eval_records("parity")) == 40  # the built-in dataset by name


def test_without_the_backend_loaded_the_run_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "q.jsonl", [ROW])
    with pytest.raises(SwiftcoreError, match="--plugin infer"):
        load_eval_records(str(path), load_plugins(["train"], env={}))


@pytest.mark.parametrize(
    ("reply", "answer"),
    [("odd", "odd"), (" Odd\n", "odd"), ("EVEN", " even "), ("It is odd.", "odd"), ("", "odd"), ("odd.", "odd"),
     ("\u3000odd\u00a0", "odd"), ("ΟΔΔ", "οδδ")],
)  # fmt: skip
def test_exact_match_is_evalscopes_acc(reply: str, answer: str) -> None:
    pytest.importorskip("evalscope")
    from evalscope.metrics.nlp.metrics import Accuracy

    assert exact_match(reply, answer) == bool(Accuracy().apply([reply], [answer])[0])


class _ScriptedEngine:
    """Answers from ``replies[model_dir.name]`` (question -> reply); records every request."""

    def __init__(self, replies: dict[str, dict[str, str]], model_dir: Path, calls: list) -> None:
        self.replies, self.model_dir, self.calls = replies, model_dir, calls
        self.closed = False

    def generate_requests(self, requests: list, *, batch_size: int) -> list:
        self.calls.append((self.model_dir.name, requests, batch_size))
        table = self.replies[self.model_dir.name]
        out = []
        for request in requests:
            assert request.sampling.temperature == 0.0 and request.sampling.max_new_tokens == 8
            text = table[request.record["messages"][-1]["content"]]
            out.append(SimpleNamespace(content=text, error=None if text != "!" else "boom"))
        return out

    def close(self) -> None:
        self.closed = True


def test_checkpoints_are_scored_logged_and_the_best_recorded(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    questions = _write(tmp_path / "q.jsonl", [ROW, {"question": "Is 4 even or odd?", "answer": "even"}])
    records = load_eval_records(str(questions))
    out = tmp_path / "run"
    out.mkdir()
    replies = {
        "base": {"Is 7 even or odd?": "maybe", "Is 4 even or odd?": "maybe"},
        "checkpoint-2": {"Is 7 even or odd?": " Odd ", "Is 4 even or odd?": "even"},
        "checkpoint-4": {"Is 7 even or odd?": "odd", "Is 4 even or odd?": "!"},  # a failed generation: wrong
    }
    calls: list = []
    options = GenerationEvalOptions(eval_every=2, eval_dataset=str(questions), eval_max_tokens=8,
                                    best_metric="eval_accuracy")  # fmt: skip
    callback = GenerationEvalCallback(
        options, records, model_dir=tmp_path / "base", output_dir=out, plugins=None,
        engine_factory=lambda model_dir, plugins, **kw: _ScriptedEngine(replies, Path(model_dir), calls),
    )  # fmt: skip
    state = SimpleNamespace(global_step=0, epoch=0.0, max_steps=5, is_world_process_zero=True, best_metric=None)
    callback.on_train_begin(None, state, None)
    for step in range(1, 6):
        state.global_step, state.epoch = step, step / 5
        control = callback.on_step_end(None, state, SimpleNamespace(should_save=False))
        assert control.should_save == (step % 2 == 0)
        if control.should_save or step == 5:
            (out / f"checkpoint-{step}").mkdir()
            if step == 5:
                replies["checkpoint-5"] = replies["checkpoint-4"]
            callback.on_save(None, state, control)
    callback.on_train_end(None, state, None)

    rows = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    evals = [(r["step"], r["eval_accuracy"], r.get("eval_checkpoint")) for r in rows if "eval_accuracy" in r]
    assert evals == [(0, 0.0, None), (2, 1.0, "checkpoint-2"), (4, 0.5, "checkpoint-4"), (5, 0.5, "checkpoint-5")]
    assert rows[2]["eval_errors"] == 1 and rows[1]["eval_correct"] == 2 and rows[1]["eval_total"] == 2
    assert rows[-1] == {"step": 5, "best_checkpoint": "checkpoint-2", "best_metric": "eval_accuracy", "best_value": 1.0}
    assert callback.protected_checkpoint == str(out / "checkpoint-2") and state.best_metric == 1.0
    assert callback.last_accuracy == 0.5
    assert [c[0] for c in calls] == ["base", "checkpoint-2", "checkpoint-4", "checkpoint-5"]
    samples = [json.loads(line) for line in (out / EVAL_SAMPLES).read_text().splitlines()]
    assert len(samples) == 8
    assert samples[2] == {"step": 2, "line": 1, "question": "Is 7 even or odd?", "expected": "odd", "answer": " Odd ",
                          "correct": True}  # fmt: skip

    # A resumed run counts the evaluations already logged (its checkpoints still on disk) for the best one.
    resumed = GenerationEvalCallback(
        options, records, model_dir=tmp_path / "base", output_dir=out, plugins=None,
        engine_factory=lambda *a, **k: pytest.fail("a resumed run does not re-evaluate"),
    )  # fmt: skip
    state = SimpleNamespace(global_step=4, epoch=0.8, max_steps=5, is_world_process_zero=True, best_metric=None)
    resumed.on_train_begin(None, state, None)
    assert resumed.best == ("checkpoint-2", 1.0) and state.best_metric == 1.0
    steps = [json.loads(line)["step"] for line in (out / EVAL_SAMPLES).read_text().splitlines()]
    assert max(steps) == 4  # the samples of step 5, which the resumed run redoes, are dropped


def test_the_loss_plot_draws_accuracy_on_a_second_axis(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from swiftcore_train.trainer import plot_loss_curve

    log = _write(tmp_path / "logs.jsonl", [
        {"step": 0, "eval_accuracy": 0.0, "eval_correct": 0, "eval_total": 4},
        {"step": 5, "loss": 2.0}, {"step": 5, "eval_accuracy": 0.75, "eval_checkpoint": "checkpoint-5"},
        {"step": 5, "best_checkpoint": "checkpoint-5", "best_metric": "eval_accuracy", "best_value": 0.75},
    ])  # fmt: skip
    assert plot_loss_curve(log, tmp_path / "loss.png") == tmp_path / "loss.png"
    only_accuracy = _write(tmp_path / "acc.jsonl", [{"step": 0, "eval_accuracy": 0.5}])
    assert plot_loss_curve(only_accuracy, tmp_path / "acc.png") is not None


def test_the_eval_dataset_is_an_input_of_the_run() -> None:
    from swiftcore_train.run import run_inputs

    cfg = TrainConfig(model="m", dataset=("d.jsonl",), recipe_options={"eval_every": 5, "eval_dataset": "q.jsonl"})
    assert "q.jsonl" in run_inputs(cfg)


def test_a_lora_run_scores_its_adapter_checkpoints_and_keeps_the_best_and_the_last(
    tiny_model_dir, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real tiny LoRA run: the base model at step 0, then each adapter checkpoint through the transformers engine
    (as ``swiftcore deploy --model checkpoint-N`` loads it); ``--save-total-limit 1`` keeps the best and the last."""
    torch = pytest.importorskip("torch")
    rows = [
        {"messages": [{"role": "user", "content": f"Is {n} even or odd?"},
                      {"role": "assistant", "content": "even" if n % 2 == 0 else "odd"}]}
        for n in range(10, 26)
    ]  # fmt: skip
    data = _write(tmp_path / "train.jsonl", rows)
    questions = _write(tmp_path / "q.jsonl", rows[:4])
    out = tmp_path / "run"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code = main([
            "train", "--model", str(tiny_model_dir("qwen3_5")), "--dataset", str(data), "--output-dir", str(out),
            "--tuner", "lora", "--max-steps", "4", "--batch-size", "4", "--max-length", "64", "--save-steps", "100",
            "--save-total-limit", "1", "--eval-every", "2", "--eval-dataset", str(questions), "--eval-max-tokens", "4",
            "--best-metric", "eval_accuracy",
        ])  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    printed, err = capsys.readouterr()
    assert code == 0, err[-4000:]
    logged = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    evals = [(r["step"], r.get("eval_checkpoint"), r["eval_total"]) for r in logged if "eval_accuracy" in r]
    assert evals == [(0, None, 4), (2, "checkpoint-2", 4), (4, "checkpoint-4", 4)]
    best = logged[-1]
    assert best["best_metric"] == "eval_accuracy" and best["best_checkpoint"] in ("checkpoint-2", "checkpoint-4")
    kept = sorted(p.name for p in out.glob("checkpoint-*"))
    assert kept == sorted({best["best_checkpoint"], "checkpoint-4"}), kept
    assert (out / "checkpoint-4" / "adapter_config.json").is_file()
    assert f"best:       {out / best['best_checkpoint']}" in printed
    assert len((out / EVAL_SAMPLES).read_text().splitlines()) == 12
