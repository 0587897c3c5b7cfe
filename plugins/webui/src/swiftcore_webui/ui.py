"""What the page's buttons do, without gradio: :class:`WebUI` holds the root, the plugins, the chat model and the
commands in flight, and each method is one action (tested directly, and wired to the page by :mod:`.app`).

Every path a method takes is confined to the root (:meth:`Root.resolve`); a refused one raises
:class:`~swiftcore_webui.paths.PathRefused` before anything runs. Commands run as ``swiftcore`` subprocesses in the
root (:mod:`.jobs`).

Importing this module imports no gradio, torch or transformers.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore_webui.chat import ChatSession, LoadedModel
from swiftcore_webui.jobs import Job, TrainProgress, TrainRun
from swiftcore_webui.paths import PathRefused, Root

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["Busy", "TrainSettings", "WebUI", "parse_json_output"]

#: Default training settings: a handful of steps that finish in a minute on a laptop CPU with a tiny model.
DEFAULT_STEPS = 20


class Busy(RuntimeError):
    """An action of that kind is already running (one training run, one export at a time)."""


@dataclass(frozen=True)
class TrainSettings:
    """The page's training form (the ``swiftcore train`` options it sets)."""

    model: str
    dataset: str
    output_dir: str
    tuner: str = "lora"
    max_steps: int = DEFAULT_STEPS
    batch_size: int = 8
    learning_rate: float = 1e-3
    max_length: int = 256
    logging_steps: int = 1
    overwrite: bool = False
    #: Score the model every N steps (``--eval-every``; 0: no evaluation during training).
    eval_every: int = 0
    #: The questions it is scored on (``--eval-dataset``): a file in the root, needed when ``eval_every`` is set.
    eval_dataset: str = ""


def parse_json_output(text: str) -> Any:
    """The JSON object a ``--json`` command printed, skipping any log lines before it (None: none found)."""
    decoder = json.JSONDecoder()
    for index, char in enumerate(text):
        if char == "{" and (index == 0 or text[index - 1] == "\n"):
            try:
                return decoder.raw_decode(text[index:])[0]
            except ValueError:
                continue
    return None


