"""Run a benchmark through EvalScope against an OpenAI-compatible endpoint, and read back what it measured.

EvalScope does the evaluation: its ``openai_api`` model asks the endpoint (the ``openai`` client, chat
completions), the ``swiftcore_qa`` benchmark (:mod:`swiftcore_eval.benchmark`) scores each reply by exact match, and
its report gives the accuracy. This module checks the endpoint first (so a wrong URL, key or model name fails in a
second with a clear message), configures the run, and writes ``summary.json`` and ``samples.jsonl`` next to
EvalScope's own outputs.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from importlib.util import find_spec
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from swiftcore.api import SwiftcoreError
from swiftcore_eval.dataset import EvalRecord, write_benchmark_file

__all__ = [
    "EVALSCOPE_INSTALL_HINT",
    "EvalResult",
    "GenerationSettings",
    "SampleResult",
    "check_evalscope",
    "endpoint_models",
    "make_run_dir",
    "normalize_api_url",
    "run_eval",
]

#: How to install EvalScope: this repository installs it without its dependencies (see the requirements file).
EVALSCOPE_INSTALL_HINT = (
    "pip install --no-deps -r plugins/eval/requirements-evalscope.txt (in the swiftcore repository; "
    "make install does it), or pip install 'swiftcore-eval[evalscope]'"
)
#: Modules the OpenAI-API evaluation path imports (their absence is reported before any model loads).
_EVALSCOPE_MODULES = (
    "evalscope",
    "colorlog",
    "filetype",
    "jsonlines",
    "editdistance",
    "tabulate",
    "plotly",
    "markdown",
)
#: What the metric is, in the words the summary and the help use.
METRIC = "exact match: the reply equals the reference answer, ignoring case and surrounding whitespace"


@dataclass(frozen=True)
class GenerationSettings:
    """How each question is asked (sent with every chat-completion request).

    Attributes:
        max_tokens: the longest reply, in tokens.
        temperature: sampling temperature (0: greedy).
        seed: the sampling seed (None: the server's).
        enable_thinking: ``chat_template_kwargs.enable_thinking`` for every request (None: the model's default).
        timeout: seconds one request may take.
    """

    max_tokens: int = 64
    temperature: float = 0.0
    seed: int | None = None
    enable_thinking: bool | None = None
    timeout: float = 300.0

    def evalscope_config(self) -> dict[str, Any]:
        """EvalScope's ``generation_config`` for these settings (a failed request is retried twice, a second apart)."""
        config: dict[str, Any] = {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "timeout": self.timeout,
            "retries": 2,
            "retry_interval": 1,
        }
        if self.seed is not None:
            config["seed"] = self.seed
        if self.enable_thinking is not None:
            config["extra_body"] = {"chat_template_kwargs": {"enable_thinking": self.enable_thinking}}
        return config


@dataclass(frozen=True)
class SampleResult:
    """One question's outcome: its line in the dataset, what was asked, expected and answered (``prompt_tokens``: the
    prompt's length the server reported, None if it did not)."""

    line: int
    question: str
    expected: str
    answer: str
    correct: bool
    prompt_tokens: int | None = None


@dataclass(frozen=True)
class EvalResult:
    """What an evaluation measured and where its files are.

    Attributes:
        accuracy: the fraction of questions answered correctly (EvalScope's report: mean ``acc``).
        correct: questions answered correctly.
        total: questions asked.
        model: the model name the requests carried.
        api_url: the endpoint asked.
        dataset: the dataset as given (a path or a built-in name).
        output_dir: this run's folder (``summary.json``, ``samples.jsonl`` and EvalScope's outputs).
        seconds: the evaluation's wall time.
        evalscope_version: the EvalScope that ran it.
        samples: every question's outcome, in dataset order.
    """

    accuracy: float
    correct: int
    total: int
    model: str
    api_url: str
    dataset: str
    output_dir: Path
    seconds: float
    evalscope_version: str
    metric: str = METRIC
    generation: dict[str, Any] = field(default_factory=dict)
    samples: tuple[SampleResult, ...] = ()

    def summary(self) -> dict[str, Any]:
        """The JSON-able summary (``summary.json``, ``--json``): everything but the samples."""
        out = {k: v for k, v in asdict(self).items() if k != "samples"}
        out["output_dir"] = str(self.output_dir)
        return out


def check_evalscope() -> None:
    """Fail with the install command when EvalScope (or a module its OpenAI-API path imports) is missing.

    Raises:
        SwiftcoreError: a module is missing.
    """
    missing = [name for name in _EVALSCOPE_MODULES if find_spec(name) is None]
    if missing:
        raise SwiftcoreError(f"swiftcore eval runs EvalScope, and {', '.join(missing)} is not installed: "
                             f"{EVALSCOPE_INSTALL_HINT}")  # fmt: skip


def normalize_api_url(url: str) -> str:
    """The OpenAI base URL for ``url``: trailing slashes dropped, ``/v1`` added to a bare ``http://host:port``.

    Raises:
        SwiftcoreError: not an http(s) URL.
    """
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise SwiftcoreError(f"--api-url {url!r}: expected http(s)://HOST:PORT/v1 (the base URL OpenAI clients use)")
    url = url.rstrip("/")
    return url + "/v1" if parsed.path in ("", "/") else url


def endpoint_models(api_url: str, api_key: str, timeout: float = 30.0) -> list[str]:
    """The model names ``GET {api_url}/models`` lists (the ``openai`` client, as the evaluation uses).

    Raises:
        SwiftcoreError: the endpoint cannot be reached, refuses the key, or is no OpenAI-compatible API.
    """
    import openai

    client = openai.OpenAI(base_url=api_url, api_key=api_key, timeout=timeout, max_retries=0)
    try:
        return [m.id for m in client.models.list()]
    except openai.AuthenticationError as exc:
        raise SwiftcoreError(
            f"{api_url} refused the API key (401): give the server's key with --api-key-file FILE or $SWIFTCORE_API_KEY"
        ) from exc
    except openai.NotFoundError as exc:
        raise SwiftcoreError(
            f"{api_url}/models answered 404: is {api_url} the OpenAI base URL (it usually ends in /v1)?"
        ) from exc
    except openai.APIConnectionError as exc:
        raise SwiftcoreError(f"cannot reach {api_url} ({exc}): is the server (`swiftcore deploy`) running?") from exc
    except openai.APIStatusError as exc:
        raise SwiftcoreError(f"{api_url}/models answered {exc.status_code}: {exc.message}") from exc
    finally:
        client.close()


def make_run_dir(base: str | Path) -> Path:
    """A new folder for one run: ``BASE/YYYYmmdd_HHMMSS`` (``-2``, ``-3``... when that exists)."""
    base = Path(base)
    stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
    candidate, n = base / stamp, 1
    while True:
        try:
            candidate.mkdir(parents=True)
            return candidate
        except FileExistsError:
            n += 1
            candidate = base / f"{stamp}-{n}"


#: Loggers that report each HTTP request at INFO.
_CHATTY_LOGGERS = ("httpx", "httpx2", "httpcore", "httpcore2", "openai")


class _WarningsOnly(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING


@contextmanager
def _quiet_console(verbose: bool) -> Iterator[None]:
    """EvalScope's console log at WARNING for the block (its log file, ``logs/eval_log.log``, keeps everything).

    A filter rather than a level: EvalScope resets its handlers' levels when a run starts.
    """
    if verbose:
        yield
        return
    quiet = _WarningsOnly()
    loggers = [logging.getLogger(n) for n in list(logging.root.manager.loggerDict) if n.split(".")[0] == "evalscope"]
    handlers = [
        h
        for lg in [logging.getLogger("evalscope"), *loggers]
        for h in lg.handlers
        if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
    ]
    for handler in handlers:
        handler.addFilter(quiet)
    # The HTTP clients log every request at INFO, and EvalScope's import sets the root logger to INFO.
    clients = {name: logging.getLogger(name) for name in _CHATTY_LOGGERS}
    levels = {name: lg.level for name, lg in clients.items()}
    for lg in clients.values():
        lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(quiet)
        for name, lg in clients.items():
            lg.setLevel(levels[name])


def _import_evalscope() -> tuple[Any, Any, Any, str]:
    """EvalScope's module, ``TaskConfig``, ``run_task`` and the benchmark's name, with this process's root logger
    as it was: EvalScope's first import reconfigures it (``logging.basicConfig(force=True)``, level INFO)."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        import evalscope
        from evalscope.config import TaskConfig
        from evalscope.run import run_task

        from swiftcore_eval.benchmark import BENCHMARK
    except ImportError as exc:
        raise SwiftcoreError(f"EvalScope cannot be imported ({exc}): {EVALSCOPE_INSTALL_HINT}") from exc
    finally:
        root.setLevel(level)
        root.handlers[:] = handlers
    return evalscope, TaskConfig, run_task, BENCHMARK


def _reviews(run_dir: Path, benchmark: str) -> dict[int, dict[str, Any]]:
    """EvalScope's per-sample reviews of this run, by sample index."""
    out: dict[int, dict[str, Any]] = {}
    for file in sorted((run_dir / "reviews").glob(f"*/{benchmark}_*.jsonl")):
        for line in file.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                out[int(row["index"])] = row
    return out


def _samples(records: list[EvalRecord], reviews: dict[int, dict[str, Any]]) -> tuple[SampleResult, ...]:
    samples = []
    for index, record in enumerate(records):
        review = reviews.get(index) or {}
        score = review.get("sample_score", {}).get("score", {})
        value = (score.get("value") or {}).get("accuracy", 0.0)
        replies = [m for m in review.get("messages") or [] if m.get("role") == "assistant"]
        usage = (replies[-1].get("perf_metrics") or {}) if replies else {}
        samples.append(
            SampleResult(
                line=record.line,
                question=record.question,
                expected=record.answer,
                answer=score.get("prediction") or "",
                correct=bool(value),
                prompt_tokens=usage.get("input_tokens"),
            )
        )
    return tuple(samples)


def run_eval(
    records: list[EvalRecord],
    *,
    api_url: str,
    model_name: str,
    api_key: str = "EMPTY",
    output: str | Path = "eval-out",
    dataset: str = "",
    generation: GenerationSettings | None = None,
    concurrency: int = 8,
    verbose: bool = False,
) -> EvalResult:
    """Ask ``records`` of the model ``model_name`` at ``api_url`` through EvalScope, and score the replies.

    Args:
        records: the checked questions (:func:`swiftcore_eval.dataset.read_dataset`).
        api_url: the OpenAI base URL (``http://HOST:PORT/v1``).
        model_name: the ``model`` the requests carry.
        api_key: the bearer key (any non-empty placeholder for a server without one).
        output: the folder a new run folder is made in (:func:`make_run_dir`).
        dataset: the dataset as the user named it (for the summary).
        generation: how each question is asked.
        concurrency: requests in flight at once.
        verbose: show EvalScope's INFO log on the console.

    Returns:
        The :class:`EvalResult`; ``summary.json`` and ``samples.jsonl`` are in its ``output_dir``.

    Raises:
        SwiftcoreError: EvalScope is missing, or the evaluation failed (the message names its log).
    """
    if not records:
        raise SwiftcoreError("no questions to ask: the dataset is empty")
    check_evalscope()
    generation = generation or GenerationSettings()
    run_dir = make_run_dir(output)
    data_file = write_benchmark_file(records, run_dir / "dataset.jsonl")

    evalscope, TaskConfig, run_task, BENCHMARK = _import_evalscope()

    config = TaskConfig(
        model=model_name,
        api_url=api_url,
        api_key=api_key or "EMPTY",
        eval_type="openai_api",
        datasets=[BENCHMARK],
        dataset_args={BENCHMARK: {"dataset_id": str(data_file)}},
        work_dir=str(run_dir),
        no_timestamp=True,
        eval_batch_size=concurrency,
        generation_config=generation.evalscope_config(),
        seed=generation.seed,
    )
    started = time.perf_counter()
    try:
        with _quiet_console(verbose):
            report = run_task(config)[BENCHMARK]
    except Exception as exc:  # EvalScope raises whatever its model or loader raised
        raise SwiftcoreError(
            f"the evaluation failed ({type(exc).__name__}: {exc}); EvalScope's log: {run_dir}/logs/eval_log.log"
        ) from exc
    seconds = time.perf_counter() - started
    total = report.metrics[0].num if report.metrics else 0
    if total != len(records):
        raise SwiftcoreError(
            f"EvalScope scored {total} of the {len(records)} questions; see {run_dir}/logs/eval_log.log"
        )
    accuracy = float(report.score or 0.0)
    samples = _samples(records, _reviews(run_dir, BENCHMARK))
    result = EvalResult(
        accuracy=accuracy,
        correct=sum(s.correct for s in samples),
        total=total,
        model=model_name,
        api_url=api_url,
        dataset=dataset,
        output_dir=run_dir,
        seconds=round(seconds, 2),
        evalscope_version=evalscope.__version__,
        generation=asdict(generation),
        samples=samples,
    )
    if abs(result.correct / total - accuracy) > 1e-9:
        raise SwiftcoreError(
            f"EvalScope's report says {accuracy:.2%} but its reviews count {result.correct}/{total}; "
            f"see {run_dir}/reviews"
        )
    (run_dir / "summary.json").write_text(json.dumps(result.summary(), indent=2) + "\n", encoding="utf-8")
    (run_dir / "samples.jsonl").write_text(
        "".join(json.dumps(asdict(s), ensure_ascii=False) + "\n" for s in samples), encoding="utf-8"
    )
    return result
