"""Evaluation during training: generate for a local benchmark at every N steps and score exact match.

``swiftcore train --eval-every N --eval-dataset FILE.jsonl`` (options of the ``sft`` recipe) makes the run save a
checkpoint every N optimiser steps (and at the end, as always), and evaluates each of those checkpoints the way
``swiftcore eval`` evaluates a served one:

- the checkpoint is loaded by the ``transformers`` backend of swiftcore-infer, exactly as ``swiftcore deploy
  --model CHECKPOINT`` loads it (its own template, its recorded thinking default), and every question is asked
  greedily as a chat request with ``--eval-max-tokens`` (the server's prompt path, the engine's SampleEncoder);
- a reply is correct when its ``content`` (reasoning excluded) equals the reference answer once both are
  lower-cased and stripped of surrounding whitespace: EvalScope's ``acc``, which ``swiftcore eval`` reports;
- the dataset is read by swiftcore-eval's own reader (:func:`swiftcore_eval.dataset.read_dataset`: the training
  format, or ``{"question", "answer"}``), checked line by line before training starts.

So the accuracy logged at step N is the accuracy ``swiftcore eval`` measures for ``checkpoint-N`` through the
served endpoint. Each evaluation appends ``{"step", "epoch", "eval_accuracy", "eval_correct", "eval_total",
"eval_checkpoint", "eval_seconds"}`` to ``logs.jsonl`` and the per-question answers to ``eval_samples.jsonl``;
``--best-metric eval_accuracy`` records the best checkpoint (``{"best_checkpoint", ...}`` in ``logs.jsonl``, the
run's :class:`~swiftcore_train.config.TrainResult`) and keeps it through ``--save-total-limit``'s rotation, which
then keeps the best and the last checkpoint (so at most ``max(N, 2)``; none is deleted that the limit keeps). The
base model is scored at step 0 first (``--no-eval-at-start`` skips it).

Nothing here imports torch at module level; the engine and the dataset reader are imported when a run uses them.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.api import SwiftcoreError

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = [
    "BACKEND",
    "EVAL_SAMPLES",
    "METRICS",
    "GenerationEvalCallback",
    "GenerationEvalOptions",
    "add_eval_options",
    "exact_match",
    "load_eval_records",
    "score_replies",
]

log = logging.getLogger("swiftcore.train")

#: The backend that generates (the transformers engine of swiftcore-infer, as ``swiftcore deploy`` defaults to).
BACKEND = "transformers"
#: The per-question file each evaluation appends to, in the output directory.
EVAL_SAMPLES = "eval_samples.jsonl"
#: Metrics ``--best-metric`` can select by (higher is better).
METRICS = ("eval_accuracy",)
_INSTALL_HINT = "pip install 'swiftcore-train[eval]' (swiftcore-infer and swiftcore-eval; make install does it)"


def add_eval_options(parser: Any, recipes: str | tuple[str, ...] = "sft") -> None:
    """Add ``--eval-every``, ``--eval-dataset``, ... to ``swiftcore train`` (the ``swiftcore_addoption`` hook)."""
    group = parser.getgroup("generation-eval", "evaluation during training (generation, exact match)", recipe=recipes)
    group.addoption(
        "--eval-every",
        type=int,
        default=None,
        help="Save a checkpoint every N optimiser steps (and at the end) and score it on --eval-dataset the way "
        "`swiftcore eval` scores a served model: greedy generation through the transformers backend, exact match of "
        "the reply (case and surrounding whitespace ignored). Accuracy goes to logs.jsonl (eval_accuracy), "
        "eval_samples.jsonl and loss.png. Unlike --eval-steps (validation loss), this generates.",
    )
    group.addoption(
        "--eval-dataset",
        default=None,
        help="Questions for --eval-every: a JSONL file in the training format (the last assistant message is the "
        "answer) or {question, answer} records, as `swiftcore eval --dataset` reads; or a built-in name (parity). "
        "Checked line by line before training starts.",
    )
    group.addoption("--eval-max-tokens", type=int, default=64, help="Longest reply generated per question.")
    group.addoption("--eval-batch-size", type=int, default=8, help="Questions generated together.")
    group.addoption(
        "--eval-at-start/--no-eval-at-start",
        default=True,
        help="With --eval-every: score the model before training too (logged at step 0).",
    )
    group.addoption(
        "--best-metric",
        default=None,
        help=f"Record the best checkpoint by this metric ({', '.join(METRICS)}; higher is better, the earliest wins "
        "a tie) in logs.jsonl (best_checkpoint) and the run's result; --save-total-limit then keeps it too.",
    )


@dataclass
class GenerationEvalOptions:
    """The eval options of a run (``cfg.recipe_options``); see :func:`add_eval_options`.

    Raises:
        ValueError: (in ``__post_init__``) every invalid value or combination, flag by flag.
    """

    eval_every: int | None = None
    eval_dataset: str | None = None
    eval_max_tokens: int = 64
    eval_batch_size: int = 8
    eval_at_start: bool = True
    best_metric: str | None = None

    def __post_init__(self) -> None:
        problems = []
        if self.eval_every is not None and (isinstance(self.eval_every, bool) or int(self.eval_every) < 1):
            problems.append(f"--eval-every: {self.eval_every!r} must be at least 1")
        if self.eval_every is not None and not self.eval_dataset:
            problems.append("--eval-every needs --eval-dataset FILE.jsonl (the questions each checkpoint is asked)")
        if self.eval_dataset and self.eval_every is None:
            problems.append("--eval-dataset is read with --eval-every N only (how often to evaluate); add it")
        for name in ("eval_max_tokens", "eval_batch_size"):
            if int(getattr(self, name)) < 1:
                problems.append(f"--{name.replace('_', '-')}: {getattr(self, name)!r} must be at least 1")
        if self.best_metric is not None:
            if self.best_metric not in METRICS:
                problems.append(f"--best-metric: {self.best_metric!r} is not one of {', '.join(METRICS)}")
            elif self.eval_every is None:
                problems.append("--best-metric needs --eval-every N and --eval-dataset FILE (what it is measured on)")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def enabled(self) -> bool:
        """Whether the run evaluates during training."""
        return self.eval_every is not None

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> GenerationEvalOptions:
        """The eval options among a recipe's ``options`` (other keys are ignored).

        Raises:
            SwiftcoreError: an invalid value or combination (naming the flags).
        """
        names = {f.name for f in fields(cls)}
        given = {k: v for k, v in dict(options or {}).items() if k in names and v is not None}
        try:
            return cls(**given)
        except (TypeError, ValueError) as exc:
            raise SwiftcoreError(f"invalid evaluation options: {exc}") from exc


def exact_match(reply: str, answer: str) -> bool:
    """EvalScope's ``acc`` (``normalize_text``: ``strip().lower()`` on both sides, then equality)."""
    return (reply or "").strip().lower() == answer.strip().lower()


