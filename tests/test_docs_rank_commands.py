"""The documented commands of the docs that start torch.distributed ranks, run as ``tests/test_docs_commands.py`` runs
every other doc's (see its docstring: in order, in a fresh directory, the same substitutions and checks).

A module of its own so that under pytest-xdist it holds the run's rank lock for its whole run (``STARTS_RANKS``,
``conftest.py``) and ``scripts/suite_order.py`` schedules it beside the other rank modules; the docs without such a
command run in ``tests/test_docs_commands.py``, which never waits for the lock (it waited 579 s of its 850 s when it
took the lock around each rank command, 2026-12-06).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

# make test (CI) leaves this module to make test-all: the docs' multi-rank commands run; make test checks their
# options (tests/test_docs_commands.py), and their flows run in the megatron, DDP and export tests (docs/testing.md,
# "Two tiers").
pytestmark = pytest.mark.extended

#: This module starts torch.distributed ranks (torchrun, ``--nproc-per-node``, TP parity exports): conftest.py holds
#: the rank lock for it under pytest-xdist.
STARTS_RANKS = True


def _docs_commands() -> ModuleType:
    """``tests/test_docs_commands.py``, loaded by path (test modules are not a package), under a name of its own (its
    dataclasses look their module up in ``sys.modules``)."""
    name = "swiftcore_docs_commands"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name("test_docs_commands.py"))
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


DOCS = _docs_commands()


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("docs-rank-commands")


@pytest.mark.slow
@pytest.mark.parametrize("path", DOCS.RANK_DOCS, ids=DOCS._rel)
def test_documented_commands_run(path: Path, workspace: Path) -> None:
    """Every command of ``path`` not in NOT_RUN, in order, in a fresh directory, torchrun launches and TP parity
    exports among them."""
    DOCS.run_doc(path, workspace)
