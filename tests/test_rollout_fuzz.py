"""Property-based fuzzing of ``swiftcore rollout``'s routes from their OpenAPI schema (schemathesis), as
``tests/test_server_fuzz.py`` fuzzes ``swiftcore deploy``'s.

The rollout server serves no schema (its routes are a trainer's, not a public API's); ``app.openapi()`` builds it
in-process. One real uvicorn server on a loopback port (swiftcore's listener settings), the tiny random Qwen3 on
the real transformers engine behind the real request guard, with a key. For every operation, schemathesis
generates bodies that follow the schema (positive) and bodies that break it (negative), sends them with the key,
and checks ``not_a_server_error``: no 5xx, whatever the input. The last test checks the server still answers and
that no fuzzed sync changed its weights (every one was refused). Bounded and derandomized as the deploy fuzz is
(``SWIFTCORE_FUZZ_EXAMPLES``, ``SWIFTCORE_FUZZ_SEED``); generation capped at 8 tokens.
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

KEY = "fuzz-rollout-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
EXAMPLES = int(os.environ.get("SWIFTCORE_FUZZ_EXAMPLES", "30"))
MAX_GENERATED = 8


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any, Counter]]:
    """The server's URL, its schema loaded by schemathesis, and a tally of statuses seen."""
    from swiftcore_infer import MediaPolicy, TransformersEngine
    from swiftcore_recipe_rl.rollout_server import RolloutService, create_app
    from swiftcore_serve import Listener
    from swiftcore_testing import make_tiny_qwen3, plugins_with_tiny_qwen3

    root = tmp_path_factory.mktemp("rollout-fuzz")
    engine = TransformersEngine(make_tiny_qwen3(root / "tiny"), plugins_with_tiny_qwen3())
    service = RolloutService(engine, identity={"fingerprint": "f"}, media=MediaPolicy(), max_requests=8)
    app = create_app(service, max_body_bytes=2**20, api_key=KEY)
    tally: Counter = Counter()
    with Listener(app, host="127.0.0.1", port=0) as url:
        yield url, schemathesis.openapi.from_dict(app.openapi()), tally
    print(f"\nfuzzed requests by operation, mode and status: {dict(sorted(tally.items()))}")
    service.close()


def _cap_generation(case: Any) -> None:
    """Cut each request's ``max_new_tokens`` to :data:`MAX_GENERATED` (an integer stays an integer)."""
    body = case.body
    requests = body.get("requests") if isinstance(body, dict) else None
    for item in requests if isinstance(requests, list) else []:
        sampling = item.get("sampling") if isinstance(item, dict) else None
        value = sampling.get("max_new_tokens") if isinstance(sampling, dict) else None
        if isinstance(value, int) and not isinstance(value, bool) and MAX_GENERATED < value:
            sampling["max_new_tokens"] = MAX_GENERATED


OPERATIONS = [
    ("GET", "/health"),
    ("POST", "/rollouts"),
    ("POST", "/update_weights"),
    ("POST", "/load_adapter"),
    ("POST", "/update_adapter"),
]
#: Negative cases need something to break: the GET route takes no input, and any bytes are a valid binary body
#: (the adapter routes' negative cases break their required ``name``).
CASES = [(m, p, "positive") for m, p in OPERATIONS] + [
    (m, p, "negative") for m, p in OPERATIONS if m == "POST" and p != "/update_weights"
]


@pytest.mark.slow
@pytest.mark.parametrize(("method", "path", "mode"), CASES, ids=[f"{m} {p} {mode}" for m, p, mode in CASES])
def test_fuzz(served: tuple[str, Any, Counter], method: str, path: str, mode: str) -> None:
    from schemathesis import GenerationMode
    from schemathesis.checks import not_a_server_error

    url, schema, tally = served
    strategy = schema[path][method].as_strategy(generation_mode=GenerationMode(mode))

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
        response = case.call_and_validate(base_url=url, headers=AUTH, checks=[not_a_server_error], timeout=120)
        tally[f"{method} {path} {mode} {response.status_code}"] += 1

    fuzz()


@pytest.mark.slow
def test_server_is_alive_after_the_fuzzing(served: tuple[str, Any, Counter]) -> None:
    url, _, tally = served
    assert sum(tally.values()) > 0, "no request was fuzzed (run the whole module)"
    health = httpx.get(f"{url}/health", headers=AUTH, timeout=10).json()
    assert health["weight_version"] == 0 and health["base_weights"] == "checkpoint"
    reply = httpx.post(f"{url}/rollouts", json={"requests": [{"prompt": [1, 2], "sampling": {"max_new_tokens": 2}}]},
                       headers=AUTH, timeout=60)  # fmt: skip
    assert reply.status_code == 200 and len(reply.json()["rollouts"]) == 1
    assert not any(key.endswith(tuple(f" {s}" for s in range(500, 600))) for key in tally)
