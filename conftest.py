"""Repository-wide pytest set-up: tiny checkpoints built once per session.

The test-kit's fixtures (``swiftcore_plugins``, ``register_plugin``) come from the installed ``swiftcore-testing``
distribution, a pytest plugin (entry point ``pytest11``).
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Nothing in the test suite may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: What a test may leave in ``os.environ`` that would change every later test of its xdist worker: the plugin set a
#: CLI run in-process exports, and the launch variables of a torch.distributed world (accelerate's state writes
#: RANK / WORLD_SIZE / LOCAL_RANK / MASTER_PORT into ``os.environ``: on 2026-12-07 a refusal test that ran on into
#: accelerate left them in its worker, and every later child process there acted as a rank; 15 tests failed).
_KEPT_ENV = (
    "SWIFTCORE_PLUGINS", "SWIFTCORE_PLUGINS_STRICT",
    "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK", "MASTER_ADDR", "MASTER_PORT",
)  # fmt: skip
_ROOT = Path(__file__).resolve().parent

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Under pytest-xdist (`pytest -n 2`) each worker has one core's worth: torch (read when it is first imported)
    # and every subprocess a test starts run one thread each. Two workers on two cores with two threads each
    # thrash (a 20-step tiny run measured 197 s instead of 1.5 s on a busy machine).
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_name] = "1"


#: What marks a test module as one that starts several torch.distributed processes: a torchrun (or its module,
#: torch.distributed.run, or ``swiftcore train --nproc-per-node``), or gloo ranks it spawns itself
#: (torch.multiprocessing, the sequence-parallel and megatron parity helpers), or a helper's ``ranks=`` (the megatron
#: engine tests' ``train_recipe(..., ranks=tp)`` and ``CliRuns.plan(..., ranks=2)``: their TP2 worlds ran beside
#: other rank modules until 2026-12-06, when no pattern here named them).
_DISTRIBUTED = re.compile(
    r"[\"']torchrun[\"']|torch\.distributed\.run|[\"']--nproc-per-node[\"'],|nproc-per-node \d|mp\.spawn"
    r"|multiprocessing\.spawn|start_processes|run_sp_cases|check_parity_tp|\branks="
)
_LAUNCHES: dict[Path, bool] = {}


def _launches_ranks(path: Path) -> bool:
    """Whether the test module at ``path`` starts torch.distributed ranks (:data:`_DISTRIBUTED`)."""
    if path not in _LAUNCHES:
        try:
            _LAUNCHES[path] = bool(_DISTRIBUTED.search(path.read_text(encoding="utf-8")))
        except OSError:
            _LAUNCHES[path] = False
    return _LAUNCHES[path]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, order the modules as ``scripts/suite_order.py`` plans (longest first, rank modules spread
    out; with ``--no-loadscope-reorder`` the workers take them in this order). Each module's tests keep their order.
    Every worker computes the same order: xdist requires identical collections."""
    workers = getattr(config, "workerinput", {}).get("workercount")
    if not workers or workers < 2:
        return
    suite_order = _suite_order()
    by_module: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_module.setdefault(os.path.relpath(item.path, _ROOT), []).append(item)
    modules = [
        (path, len(tests), _holds_rank_lock(tests[0].path, getattr(tests[0], "module", None)))
        for path, tests in by_module.items()
    ]
    order = suite_order.plan(modules, suite_order.load_record(), workers)
    items[:] = [item for path in order for item in by_module[path]]


def _holds_rank_lock(path: Path, module: Any) -> bool:
    """Whether the test module at ``path`` holds the rank lock for its whole run (see
    :func:`_one_distributed_module_at_a_time`): as the module says (``STARTS_RANKS = True`` or ``False``: the docs
    tests, whose commands come from the docs and whose source names torchrun either way), else whether its source
    launches ranks (:data:`_DISTRIBUTED`)."""
    said = getattr(module, "STARTS_RANKS", None)
    return bool(said) if said is not None else _launches_ranks(path)


