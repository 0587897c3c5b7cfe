"""``swiftcore eval`` on the command line: its help, its option checks and errors, and a run against the scripted
OpenAI-compatible server of conftest.py (real models: test_eval_e2e.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import click
import pytest
from swiftcore_eval.command import API_KEY_ENV, eval_command, resolve_api_key

from swiftcore.api import SwiftcoreError
from swiftcore.api.cli import main

Writer = Callable[[str, list], Path]
EVALSCOPE_WARNINGS = pytest.mark.filterwarnings("ignore:The inplace keyword:DeprecationWarning")


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["eval", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _right(question: str) -> str:
    return "even" if int(re.search(r"\d+", question).group(0)) % 2 == 0 else "odd"


def test_help_explains_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(capsys, "--help")
    assert code == 0 and "Usage: swiftcore eval" in out
    for param in eval_command.params:
        if isinstance(param, click.Option):
            assert param.help and len(param.help) > 15, f"{param.opts} has no help"
            assert all(opt in out for opt in param.opts), f"{param.opts} missing from --help"
    for phrase in ("EvalScope", "exact", "FILE:LINE", "parity", "--api-url", "swiftcore deploy"):
        assert phrase in out, phrase


def test_the_command_is_listed_and_its_module_is_light() -> None:
    listed = subprocess.run([sys.executable, "-m", "swiftcore.cli.main", "--help"], capture_output=True, text=True)
    assert re.search(r"eval\s+Measure a served model's accuracy", listed.stdout), listed.stdout
    code = (
        "import sys, swiftcore_eval.command, swiftcore_eval.plugin, swiftcore_eval.dataset, swiftcore_eval;"
        "heavy = ('torch', 'transformers', 'evalscope', 'fastapi', 'swiftcore_serve.app');"
        "print([m for m in heavy if m in sys.modules])"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "give the model to evaluate: --api-url URL"),
        (("--api-url", "http://127.0.0.1:9/v1", "--model", "."), "not both"),
        (("--api-url", "http://127.0.0.1:9/v1", "--backend", "vllm"), "--backend: with --model only"),
        (("--api-url", "http://127.0.0.1:9/v1", "--merge-lora", "--dtype", "bfloat16"), "--dtype, --merge-lora: with"),
        (("--model", ".", "--api-key", "k"), "--api-key: with --api-url only"),
        (("--api-url", "http://127.0.0.1:9/v1", "--limit", "0"), "--limit"),
        (("--api-url", "http://127.0.0.1:9/v1", "--concurrency", "0"), "--concurrency"),
        (("--api-url", "http://127.0.0.1:9/v1", "--temperature", "-1"), "--temperature"),
    ],
)
def test_option_mistakes_are_usage_errors(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], message: str
) -> None:
    code, _, err = _run(capsys, "--dataset", "parity", *args)
    assert code == 2 and message in err, err


def test_a_bad_dataset_line_fails_before_anything_is_asked(
    capsys: pytest.CaptureFixture[str], write_jsonl: Writer
) -> None:
    good = {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}
    path = write_jsonl("data.jsonl", [good, good, '{"messages": [{"role": "user", "content": "q"}]}'])
    # The URL is never asked: nothing listens there, and the error is the dataset's.
    code, _, err = _run(capsys, "--api-url", "http://127.0.0.1:9/v1", "--dataset", str(path))
    assert code == 2
    assert f"Error: {path}:3: the last message must be the assistant's reference answer" in err, err


def test_an_unknown_dataset_names_the_built_in_ones(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(capsys, "--api-url", "http://127.0.0.1:9/v1", "--dataset", "nope.jsonl")
    assert code == 2 and "--dataset nope.jsonl: no such file, and no built-in dataset of that name" in err
    assert "parity" in err


def test_a_missing_evalscope_is_reported_with_the_install_command(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from swiftcore_eval import runner

    real = runner.find_spec
    monkeypatch.setattr(runner, "find_spec", lambda name: None if name == "evalscope" else real(name))
    # --model: the check comes before the model would load (an empty directory would fail to load).
    code, _, err = _run(capsys, "--model", str(tmp_path), "--dataset", "parity")
    assert code == 2
    assert "evalscope is not installed" in err and "requirements-evalscope.txt" in err and "[evalscope]" in err


def test_an_unreachable_server_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    from swiftcore_testing import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    code, _, err = _run(capsys, "--api-url", url, "--dataset", "parity")
    assert code == 2 and f"cannot reach {url}" in err and "swiftcore deploy" in err, err


def test_the_api_key_comes_from_a_file_the_option_or_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    assert resolve_api_key(None, None) is None
    monkeypatch.setenv(API_KEY_ENV, " from-env ")
    assert resolve_api_key(None, None) == "from-env"
    key_file = tmp_path / "key.txt"
    key_file.write_text("from-file\nignored\n")
    assert resolve_api_key(str(key_file), None) == "from-file"
    assert resolve_api_key(None, "from-option") == "from-option"
    with pytest.raises(SwiftcoreError, match="both give the key"):
        resolve_api_key(str(key_file), "x")
    key_file.write_text("\n")
    with pytest.raises(SwiftcoreError, match="the first line is empty"):
        resolve_api_key(str(key_file), None)


@EVALSCOPE_WARNINGS
def test_a_run_against_a_server_prints_the_accuracy_and_writes_the_summary(
    capsys: pytest.CaptureFixture[str], scripted_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    scripted_server.api_key = "s3cret"
    scripted_server.models = ("tuned", "other")
    scripted_server.answer = lambda q: "even" if "535" in q else _right(q)  # 535 is odd: one miss
    key_file = tmp_path / "key.txt"
    key_file.write_text("s3cret\n")
    base_url = scripted_server.url.removesuffix("/v1")  # a bare http://HOST:PORT gets /v1

    code, _, err = _run(capsys, "--api-url", base_url, "--dataset", "parity", "--output", str(tmp_path / "out"))
    assert code == 2 and "refused the API key (401)" in err, err

    args = ["--api-url", base_url, "--api-key-file", str(key_file), "--dataset", "parity", "--limit", "10"]
    code, out, err = _run(capsys, *args, "--output", str(tmp_path / "out"))
    assert code == 0, err
    assert "-> 'tuned' at " + scripted_server.url in out  # the first model the server lists
    assert "accuracy: 90.0% (9/10 exact matches)" in out
    assert "MISS line 1: 'Is 535 even or odd?' -> 'even' (expected 'odd')" in out
    (run_dir,) = (tmp_path / "out").iterdir()
    assert f"results: {run_dir}" in out
    assert json.loads((run_dir / "summary.json").read_text())["accuracy"] == pytest.approx(0.9)
    assert {body["model"] for body in scripted_server.requests} == {"tuned"}

    monkeypatch.setenv(API_KEY_ENV, "s3cret")
    code, out, err = _run(capsys, "--api-url", base_url, "--model-name", "other", "--dataset", "parity", "--limit",
                          "2", "--json", "--output", str(tmp_path / "out"))  # fmt: skip
    assert code == 0, err
    summary = json.loads(out)  # --json: stdout is the summary alone
    assert summary["model"] == "other" and summary["total"] == 2 and summary["accuracy"] == 0.5
    assert "accuracy: 50.0% (1/2 exact matches)" in err
    assert scripted_server.requests[-1]["model"] == "other"

    code, _, err = _run(capsys, "--api-url", base_url, "--model-name", "missing", "--dataset", "parity")
    assert code == 2 and "--model-name 'missing': " + scripted_server.url + " serves tuned, other" in err
