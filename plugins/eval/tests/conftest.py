"""Fixtures for swiftcore-eval's tests.

- ``scripted_server``: a small OpenAI-compatible HTTP server (FastAPI under uvicorn, in a thread) whose replies
  a test scripts, and which records every request. It runs EvalScope's real client path in a second, so the
  runner and the CLI are tested without a model; the end-to-end tests (``test_eval_e2e.py``) serve real ones.
- ``demo``: ``make demo``'s own run (``swiftcore_tiny.demo.run_demo``, its defaults), once per session: the tiny base
  model and the checkpoint trained on the demo's task.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# Module level, not in _app: FastAPI resolves the routes' annotations (strings here, with the __future__ import)
# in this module's namespace, and a Request parameter must resolve to be injected.
from starlette.requests import Request


@dataclass
class ScriptedServer:
    """What the scripted server answers and what it was asked.

    Attributes:
        url: its OpenAI base URL (``http://127.0.0.1:PORT/v1``).
        answer: question text -> reply content (the default reply is ``"no idea"``).
        requests: every chat-completion request body, in arrival order.
        api_key: the key it requires (None: none).
        models: the model names ``GET /v1/models`` lists.
    """

    url: str = ""
    answer: Callable[[str], str] = lambda question: "no idea"
    requests: list[dict[str, Any]] = field(default_factory=list)
    api_key: str | None = None
    models: tuple[str, ...] = ("scripted",)


def _app(state: ScriptedServer) -> Any:
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    app = FastAPI()

    def refused(request: Request) -> JSONResponse | None:
        if state.api_key and request.headers.get("authorization") != f"Bearer {state.api_key}":
            body = {"error": {"message": "wrong API key", "type": "invalid_request_error", "code": "invalid_api_key"}}
            return JSONResponse(body, status_code=401)
        return None

    @app.get("/v1/models")
    async def models(request: Request) -> Any:
        return refused(request) or {
            "object": "list",
            "data": [{"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in state.models],
        }

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        denied = refused(request)
        if denied:
            return denied
        body = await request.json()
        state.requests.append(body)
        question = body["messages"][-1]["content"]
        if isinstance(question, list):  # content parts
            question = "".join(part.get("text", "") for part in question)
        return {
            "id": f"chatcmpl-{len(state.requests)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": state.answer(question)},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
        }

    return app


@pytest.fixture
def scripted_server() -> Iterator[ScriptedServer]:
    """A running scripted OpenAI-compatible server (see :class:`ScriptedServer`); set ``answer`` in the test."""
    from swiftcore_testing import ServerThread

    state = ScriptedServer()
    with ServerThread(_app(state)) as base:
        state.url = f"{base}/v1"
        yield state


@pytest.fixture
def write_jsonl(tmp_path: Path) -> Callable[..., Path]:
    """``write_jsonl(name, rows)``: a file in the test's folder, one row per line (a string row is written as is)."""

    def write(name: str, rows: list[Any]) -> Path:
        path = tmp_path / name
        text = "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows)
        path.write_text(text, encoding="utf-8")
        return path

    return write


@dataclass(frozen=True)
class Demo:
    """``make demo``'s run: the base model, the trained checkpoint and what the demo itself measured."""

    base: Path
    trained: Path
    result: Any


_PLUGIN_ENV = ("SWIFTCORE_PLUGINS", "SWIFTCORE_PLUGINS_STRICT")
#: The plugin variables as this session found them (conftest files are imported before any fixture runs).
_PLUGIN_ENV_AT_START = {name: os.environ.get(name) for name in _PLUGIN_ENV}


@pytest.fixture(scope="session")
def plugin_env_at_start() -> dict[str, str | None]:
    """``SWIFTCORE_PLUGINS`` / ``SWIFTCORE_PLUGINS_STRICT`` as the session found them (None: unset)."""
    return dict(_PLUGIN_ENV_AT_START)


@pytest.fixture(scope="session")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Demo:
    """``swiftcore_tiny.demo.run_demo`` with ``make demo``'s defaults, once per session (about a minute on 2 cores)."""
    import torch
    from swiftcore_tiny import run_demo

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # these tiny models gain nothing from two threads on a shared machine
    # run_demo loads the plugins as the CLI does (export_env=True: SWIFTCORE_PLUGINS for its children). A session
    # fixture is set up before any module's snapshot of the environment, so without this the demo's plugin set stayed
    # in os.environ for every later module of the worker (their subprocesses got every plugin).
    saved = {name: os.environ.get(name) for name in _PLUGIN_ENV}
    try:
        out = tmp_path_factory.mktemp("eval-demo") / "demo"
        result = run_demo(out, echo=lambda *_: None)
    finally:
        torch.set_num_threads(threads)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return Demo(base=out / "tiny-model", trained=Path(result.training.last_checkpoint), result=result)