def _suite_order() -> Any:
    """``scripts/suite_order.py`` (a script, not a package: loaded by path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("suite_order", _ROOT / "scripts" / "suite_order.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module", autouse=True)
def _one_distributed_module_at_a_time(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Under pytest-xdist, the modules that start torch.distributed ranks run one at a time across the workers.

    Each worker takes an exclusive lock on one file of this run (in the workers' shared temporary directory) for
    the whole module, its module fixtures included (autouse fixtures of a scope are set up first), so two workers
    never have rank groups up at once (the other worker, reaching such a module, waits).
    ``--dist loadgroup`` with an ``xdist_group`` would say this, but with pytest 9.2 and pytest-xdist 3.8 it
    silently groups nothing (pytest-dev/pytest-xdist#1386), hence ``--dist loadfile`` and this lock. Without
    xdist: nothing.
    """
    start = time.time()
    if not _holds_rank_lock(request.path, request.module):
        yield
    else:
        with _ranks_lock(tmp_path_factory):
            yield
    _timeline(tmp_path_factory, "module", request.path, start, time.time())


@contextlib.contextmanager
def _ranks_lock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The exclusive lock of this run's rank groups under pytest-xdist (without xdist: nothing)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    import fcntl

    # A worker's base temporary directory is <the run's>/popen-gwN: the parent is this run's, shared by its workers.
    with open(tmp_path_factory.getbasetemp().parent / "distributed-ranks.lock", "a") as lock:
        asked = time.time()
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when a crashed worker's process ends
        _timeline(tmp_path_factory, "lock-wait", None, asked, time.time())
        yield


#: The file under this run's shared temporary directory where workers record their module spans and rank-lock waits.
_TIMELINE = "worker-timeline.tsv"


