"""The runner drives EvalScope for real (its openai_api model, the openai client, the acc metric, the report),
against the scripted OpenAI-compatible server of conftest.py: what is asked, how replies are scored, what is
written. Real models are served in test_eval_e2e.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from swiftcore_eval.dataset import EvalRecord, builtin_dataset_path, read_dataset
from swiftcore_eval.runner import GenerationSettings, endpoint_models, make_run_dir, normalize_api_url, run_eval

from swiftcore.api import SwiftcoreError

# EvalScope's report code uses pandas' deprecated inplace= keyword.
pytestmark = pytest.mark.filterwarnings("ignore:The inplace keyword:DeprecationWarning")


def _right(question: str) -> str:
    number = int(re.search(r"\d+", question).group(0))
    return "even" if number % 2 == 0 else "odd"


def test_accuracy_is_the_fraction_of_exact_matches_case_and_spaces_aside(scripted_server, tmp_path: Path) -> None:
    records = read_dataset(builtin_dataset_path("parity"), limit=8)
    wrong = {records[1].question, records[6].question}
    # Right answers in varied case and spacing count; the two wrong ones, and a right word in a sentence, do not.
    replies = {records[2].question: "  EVEN \n" if _right(records[2].question) == "even" else " Odd ",
               records[3].question: f"It is {_right(records[3].question)}."}  # fmt: skip
    scripted_server.answer = lambda q: (
        ("odd" if _right(q) == "even" else "even") if q in wrong else replies.get(q, _right(q))
    )
    result = run_eval(records, api_url=scripted_server.url, model_name="scripted", output=tmp_path / "out",
                      dataset="parity", concurrency=3)  # fmt: skip

    assert (result.correct, result.total) == (5, 8)
    assert result.accuracy == pytest.approx(5 / 8)
    assert [s.correct for s in result.samples] == [True, False, True, False, True, True, False, True]
    assert [s.line for s in result.samples] == list(range(1, 9))
    assert result.samples[3].answer.startswith("It is ") and result.samples[3].expected == records[3].answer
    assert len(scripted_server.requests) == 8

    run_dir = result.output_dir
    assert run_dir.parent == tmp_path / "out"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["accuracy"] == pytest.approx(5 / 8) and summary["total"] == 8 and summary["dataset"] == "parity"
    assert summary["evalscope_version"] == result.evalscope_version and summary["model"] == "scripted"
    rows = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert [r["correct"] for r in rows] == [s.correct for s in result.samples]
    # EvalScope's own outputs are there, its report agreeing.
    report = json.loads(next((run_dir / "reports").glob("*/swiftcore_qa.json")).read_text())
    assert report["metrics"][0]["identity"]["name"] == "accuracy"
    assert report["metrics"][0]["score"] == pytest.approx(5 / 8) and report["metrics"][0]["num"] == 8
    assert (run_dir / "logs" / "eval_log.log").is_file() and (run_dir / "dataset.jsonl").is_file()


def test_each_request_carries_the_conversation_and_the_generation_settings(scripted_server, tmp_path: Path) -> None:
    records = [
        EvalRecord(
            messages=({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Is 3 even or odd?"}),
            answer="odd",
            line=4,
        )
    ]
    scripted_server.answer = _right
    settings = GenerationSettings(max_tokens=7, temperature=0.5, seed=11, enable_thinking=False)
    result = run_eval(records, api_url=scripted_server.url, model_name="scripted", output=tmp_path, generation=settings)
    assert result.accuracy == 1.0 and result.generation["max_tokens"] == 7
    (body,) = scripted_server.requests
    assert body["model"] == "scripted"
    assert [(m["role"], m["content"]) for m in body["messages"]] == [
        ("system", "Be brief."),
        ("user", "Is 3 even or odd?"),
    ]
    assert body["max_tokens"] == 7 and body["temperature"] == 0.5 and body["seed"] == 11
    assert body["chat_template_kwargs"] == {"enable_thinking": False}


def test_no_thinking_switch_is_sent_unless_asked(scripted_server, tmp_path: Path) -> None:
    scripted_server.answer = _right
    records = read_dataset(builtin_dataset_path("parity"), limit=1)
    run_eval(records, api_url=scripted_server.url, model_name="scripted", output=tmp_path)
    (body,) = scripted_server.requests
    assert "chat_template_kwargs" not in body and body["temperature"] == 0.0


def test_the_endpoint_is_checked_before_the_evaluation(scripted_server) -> None:
    scripted_server.models = ("base", "math-lora")
    assert endpoint_models(scripted_server.url, "EMPTY") == ["base", "math-lora"]
    scripted_server.api_key = "s3cret"
    with pytest.raises(SwiftcoreError, match=r"refused the API key \(401\).*--api-key-file"):
        endpoint_models(scripted_server.url, "wrong")
    assert endpoint_models(scripted_server.url, "s3cret") == ["base", "math-lora"]
    base = scripted_server.url.removesuffix("/v1")
    with pytest.raises(SwiftcoreError, match=r"answered 404: is .* the OpenAI base URL"):
        endpoint_models(base + "/nope", "s3cret")


def test_an_endpoint_nobody_listens_on_fails_at_once() -> None:
    from swiftcore_testing import free_port

    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(SwiftcoreError, match=re.escape(f"cannot reach {url}")):
        endpoint_models(url, "EMPTY", timeout=5)


def test_api_urls_are_normalized() -> None:
    assert normalize_api_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/v1"
    assert normalize_api_url("http://127.0.0.1:8000/") == "http://127.0.0.1:8000/v1"
    assert normalize_api_url("https://host/v1/") == "https://host/v1"
    assert normalize_api_url("http://host:1/openai/v1") == "http://host:1/openai/v1"
    for bad in ("127.0.0.1:8000", "ftp://host/v1", "http://"):
        with pytest.raises(SwiftcoreError, match="expected http"):
            normalize_api_url(bad)


def test_each_run_gets_its_own_folder(tmp_path: Path) -> None:
    first, second = make_run_dir(tmp_path), make_run_dir(tmp_path)
    assert first != second and first.is_dir() and second.is_dir() and first.parent == second.parent == tmp_path
