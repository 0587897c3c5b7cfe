"""The page behind the request guard (issue 46, DNS rebinding): a foreign ``Host`` is 421 and a foreign ``Origin`` 403
on every route, gradio's API and queue included, and the page's handlers never run for them; the page's own origin
and ``--allowed-host`` names work. A small page with one handler, served as ``swiftcore web-ui`` serves its page
(:func:`swiftcore_webui.server.guarded_app` on :class:`swiftcore_serve.Listener`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

gr = pytest.importorskip("gradio")


@pytest.fixture(scope="module")
def page() -> Iterator[tuple[str, list[str]]]:
    """The served page's URL, and the values its handler was called with (a handler with a visible effect, as a
    training run's start is)."""
    from swiftcore_serve import Listener
    from swiftcore_webui.server import guarded_app

    calls: list[str] = []

    def act(text: str) -> str:
        calls.append(text)
        return text + "!"

    with gr.Blocks() as demo:
        box, out, button = gr.Textbox(), gr.Textbox(), gr.Button()
        button.click(act, box, out, api_name="act")
    demo.queue()
    app = guarded_app(demo, css="", allowed_hosts=("webui.internal",))
    with Listener(app, host="127.0.0.1", port=0) as url:
        yield url, calls


def _call(url: str, text: str, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(f"{url}/gradio_api/call/act", json={"data": [text]}, headers=headers, timeout=30)


FOREIGN = [
    ({"Host": "evil.example"}, 421),
    ({"Host": "evil.example:7860"}, 421),
    ({"Host": "127.0.0.1.evil.example"}, 421),
    ({"Origin": "http://evil.example"}, 403),
    ({"Host": "evil.example", "Origin": "http://evil.example"}, 421),
    ({"Origin": "null"}, 403),
]
ROUTES = [
    ("GET", "/"),
    ("GET", "/config"),
    ("GET", "/gradio_api/info"),
    ("POST", "/gradio_api/queue/join"),
    ("GET", "/gradio_api/queue/data?session_hash=x"),
    ("POST", "/gradio_api/upload"),
    ("POST", "/gradio_api/call/act"),
]


@pytest.mark.parametrize(("headers", "status"), FOREIGN, ids=[str(h) for h, _ in FOREIGN])
@pytest.mark.parametrize(("method", "path"), ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
def test_foreign_hosts_and_origins_are_refused_on_every_route(
    page: tuple[str, list[str]], method: str, path: str, headers: dict[str, str], status: int
) -> None:
    url, calls = page
    before = list(calls)
    body = {"data": ["evil"], "fn_index": 0, "session_hash": "x"} if method == "POST" else None
    response = httpx.request(method, url + path, json=body, headers=headers, timeout=30)
    assert response.status_code == status, (path, response.text)
    assert calls == before


def test_the_pages_own_origin_and_allowed_hosts_work(page: tuple[str, list[str]]) -> None:
    url, calls = page
    for headers in ({}, {"Origin": url}, {"Host": "webui.internal"}, {"Origin": "http://webui.internal"}):
        assert httpx.get(url + "/", headers=headers, timeout=30).status_code == 200, headers
        started = _call(url, "hello", headers)
        assert started.status_code == 200, started.text
        event = started.json()["event_id"]
        result = httpx.get(f"{url}/gradio_api/call/act/{event}", headers=headers, timeout=30)
        assert result.status_code == 200 and '["hello!"]' in result.text, result.text
    assert calls.count("hello") == 4


def test_the_command_serves_the_guarded_page(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """``swiftcore web-ui`` serves :func:`guarded_app` (not gradio's own server) and passes --allowed-host."""
    import click
    import swiftcore_serve
    import swiftcore_webui.server

    from swiftcore.cli.main import main

    seen: dict[str, Any] = {}

    class Stop(click.ClickException):
        pass

    def listener(app: Any, **kwargs: Any) -> Any:
        seen.update(app=app, **kwargs)
        raise Stop("stopped before serving")

    real = swiftcore_webui.server.guarded_app
    monkeypatch.setattr(swiftcore_webui.server, "guarded_app", lambda demo, **kw: seen.update(kw) or real(demo, **kw))
    monkeypatch.setattr(swiftcore_serve, "Listener", listener)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    for name in ("GRADIO_TEMP_DIR", "GRADIO_EXAMPLES_CACHE", "GRADIO_ANALYTICS_ENABLED"):
        monkeypatch.setenv(name, "")
    (tmp_path / "tmp").mkdir()
    code = main(["web-ui", "--root", str(tmp_path), "--port", "7999", "--allowed-host", "webui.internal"])
    assert code == 1
    from swiftcore_serve import RequestGuard

    assert isinstance(seen["app"], RequestGuard) and seen["app"].check_origin
    assert seen["allowed_hosts"] == ("webui.internal",) and seen["port"] == 7999 and seen["host"] == "127.0.0.1"