def load_eval_records(value: str, plugins: PluginSet | None = None) -> list[Any]:
    """The checked records of ``--eval-dataset`` (a file, or a built-in dataset of swiftcore-eval), before training.

    Also checks the backend is loaded, so a run that could not evaluate never starts.

    Raises:
        SwiftcoreError: swiftcore-eval or swiftcore-infer is missing or not loaded; no such file; bad lines (each
            ``FILE:LINE: what is wrong``).
    """
    try:
        from swiftcore_eval import BUILTIN_DATASETS, builtin_dataset_path, read_dataset
    except ImportError as exc:
        raise SwiftcoreError(f"--eval-every reads its dataset with swiftcore-eval, which is missing ({exc}): "
                             f"{_INSTALL_HINT}") from exc  # fmt: skip
    if plugins is not None and plugins.registry.find("backend", BACKEND) is None:
        raise SwiftcoreError(
            f"--eval-every generates with the {BACKEND!r} backend (swiftcore-infer), which is not loaded: add "
            f"--plugin infer to a chosen plugin set, or {_INSTALL_HINT}"
        )
    path = Path(value)
    if path.is_dir():
        raise SwiftcoreError(f"--eval-dataset {value}: a directory; give a JSONL file")
    if not path.is_file():
        if value not in BUILTIN_DATASETS:
            names = ", ".join(sorted(BUILTIN_DATASETS))
            raise SwiftcoreError(f"--eval-dataset {value}: no such file, and no built-in dataset of that name "
                                 f"(built-in: {names})")  # fmt: skip
        path = builtin_dataset_path(value)
    return read_dataset(path)


