"""``swiftcore web-ui`` on the command line: its help, its listing, and that it starts light (no gradio, torch or
transformers until the page starts)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import click
import pytest
from swiftcore_webui.command import is_loopback, web_ui

from swiftcore.api.cli import main

SWIFTCORE = Path(sys.executable).with_name("swiftcore")
HEAVY = ("gradio", "torch", "transformers", "pandas", "swiftcore_infer.transformers_engine")


def test_help_explains_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["web-ui", "--help"])
    out = capsys.readouterr().out
    assert code == 0 and "Usage: swiftcore web-ui" in out
    for param in web_ui.params:
        if isinstance(param, click.Option):
            assert param.help and len(param.help) > 15, f"{param.opts} has no help"
            assert all(opt in out for opt in param.opts), f"{param.opts} missing from --help"
    for phrase in ("127.0.0.1", "--root", "symlinks", "no login", "make-tiny", "logs.jsonl", "--merge-lora", "--check"):
        assert phrase in out, phrase


def test_the_command_is_listed_and_its_modules_are_light() -> None:
    listed = subprocess.run([str(SWIFTCORE), "--help"], capture_output=True, text=True, check=True)
    assert re.search(r"web-ui\s+A local web page \(gradio\)", listed.stdout), listed.stdout
    code = (
        "import sys, swiftcore_webui, swiftcore_webui.plugin, swiftcore_webui.command, swiftcore_webui.paths,"
        " swiftcore_webui.jobs, swiftcore_webui.chat, swiftcore_webui.ui;"
        f"print([m for m in {HEAVY!r} if m in sys.modules])"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr


def test_help_answers_without_importing_gradio() -> None:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-X", "importtime", str(SWIFTCORE), "web-ui", "--help"], capture_output=True, text=True
    )
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stderr
    imported = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines() if "|" in line}
    assert not imported & {"gradio", "torch", "transformers"}, sorted(imported & {"gradio", "torch", "transformers"})
    assert seconds < 5, f"swiftcore web-ui --help took {seconds:.1f} s"  # ~0.3 s; generous for a shared machine


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("localhost", True), ("0.0.0.0", False),
     ("::", False), ("192.168.1.5", False), ("example.org", False)],
)  # fmt: skip
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_a_missing_root_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = main(["web-ui", "--root", str(tmp_path / "nope")])
    assert code == 2 and "does not exist" in capsys.readouterr().err


def test_a_non_loopback_host_is_warned_about(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import swiftcore_webui.ui

    def stop(*args: object, **kwargs: object) -> None:
        raise click.ClickException("stopped before serving")

    monkeypatch.setattr(swiftcore_webui.ui, "WebUI", stop)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    for name in ("GRADIO_TEMP_DIR", "GRADIO_EXAMPLES_CACHE", "GRADIO_ANALYTICS_ENABLED"):
        monkeypatch.setenv(name, "")  # the command sets them: undone after the test
    (tmp_path / "tmp").mkdir()
    code = main(["web-ui", "--root", str(tmp_path), "--host", "0.0.0.0", "--port", "7999"])
    assert list((tmp_path / "tmp").iterdir()) == []  # its private folder is removed, however it stops
    err = capsys.readouterr().err
    assert code == 1 and "stopped before serving" in err
    assert "warning: --host 0.0.0.0: the page has no login" in err and str(tmp_path.resolve()) in err
