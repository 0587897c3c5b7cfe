"""Shared fixtures for the core's tests: real plugin distributions installed for the session."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
SWIFTCORE = str(Path(sys.executable).parent / "swiftcore")


@pytest.fixture(scope="session")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory where pip really installed the acme test distributions (entry points and all).

    Installed with ``pip install --target`` rather than into the venv, so the rest of the suite (and
    other test sessions sharing the venv) never sees these deliberately broken plugins.
    """
    site = tmp_path_factory.mktemp("plugin_site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--no-build-isolation",
            "--target",
            str(site),
            str(FIXTURES / "acme_plugin"),
            str(FIXTURES / "acme_extras"),
        ],
        check=True,
    )
    return site


@pytest.fixture
def plugin_path(plugin_site: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Put the installed test plugins (and the loose module) on ``sys.path`` for an in-process test."""
    from swiftcore._plugins import clear_discovery_cache

    monkeypatch.syspath_prepend(str(plugin_site))
    monkeypatch.syspath_prepend(str(FIXTURES / "loose"))
    monkeypatch.delenv("SWIFTCORE_PLUGINS", raising=False)
    monkeypatch.delenv("SWIFTCORE_PLUGINS_STRICT", raising=False)
    clear_discovery_cache()
    yield plugin_site
    clear_discovery_cache()
    for name in [m for m in sys.modules if m.startswith(("swiftcore_plugin_acme", "acme_extras", "acme_loose"))]:
        del sys.modules[name]


@pytest.fixture
def run_cli(plugin_site: Path):
    """Run the real ``swiftcore`` console script with the test plugins installed; returns the process."""

    def run(
        *args: str, env: dict[str, str] | None = None, with_plugins: bool = True, cwd: Path | None = None
    ) -> subprocess.CompletedProcess:
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
        if with_plugins:
            full_env["PYTHONPATH"] = os.pathsep.join([str(plugin_site), str(FIXTURES / "loose")])
        full_env.update(env or {})
        return subprocess.run([SWIFTCORE, *args], capture_output=True, text=True, env=full_env, timeout=120, cwd=cwd)

    return run