def score_replies(records: Sequence[Any], generations: Sequence[Any]) -> list[dict[str, Any]]:
    """One row per question (``line``, ``question``, ``expected``, ``answer``, ``correct``, ``error`` when it failed),
    as ``swiftcore eval`` writes ``samples.jsonl``. A failed generation counts as wrong."""
    rows = []
    for record, generation in zip(records, generations, strict=True):
        answer = generation.content if generation.error is None else ""
        row = {
            "line": record.line,
            "question": record.question,
            "expected": record.answer,
            "answer": answer,
            "correct": generation.error is None and exact_match(answer, record.answer),
        }
        if generation.error is not None:
            row["error"] = generation.error
        rows.append(row)
    return rows


def _default_engine(model_dir: Path, plugins: PluginSet, **options: Any) -> Any:
    from swiftcore_infer import create_engine

    return create_engine(BACKEND, model_dir, plugins, **options)


class GenerationEvalCallback:
    """A transformers ``TrainerCallback`` that scores checkpoints by generation (see the module docstring).

    Built by :meth:`create` (which subclasses ``TrainerCallback`` lazily, so this module imports no transformers).

    Attributes:
        history: ``(step, accuracy, checkpoint name or None)`` of every evaluation of this process, in order.
        best: ``(checkpoint name, value)`` of the best checkpoint so far, None before the first.
    """

    def __init__(
        self,
        options: GenerationEvalOptions,
        records: list[Any],
        *,
        model_dir: str | Path,
        output_dir: str | Path,
        plugins: PluginSet,
        template: str | None = None,
        model_type: str | None = None,
        engine_factory: Callable[..., Any] | None = None,
    ) -> None:
        self.options = options
        if not options.eval_every:
            raise ValueError("GenerationEvalCallback needs --eval-every N (N >= 1)")
        self.every: int = int(options.eval_every)
        self.records = records
        self.model_dir = Path(model_dir)
        self.output_dir = Path(output_dir)
        self.plugins = plugins
        self.engine_options = {k: v for k, v in (("template", template), ("model_type", model_type)) if v}
        self.engine_factory = engine_factory or _default_engine
        self.history: list[tuple[int, float, str | None]] = []
        self.best: tuple[str, float] | None = None

    @classmethod
    def create(cls, *args: Any, **kwargs: Any) -> Any:
        """An instance that is also a ``transformers.TrainerCallback`` (for ``Trainer(callbacks=[...])``)."""
        from transformers import TrainerCallback

        trainer_callback = type("GenerationEvalTrainerCallback", (cls, TrainerCallback), {})
        return trainer_callback(*args, **kwargs)

    # ------------------------------------------------------------------ evaluation

    def evaluate(self, model_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """Ask every question of the model in ``model_dir`` and score the replies: ``(metrics, rows)``."""
        from swiftcore_infer import Request, SamplingParams

        started = time.perf_counter()
        engine = self.engine_factory(model_dir, self.plugins, **self.engine_options)
        try:
            sampling = SamplingParams(max_new_tokens=int(self.options.eval_max_tokens), temperature=0.0)
            requests = [
                Request(
                    record={"messages": [dict(m) for m in r.messages]}, sampling=sampling, request_id=f"eval-{r.line}"
                )
                for r in self.records
            ]
            generations = engine.generate_requests(requests, batch_size=int(self.options.eval_batch_size))
        finally:
            close = getattr(engine, "close", None)
            if close is not None:
                close()
            del engine
            _free_memory()
        rows = score_replies(self.records, generations)
        correct = sum(r["correct"] for r in rows)
        metrics: dict[str, Any] = {
            "eval_accuracy": correct / len(rows),
            "eval_correct": correct,
            "eval_total": len(rows),
            "eval_seconds": round(time.perf_counter() - started, 2),
        }
        errors = [r for r in rows if "error" in r]
        if errors:
            metrics["eval_errors"] = len(errors)
            log.warning(
                "evaluation of %s: %d question(s) failed and count as wrong (e.g. line %d: %s)",
                model_dir,
                len(errors),
                errors[0]["line"],
                errors[0]["error"],
            )
        return metrics, rows

    def _record(self, state: Any, model_dir: Path, checkpoint: str | None) -> None:
        metrics, rows = self.evaluate(model_dir)
        step = int(state.global_step)
        record = {"step": step, "epoch": state.epoch, **metrics}
        if checkpoint:
            record["eval_checkpoint"] = checkpoint
        _append(self.output_dir / "logs.jsonl", [record])
        _append(self.output_dir / EVAL_SAMPLES, [{"step": step, **row} for row in rows])
        self.history.append((step, metrics["eval_accuracy"], checkpoint))
        log.info(
            "step %d: eval_accuracy %.4f (%d/%d) on %s",
            step,
            metrics["eval_accuracy"],
            metrics["eval_correct"],
            metrics["eval_total"],
            checkpoint or "the model before training",
        )
        if checkpoint and self.options.best_metric:
            value = float(metrics[self.options.best_metric])
            if self.best is None or value > self.best[1]:
                self.best = (checkpoint, value)
            self._publish_best(state)

    @property
    def protected_checkpoint(self) -> str | None:
        """The best checkpoint's path, which :class:`~swiftcore_train.trainer.SwiftTrainer`'s rotation keeps.

        Not the trainer state's ``best_model_checkpoint``: with ``save_total_limit=1`` transformers would then
        delete the *last* checkpoint at the end of training, and a run could no longer be resumed where it ended.
        """
        return str(self.output_dir / self.best[0]) if self.best is not None else None

    def _publish_best(self, state: Any) -> None:
        """The best value into the trainer state (``best_metric``, saved with later checkpoints)."""
        if self.best is not None:
            state.best_metric = self.best[1]

    def _restore(self, state: Any) -> None:
        """A resumed run: the evaluations already logged (up to the resumed step) count for the best checkpoint."""
        from swiftcore_train.output_dir import trim_log

        trim_log(self.output_dir / EVAL_SAMPLES, int(state.global_step))
        log_file = self.output_dir / "logs.jsonl"
        if not log_file.is_file():
            return
        for line in log_file.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            checkpoint, metric = row.get("eval_checkpoint"), self.options.best_metric
            if not checkpoint or row.get("step", 0) > state.global_step or not (self.output_dir / checkpoint).is_dir():
                continue
            self.history.append((int(row["step"]), float(row["eval_accuracy"]), checkpoint))
            if (
                metric
                and isinstance(row.get(metric), int | float)
                and (self.best is None or row[metric] > self.best[1])
            ):
                self.best = (checkpoint, float(row[metric]))
        if self.options.best_metric:
            self._publish_best(state)

    # ------------------------------------------------------------------ TrainerCallback events

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.is_world_process_zero:
            if state.global_step > 0:
                self._restore(state)
            elif self.options.eval_at_start:
                self._record(state, self.model_dir, None)
        _barrier()  # every rank, so none races ahead of rank 0's evaluation

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        # Every rank decides alike (saving is collective); the end of training saves anyway.
        if state.global_step % self.every == 0:
            control.should_save = True
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        step = int(state.global_step)
        if step % self.every != 0 and step < state.max_steps:
            return  # a --save-steps checkpoint between evaluations
        if state.is_world_process_zero:
            from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

            name = f"{PREFIX_CHECKPOINT_DIR}-{step}"
            if (self.output_dir / name).is_dir():
                self._record(state, self.output_dir / name, name)
        _barrier()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero or self.best is None:
            return
        record = {
            "step": int(state.global_step),
            "best_checkpoint": self.best[0],
            "best_metric": self.options.best_metric,
            "best_value": self.best[1],
        }
        _append(self.output_dir / "logs.jsonl", [record])
        log.info("best checkpoint by %s: %s (%.4f)", self.options.best_metric, self.best[0], self.best[1])

    # ------------------------------------------------------------------ results

    @property
    def last_accuracy(self) -> float | None:
        """The accuracy of the last evaluation, None before any."""
        return self.history[-1][1] if self.history else None


def _append(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("a", encoding="utf-8") as fh:
        fh.write("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows))


def _barrier() -> None:
    """Under torchrun the other ranks wait for rank 0's evaluation."""
    try:
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is a dependency of training
        return
    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def _free_memory() -> None:
    import gc

    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:  # pragma: no cover
        pass