class WebUI:
    """The state behind the page (one per server: the page is a local, single-user tool).

    Args:
        root: the folder every path is confined to.
        plugins: the loaded plugin set (model specs for the families; the chat engine).
        options: the values of the options plugins added to ``swiftcore web-ui`` (``swiftcore_addoption``, e.g.
            ``--agent-template``): every chat engine gets them, and each one that ``swiftcore train`` takes too is
            passed on to the training runs the page starts.
    """

    def __init__(self, root: Root, plugins: PluginSet, options: Mapping[str, Any] | None = None) -> None:
        import tempfile

        self.root = root
        self.plugins = plugins
        self.options = {k: v for k, v in (options or {}).items() if v not in (None, False, ())}
        self.chat = ChatSession(root, plugins, self.options)
        self.train_run: TrainRun | None = None
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}
        # Commands that take no path (`swiftcore plugins`) run in an empty folder of their own: in cores before the
        # PYTHONSAFEPATH fix (2026-12), `plugins --check` imported from its working directory, where a folder named like
        # a plugin (a checkpoint folder `tiny`) made that plugin's name ambiguous. Kept for those cores.
        self.workdir = Path(tempfile.mkdtemp(prefix="swiftcore-webui-work-"))

    # ------------------------------------------------------------------ families

    def families(self) -> list[dict[str, Any]]:
        """The model specs of the loaded plugins: name, plugin, modalities, tasks, whether it makes tiny."""
        rows = []
        for spec in sorted(self.plugins.registry.all("model"), key=lambda s: s.name):
            rows.append(
                {
                    "family": spec.name,
                    "plugin": spec.provider.plugin if spec.provider else "",
                    "modalities": ", ".join(spec.modalities),
                    "tasks": ", ".join(spec.tasks),
                    "make-tiny": "yes" if spec.tiny_config else "no",
                    "description": spec.description or "",
                }
            )
        return rows

    def tiny_families(self) -> list[str]:
        """The families ``swiftcore make-tiny`` can make (those with a ``tiny_config``); the demo's first."""
        specs = [s for s in self.plugins.registry.all("model") if s.tiny_config]
        return [s.name for s in sorted(specs, key=lambda s: (not s.demo, s.name))]

    def _start(self, kind: str, args: list[str], cwd: Path | None = None) -> Job:
        with self._lock:
            current = self._jobs.get(kind)
            if current is not None and current.running:
                raise Busy(f"`{current.command}` is still running")
            job = Job(args, cwd=cwd or self.root.path)
            self._jobs[kind] = job
            return job

    def make_tiny(self, family: str, output_dir: str, *, force: bool = False) -> Job:
        """Start ``swiftcore make-tiny FAMILY OUT`` (``--force`` replaces a non-empty OUT).

        Raises:
            PathRefused: OUT is outside the root, or is the root itself.
            ValueError: the family is not one the loaded plugins make tiny.
        """
        if family not in self.tiny_families():
            raise ValueError(f"family {family!r}: pick one of {', '.join(self.tiny_families()) or 'none installed'}")
        out = self.root.resolve(output_dir, what="output folder", kind="dir")
        if out == self.root.path:
            raise PathRefused("output folder: choose a new sub-folder of the root, not the root itself")
        return self._start("make-tiny", ["make-tiny", family, str(out), *(["--force"] if force else [])])

    # ------------------------------------------------------------------ training

    def start_training(self, settings: TrainSettings) -> TrainRun:
        """Start ``swiftcore train`` with the form's settings (one run at a time).

        Raises:
            PathRefused: the model, dataset or output folder is outside the root, missing, or the output folder
                is not empty and ``overwrite`` is off.
            Busy: a run is in progress.
            ValueError: a setting is out of range.
        """
        root = self.root
        model = root.resolve(settings.model, what="model folder", must_exist=True, kind="dir")
        dataset = root.resolve(settings.dataset, what="dataset", must_exist=True, kind="file")
        out = root.resolve(settings.output_dir, what="output folder", kind="dir")
        if out == root.path:
            raise PathRefused("output folder: choose a sub-folder of the root, not the root itself")
        if out.exists() and any(out.iterdir()) and not settings.overwrite:
            raise PathRefused(
                f"output folder {root.relative(out)!r} is not empty: tick 'replace an earlier run there' (swiftcore "
                "train --overwrite-output-dir removes only what an earlier run wrote) or choose another folder"
            )
        if settings.tuner not in ("full", "lora"):
            raise ValueError(f"tuner {settings.tuner!r}: full or lora")
        for name in ("max_steps", "batch_size", "max_length", "logging_steps"):
            if int(getattr(settings, name)) < 1:
                raise ValueError(f"{name.replace('_', ' ')}: at least 1")
        if not settings.learning_rate > 0:
            raise ValueError("learning rate: above 0")
        steps = int(settings.max_steps)
        evaluation = self._eval_args(settings)
        args = [
            "--model", str(model),
            "--dataset", str(dataset),
            "--output-dir", str(out),
            "--tuner", settings.tuner,
            "--max-steps", str(steps),
            "--save-steps", str(steps),
            "--batch-size", str(int(settings.batch_size)),
            "--learning-rate", repr(float(settings.learning_rate)),
            "--max-length", str(int(settings.max_length)),
            "--logging-steps", str(int(settings.logging_steps)),
            *(["--overwrite-output-dir"] if settings.overwrite else []),
            *evaluation,
            *self.plugin_args("train"),
        ]  # fmt: skip
        with self._lock:
            if self.train_run is not None and self.train_run.job.running:
                raise Busy(f"a training run is in progress ({root.relative(self.train_run.output_dir)}): stop it first")
            self.train_run = TrainRun(args, output_dir=out, max_steps=steps, cwd=root.path)
            return self.train_run

    def plugin_args(self, command: str) -> list[str]:
        """The page's plugin options (:attr:`options`) that ``swiftcore COMMAND`` takes too, as its arguments
        (``--agent-template hermes``)."""
        if not self.options:
            return []
        from swiftcore.api.cli import collect_options

        args: list[str] = []
        for option in collect_options(self.plugins, command, {}):
            value = self.options.get(option.dest)
            if value is None:
                continue
            flag = option.flags[0]
            for one in value if isinstance(value, (list, tuple)) else [value]:
                args += [flag] if one is True else [flag, str(one)]
        return args

    def _eval_args(self, settings: TrainSettings) -> list[str]:
        """``--eval-every N --eval-dataset FILE --best-metric eval_accuracy`` for a form that asks to evaluate."""
        every = int(settings.eval_every or 0)
        if every < 0:
            raise ValueError("evaluate every: 0 (off) or a number of steps")
        if every == 0:
            return []
        if not settings.eval_dataset:
            raise ValueError("evaluate every: choose the questions to score (a .jsonl file in the root)")
        questions = self.root.resolve(settings.eval_dataset, what="eval questions", must_exist=True, kind="file")
        # The best checkpoint by accuracy is recorded in logs.jsonl, and "chat with this checkpoint" opens it.
        return ["--eval-every", str(every), "--eval-dataset", str(questions), "--best-metric", "eval_accuracy"]

    def train_progress(self) -> TrainProgress | None:
        """The current (or last) run's progress; None before the first run."""
        run = self.train_run
        return run.progress() if run is not None else None

    def stop_training(self) -> bool:
        """Stop the run in progress (and its child processes); False when none runs."""
        run = self.train_run
        if run is None or not run.job.running:
            return False
        run.job.stop()
        return True

    # ------------------------------------------------------------------ chat

    def load_model(self, model: str) -> LoadedModel:
        """Load a checkpoint (or LoRA adapter) inside the root for chatting."""
        return self.chat.load(model)

    def reply(self, messages: list[dict[str, Any]], **sampling: Any) -> Iterator[str]:
        """Stream the loaded model's reply to ``messages`` (see :meth:`ChatSession.stream`)."""
        return self.chat.stream(messages, **sampling)

    # ------------------------------------------------------------------ export

    def merge_lora(self, adapter: str, output_dir: str) -> Job:
        """Start ``swiftcore export --model ADAPTER --merge-lora OUT``.

        Raises:
            PathRefused: the adapter folder is not a peft LoRA adapter inside the root, its base model is outside
                the root, or OUT is outside the root or already exists.
        """
        from swiftcore.api.models import resolve_checkpoint

        source = self.root.resolve(adapter, what="LoRA checkpoint", must_exist=True, kind="dir")
        if not (source / "adapter_config.json").is_file():
            raise PathRefused(
                f"LoRA checkpoint {self.root.relative(source)!r} has no adapter_config.json: only a LoRA run's "
                "checkpoint needs merging (a full-tuning checkpoint is already a whole model)"
            )
        base, _ = resolve_checkpoint(source)
        self.root.resolve(str(base), what="its base model (adapter_config.json)", must_exist=True, kind="dir")
        out = self.root.resolve(output_dir, what="output folder", kind="dir")
        if out.exists():
            raise PathRefused(f"output folder {self.root.relative(out)!r} exists: choose a new folder")
        return self._start("export", ["export", "--model", str(source), "--merge-lora", str(out)])

    # ------------------------------------------------------------------ plugins

    def plugins_table(self) -> list[dict[str, Any]]:
        """``swiftcore plugins --json``: one row per installed plugin (what it provides, its status)."""
        job = Job(["plugins", "--json"], cwd=self.workdir)
        job.wait(120)
        data = parse_json_output(job.output())
        if not isinstance(data, dict):
            raise RuntimeError(f"`swiftcore plugins --json` failed (exit {job.returncode}):\n{job.output(tail=20)}")
        return [
            {
                "name": row.get("name"),
                "distribution": row.get("distribution") or row.get("module"),
                "version": row.get("version") or "-",
                "status": row.get("status"),
                "provides": "; ".join(f"{k}: {', '.join(v)}" for k, v in (row.get("provides") or {}).items()),
            }
            for row in data.get("plugins", [])
        ]

    def check_plugins(self) -> Job:
        """Start ``swiftcore plugins --check --json`` (each plugin imported and validated in a fresh process)."""
        return self._start("check", ["plugins", "--check", "--json"], cwd=self.workdir)

    @staticmethod
    def check_rows(job: Job) -> list[dict[str, Any]]:
        """The reports of a finished :meth:`check_plugins` run, one row per plugin."""
        data = parse_json_output(job.output())
        reports = data.get("check", []) if isinstance(data, dict) else []
        return [
            {
                "plugin": r.get("plugin"),
                "check": "ok" if r.get("ok") else "FAILED",
                "import s": round(r["import_seconds"], 3) if isinstance(r.get("import_seconds"), float) else None,
                "problems": "; ".join(r.get("problems") or []) or "-",
            }
            for r in reports
        ]

    # ------------------------------------------------------------------ lifetime

    def shutdown(self) -> None:
        """Stop what runs (training, commands) and free the chat model."""
        for job in [*self._jobs.values(), *([self.train_run.job] if self.train_run else [])]:
            if job.running:
                job.stop(grace=5)
        self.chat.close()
        import shutil

        shutil.rmtree(self.workdir, ignore_errors=True)


def default_output(root: Root, stem: str) -> str:
    """``stem``, or ``stem-2``, ``stem-3`` ...: the first name not yet taken in the root (relative to it)."""
    candidate, n = stem, 1
    while (root.path / candidate).exists():
        n += 1
        candidate = f"{stem}-{n}"
    return candidate


def checkpoint_of(path: Path | None, root: Root) -> str | None:
    """A checkpoint folder as the page shows it (relative to the root)."""
    return root.relative(path) if path is not None else None