def _timeline(tmp_path_factory: pytest.TempPathFactory, kind: str, path: Path | None, start: float, end: float) -> None:
    """Record one span of this worker (under pytest-xdist only) for :func:`pytest_terminal_summary`."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker:
        return
    where = os.path.relpath(path, _ROOT) if path else ""
    with open(tmp_path_factory.getbasetemp().parent / _TIMELINE, "a", encoding="utf-8") as out:
        out.write(f"{worker}\t{kind}\t{where}\t{start:.3f}\t{end:.3f}\n")


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """Under pytest-xdist: each worker's busy time, its waits for the rank lock and the longest modules, so a CI log
    shows where the wall time went (a worker waiting for the lock, or one worker's long module at the end)."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not getattr(config.option, "numprocesses", None):
        return
    try:
        spans = _suite_order().read_timeline(config._tmp_path_factory.getbasetemp() / _TIMELINE)
    except (AttributeError, OSError):
        return
    if not spans:
        return
    first, last = min(s[3] for s in spans), max(s[4] for s in spans)
    write = terminalreporter.write_line
    terminalreporter.section("worker timeline")
    for worker in sorted({s[0] for s in spans}):
        mine = [s for s in spans if s[0] == worker]
        busy = sum(b - a for _, kind, _, a, b in mine if kind == "module")
        waited = sum(b - a for _, kind, _, a, b in mine if kind == "lock-wait")
        ends = max(b for *_, b in mine)
        write(f"{worker}: modules {busy:.0f} s (of which waiting for the rank lock {waited:.0f} s), "
              f"done {last - ends:.0f} s before the last worker; run {last - first:.0f} s")
    modules = sorted((s for s in spans if s[1] == "module"), key=lambda s: s[3] - s[4])
    for worker, _, where, a, b in modules[:40]:
        write(f"{b - a:8.1f} s  {worker}  starts +{a - first:.0f} s  {where}")


#: The plugin variables as the session found them (this file is imported before any fixture runs).
_SESSION_KEPT_ENV = {name: os.environ.get(name) for name in _KEPT_ENV}


def _set_kept_env(values: dict[str, str | None]) -> None:
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _kept_env() -> Iterator[None]:
    """Put ``SWIFTCORE_PLUGINS`` / ``SWIFTCORE_PLUGINS_STRICT`` and the rank variables (:data:`_KEPT_ENV`) back as
    they were when this started."""
    saved = {name: os.environ.get(name) for name in _KEPT_ENV}
    yield
    _set_kept_env(saved)


@pytest.fixture(autouse=True)
def _restore_plugin_env() -> Iterator[None]:
    """Undo the plugin set a test exports to ``os.environ``.

    The CLI run in-process (click's CliRunner) writes its resolved plugin set to ``SWIFTCORE_PLUGINS``
    for child processes, and ``monkeypatch.delenv`` of an unset variable records nothing to undo, so
    without this a later test's subprocess would inherit that set.
    """
    yield from _kept_env()


@pytest.fixture(scope="module", autouse=True)
def _restore_plugin_env_per_module() -> Iterator[None]:
    """The same for a module's own fixtures (set up before its first test's snapshot): a module fixture that runs the
    CLI in-process must not hand its plugin set to the modules after it (under pytest-xdist, a template test's
    ``--plugin`` subprocess got every plugin that way).

    Put back as the session found them, not as the module found them: a session fixture is set up before the first
    module that uses it takes any snapshot, so a snapshot would keep what that fixture exported for every later module.
    """
    yield
    _set_kept_env(_SESSION_KEPT_ENV)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Torch on one thread for the test: tiny models gain nothing from two, and on a busy 2-core machine the thread
    pool's waits made a 20-step run take minutes instead of seconds (measured 197 s vs 1.5 s)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tiny_model_dir("qwen3_5")``: a tiny random checkpoint of that model spec, made once per session."""
    made: dict[str, Path] = {}

    def make(name: str) -> Path:
        if name not in made:
            from swiftcore_tiny import make_tiny

            from swiftcore._plugins import load_plugins

            plugins = load_plugins(env={})
            spec = plugins.registry.get("model", name)
            made[name] = make_tiny(spec, tmp_path_factory.mktemp("tiny") / name, seed=0)
        return made[name]

    return make


# The transformers class each family's tiny checkpoint loads with when no swiftcore code is involved.
_PLAIN_CLASS = {
    "qwen3_5": "Qwen3_5ForConditionalGeneration",
    "gemma4": "Gemma4ForConditionalGeneration",
    "deepseek_v4": "DeepseekV4ForCausalLM",
    "qwen3_asr": "Qwen3ASRForConditionalGeneration",
    "mimo_v2_flash": "MiMoV2FlashForCausalLM",
    "olmoe": "OlmoeForCausalLM",
    "glm5": "GlmMoeDsaForCausalLM",
}


@pytest.fixture(scope="session")
def plain_class() -> Callable[[str], Any]:
    """``plain_class("olmoe")``: the plain transformers model class that loads that family's checkpoints."""

    def get(family: str) -> Any:
        import transformers

        return getattr(transformers, _PLAIN_CLASS[family])

    return get


@pytest.fixture(scope="session")
def full_checkpoint_loads_plainly(plain_class: Callable[[str], Any]) -> Callable[[str, Path, Path], None]:
    """``check(family, checkpoint, base)``: a fully fine-tuned checkpoint is an ordinary one: plain transformers
    loads it, its weights moved from ``base``'s, and its ``swiftcore_args.json`` names the model it was trained as."""

    def check(family: str, checkpoint: Path, base: Path) -> None:
        import json

        import torch

        cls = plain_class(family)
        tuned = cls.from_pretrained(str(checkpoint), dtype=torch.float32)
        untouched = cls.from_pretrained(str(base), dtype=torch.float32)
        moved = [name for (name, p), (_, q) in zip(tuned.named_parameters(), untouched.named_parameters())
                 if not torch.equal(p, q)]
        assert moved, f"{family}: full tuning changed no weight"
        assert json.loads((checkpoint / "swiftcore_args.json").read_text())["model_type"].startswith(family)

    return check
