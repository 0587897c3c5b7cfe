"""Concurrent clients against a real ``swiftcore deploy`` process on loopback.

- 20 streaming clients: all streams complete without an error.
- 64 streaming + 64 non-streaming clients at once (``AsyncOpenAI``), twice the queue's 64 places: every
  request is either served or refused with a clean 429 (``Retry-After`` set), none is lost or fails
  otherwise, and nothing is left queued afterwards.

In both, the server's resident memory must come back to its baseline (measured after a warm-up round, so
allocator and cache warm-up is not counted as a leak). Figures for larger loads are in
``bench/infer_throughput.py``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

openai = pytest.importorskip("openai")
psutil = pytest.importorskip("psutil")

pytestmark = pytest.mark.slow

CLIENTS = 20
ROUNDS = 3
#: The server's queue; the mixed load sends twice as many requests at once.
MAX_QUEUE = 64
#: Streaming and non-streaming clients of the mixed load (each).
MIXED = 64
#: Allowed growth of the server's RSS after the mixed load, relative to its baseline.
RSS_SLACK_FRACTION = 0.10
#: Allowed growth of the server's RSS over the baseline after all rounds (allocator noise, not leaks).
RSS_SLACK_MB = 40


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from swiftcore_testing import make_tiny_qwen3

    model_dir = make_tiny_qwen3(tmp_path_factory.mktemp("load") / "tiny")
    port = _free_port()
    swiftcore = str(Path(sys.executable).parent / "swiftcore")
    # One OpenMP thread: on a 2-core machine the server's spinning OpenMP workers and the 20 client threads
    # would fight for the cores (13 s per round instead of 2 s).
    env = {**os.environ, "SWIFTCORE_PLUGINS": "swiftcore_testing.engines,template_qwen", "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [swiftcore, "deploy", "--model", str(model_dir), "--port", str(port), "--served-model-name", "tiny",
         "--log-level", "warning", "--max-queue", str(MAX_QUEUE), "--no-api-key"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"swiftcore deploy did not start:\n{process.stdout.read() if process.stdout else ''}")
        time.sleep(0.2)
    yield url, process
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        raise


def _stream_one(url: str, i: int) -> tuple[str, str | None]:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=120)
    stream = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": f"client {i}: tell me a story"}],
        max_tokens=16, temperature=0.8, stream=True)
    text, finish = "", None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    return text, finish


def _round(url: str) -> list[tuple[str, str | None]]:
    with ThreadPoolExecutor(CLIENTS) as pool:
        return list(pool.map(lambda i: _stream_one(url, i), range(CLIENTS)))


def _rss_mb(process: subprocess.Popen) -> float:
    return psutil.Process(process.pid).memory_info().rss / 2**20


def test_twenty_concurrent_streams_complete_and_memory_returns(deployed: Any) -> None:
    url, process = deployed
    warm = _round(url)
    assert all(finish in ("stop", "length") for _, finish in warm)
    time.sleep(0.5)
    baseline = _rss_mb(process)
    peaks = []
    for _ in range(ROUNDS):
        results = _round(url)
        assert len(results) == CLIENTS
        assert all(finish in ("stop", "length") for _, finish in results), results
        assert sum(bool(text) for text, _ in results) >= CLIENTS - 2  # sampled replies are (almost) never empty
        peaks.append(_rss_mb(process))
    time.sleep(0.5)
    final = _rss_mb(process)
    print(f"server RSS: baseline {baseline:.0f} MB, rounds {[round(p) for p in peaks]} MB, final {final:.0f} MB")
    assert final - baseline < RSS_SLACK_MB, f"RSS grew from {baseline:.0f} MB to {final:.0f} MB (peaks {peaks})"
    assert httpx.get(f"{url}/health").json()["queued"] == 0
    assert process.poll() is None  # still serving


async def _mixed_round(url: str) -> list[tuple[str, str]]:
    """64 streaming and 64 non-streaming requests at once; each ends as ("served", finish_reason),
    ("429", Retry-After) or ("error", what went wrong)."""
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=300)

    async def one(i: int, stream: bool) -> tuple[str, str]:
        messages = [{"role": "user", "content": f"client {i}: tell me a story"}]
        try:
            if stream:
                finish = ""
                chunks = await client.chat.completions.create(
                    model="tiny", messages=messages, max_tokens=16, temperature=0.8, stream=True
                )
                async for chunk in chunks:
                    if chunk.choices and chunk.choices[0].finish_reason:
                        finish = chunk.choices[0].finish_reason
                return ("served", finish) if finish in ("stop", "length") else ("error", f"stream ended on {finish!r}")
            reply = await client.chat.completions.create(
                model="tiny", messages=messages, max_tokens=16, temperature=0.8
            )
            return "served", reply.choices[0].finish_reason
        except openai.RateLimitError as exc:
            return "429", exc.response.headers.get("retry-after", "")
        except Exception as exc:  # anything else is a lost request
            return "error", f"{type(exc).__name__}: {exc}"

    try:
        jobs = [one(i, stream=i % 2 == 0) for i in range(2 * MIXED)]
        return await asyncio.wait_for(asyncio.gather(*jobs), timeout=600)
    finally:
        await client.close()


def test_64_streaming_and_64_plain_clients_are_served_or_cleanly_refused(deployed: Any) -> None:
    url, process = deployed
    warm = asyncio.run(_mixed_round(url))
    assert not [r for r in warm if r[0] == "error"], warm
    time.sleep(1.0)
    baseline = _rss_mb(process)
    outcomes = []
    for _ in range(2):
        results = asyncio.run(_mixed_round(url))
        assert len(results) == 2 * MIXED  # every request came back with an answer
        errors = [r for r in results if r[0] == "error"]
        assert not errors, errors  # ... and each one a completion or a 429
        assert all(detail in ("stop", "length") for kind, detail in results if kind == "served")
        assert all(int(detail) >= 1 for kind, detail in results if kind == "429")  # Retry-After
        served = sum(kind == "served" for kind, _ in results)
        assert served >= MAX_QUEUE // 2, results  # the queue's places were used, not refused wholesale
        outcomes.append((served, len(results) - served))
    time.sleep(1.0)
    final = _rss_mb(process)
    print(f"mixed load: (served, 429) per round {outcomes}; server RSS {baseline:.0f} MB -> {final:.0f} MB")
    assert final <= baseline * (1 + RSS_SLACK_FRACTION), f"RSS grew from {baseline:.0f} MB to {final:.0f} MB"
    assert httpx.get(f"{url}/health", timeout=10).json()["queued"] == 0
    assert process.poll() is None  # still serving
