"""Property-based fuzzing of ``swiftcore deploy``'s whole API from its own OpenAPI schema (schemathesis).

One real uvicorn server on a loopback port (started once for the module) serves the tiny random Qwen3 on
the real transformers engine. For every operation in the schema, schemathesis (Hypothesis underneath)
generates request bodies that follow the schema (positive) and bodies that break it (negative), sends them
with the API key, and checks every answer:

- ``not_a_server_error``: no 5xx, whatever the input;
- ``status_code_conformance``, ``content_type_conformance``, ``response_headers_conformance`` and
  ``response_schema_conformance``: the answer is one the schema documents, in the shape it documents
  (the OpenAI error object for every 4xx);
- ``negative_data_rejection`` (negative cases): what the schema calls invalid is refused with a 4xx.

The last test checks the server still answers after all of it. Bounded: ``EXAMPLES`` cases per operation
and mode, derandomized (the same cases every run, so CI cannot flake on a new draw; set
``SWIFTCORE_FUZZ_SEED`` to explore others), generation capped at 16 tokens.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

schemathesis = pytest.importorskip("schemathesis")

from hypothesis import HealthCheck, Phase, given, seed, settings  # noqa: E402  (after the importorskip)

KEY = "fuzz-key"
MODEL = "tiny"
AUTH = {"Authorization": f"Bearer {KEY}"}
#: Cases per operation and mode (Hypothesis stops early when an operation has fewer distinct cases).
EXAMPLES = int(os.environ.get("SWIFTCORE_FUZZ_EXAMPLES", "40"))
#: Generation lengths above this are cut to it (a 900-token reply proves nothing more than a 16-token one);
#: lengths past the context are left alone, to exercise the context check.
MAX_GENERATED = 16


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any, Counter]]:
    """The server's URL, its schema loaded by schemathesis, and a tally of statuses seen."""
    from swiftcore_infer import TransformersEngine
    from swiftcore_serve import ServerConfig, build_app
    from swiftcore_testing import ServerThread, make_tiny_qwen3, plugins_with_tiny_qwen3

    engine = TransformersEngine(make_tiny_qwen3(tmp_path_factory.mktemp("fuzz") / "tiny"), plugins_with_tiny_qwen3())
    app = build_app(engine, ServerConfig(model_name=MODEL, api_key=KEY, default_max_tokens=4, max_body_bytes=2**20))
    tally: Counter = Counter()
    with ServerThread(app) as url:
        schema = schemathesis.openapi.from_dict(app.openapi())
        yield url, schema, tally
    print(f"\nfuzzed requests by operation, mode and status: {dict(sorted(tally.items()))}")
    print(f"fuzzed requests in all: {sum(tally.values())}")


def _cap_generation(case: Any) -> None:
    """Cut ``max_tokens`` to :data:`MAX_GENERATED` (an integer stays an integer: the case stays as valid)."""
    body = case.body
    if not isinstance(body, dict):
        return
    for name in ("max_tokens", "max_completion_tokens"):
        value = body.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and MAX_GENERATED < value <= 4096:
            body[name] = MAX_GENERATED


def _checks(negative: bool) -> list[Any]:
    from schemathesis.checks import not_a_server_error
    from schemathesis.specs.openapi.checks import (
        content_type_conformance,
        negative_data_rejection,
        response_headers_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    checks = [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_headers_conformance,
        response_schema_conformance,
    ]
    return [*checks, negative_data_rejection] if negative else checks


OPERATIONS = [
    ("GET", "/health"),
    ("GET", "/v1/models"),
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/embeddings"),
    ("POST", "/v1/rerank"),
    ("POST", "/v1/classify"),
    ("POST", "/v1/audio/speech"),
]
#: Negative cases need something to break: the GET routes take no input.
CASES = [(m, p, "positive") for m, p in OPERATIONS] + [(m, p, "negative") for m, p in OPERATIONS if m == "POST"]


@pytest.mark.slow
@pytest.mark.parametrize(("method", "path", "mode"), CASES, ids=[f"{m} {p} {mode}" for m, p, mode in CASES])
def test_fuzz(served: tuple[str, Any, Counter], method: str, path: str, mode: str) -> None:
    from schemathesis import GenerationMode

    url, schema, tally = served
    negative = mode == "negative"
    strategy = schema[path][method].as_strategy(generation_mode=GenerationMode(mode))
    checks = _checks(negative)

    @seed(int(os.environ.get("SWIFTCORE_FUZZ_SEED", "0")))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize="SWIFTCORE_FUZZ_SEED" not in os.environ,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        print_blob=True,
    )
    @given(case=strategy)
    def fuzz(case: Any) -> None:
        _cap_generation(case)
        response = case.call_and_validate(base_url=url, headers=AUTH, checks=checks, timeout=120)
        tally[f"{method} {path} {mode} {response.status_code}"] += 1

    fuzz()


@pytest.mark.slow
def test_server_is_alive_after_the_fuzzing(served: tuple[str, Any, Counter]) -> None:
    url, _, tally = served
    assert sum(tally.values()) > 0, "no request was fuzzed (run the whole module)"
    assert httpx.get(f"{url}/health", timeout=10).json() == {"status": "ok"}
    reply = httpx.post(
        f"{url}/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "still there?"}], "max_tokens": 2},
        headers=AUTH,
        timeout=60,
    )
    assert reply.status_code == 200 and reply.json()["choices"][0]["finish_reason"] in ("stop", "length")
    assert not any(key.endswith(tuple(f" {s}" for s in range(500, 600))) for key in tally)
