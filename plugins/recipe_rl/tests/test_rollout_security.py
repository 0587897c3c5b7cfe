"""``swiftcore rollout`` facing hostile clients (issue 46): a real uvicorn server (swiftcore's listener settings) on a
loopback port, over a recording fake engine, so each defence is seen at the HTTP level in a second.

- the key: every route, ``/health`` included, answers 401 without it; the command needs a key (file or
  ``$SWIFTCORE_ROLLOUT_KEY``) or ``--no-api-key``, which a non-loopback ``--host`` refuses; the trainer sends it;
- DNS rebinding and cross-site pages: a foreign ``Host`` is 421, a foreign ``Origin`` 403, a ``text/plain`` body 415;
- the body limit holds while a chunked body arrives (413 before it is all read); its default is the checkpoint's
  largest tensor in float32, not 4 GiB; one call carries at most ``--max-requests-per-call`` requests (the client
  splits a round into calls of that size);
- media are read only under ``--media-root``: a path outside it is refused with the same answer whether or not the
  file exists, and the engine never opens it;
- NaN or infinite weights are refused and nothing is synced;
- no answer names a path of the server's (``/health`` shows no model directory; an engine failure is a generic 500).
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

KEY = "rollout-test-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
JSON_TYPE = {"content-type": "application/json"}
TENSORS = {"content-type": "application/octet-stream"}


def _read_media(record: dict[str, Any]) -> None:
    """Read each media file the record names, as the real engine's decoding does with a path (so a path that reaches
    the engine is opened, and its answer tells whether the file exists)."""
    from swiftcore_infer import InvalidRequestError

    values = [part.get("image") for m in record.get("messages", []) if isinstance(m.get("content"), list)
              for part in m["content"] if isinstance(part, dict)]  # fmt: skip
    values += list(record.get("images") or [])
    for value in values:
        if isinstance(value, str | Path) and not str(value).startswith("data:"):
            try:
                data = Path(str(value).removeprefix("file://")).read_bytes()
            except OSError as exc:
                raise InvalidRequestError(f"cannot read {value!r}: no such file ({exc})") from exc
            if not data.startswith(b"\x89PNG"):
                raise InvalidRequestError(f"cannot identify image file {value!r}")


class _Engine:
    """What the rollout service uses of an engine, recording what reaches it; ``encode`` reads the media files a
    record names, as the real engine does."""

    backend = "fake"
    capabilities = frozenset({"update_weights"})
    stop_token_ids = [0]
    pad_token_id = 0
    max_model_len = 64
    model = None  # no in-process torch model: names and shapes are not checked (vLLM's case)

    def __init__(self, base_dir: Path) -> None:
        from types import SimpleNamespace

        self.base_dir = base_dir
        self.spec = SimpleNamespace(name="tiny")
        self.template = SimpleNamespace(name="plain")
        self.adapters: dict[str, Any] = {}
        self.encoded: list[Any] = []
        self.synced: list[dict[str, Any]] = []
        self.fail_with: Exception | None = None

    def encode(self, request: Any) -> list[int]:
        if self.fail_with is not None:
            raise self.fail_with
        if request.record is not None:
            _read_media(request.record)
        request.encoded = [1, 2]
        self.encoded.append(request)
        return request.encoded

    def generate_rollouts(self, requests: list[Any], *, logprobs: bool = False) -> list[Any]:
        from swiftcore_infer import Generation

        reply = Generation(text="a", content="a", reasoning_content=None, tool_calls=None, prompt_tokens=2,
                           completion_tokens=1, finish_reason="stop", token_ids=[3])  # fmt: skip
        return [(reply, [3, 0]) for _ in requests]

    def update_weights(self, tensors: dict[str, Any]) -> int:
        self.synced.append(tensors)
        return len(tensors)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint folder of one 1000 x 300 tensor (the identity and the default body limit read its header)."""
    import torch
    from safetensors.torch import save_file

    folder = tmp_path_factory.mktemp("rollout-security") / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "tiny"}))
    save_file({"embed.weight": torch.zeros(1000, 300)}, str(folder / "model.safetensors"))
    return folder


def _Serving(app: Any, header_timeout: float | None = None) -> Any:
    """``app`` on uvicorn with swiftcore's listener settings, on a free loopback port, in a thread."""
    from swiftcore_serve import Listener

    extra = {} if header_timeout is None else {"header_timeout": header_timeout}
    return Listener(app, host="127.0.0.1", port=0, **extra)


def _app(engine: _Engine, **options: Any) -> Any:
    from swiftcore_infer import MediaPolicy
    from swiftcore_recipe_rl.rollout_server import RolloutService, create_app

    media = options.pop("media", MediaPolicy())
    service = RolloutService(engine, identity={"fingerprint": "f"}, media=media,
                             max_requests=options.pop("max_requests", 256))  # fmt: skip
    return create_app(service, max_body_bytes=options.pop("max_body_bytes", 2**20), api_key=KEY, **options)


@pytest.fixture(scope="module")
def engine(checkpoint: Path) -> _Engine:
    return _Engine(checkpoint)


@pytest.fixture(scope="module")
def server(engine: _Engine, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from swiftcore_infer import MediaPolicy

    root = tmp_path_factory.mktemp("media-root")
    with _Serving(_app(engine, media=MediaPolicy(media_root=str(root)), max_requests=8)) as url:
        yield url


def _png() -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (4, 4), "red").save(out, format="PNG")
    return out.getvalue()


def _rollouts(url: str, payload: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{url}/rollouts", content=json.dumps(payload), headers={**AUTH, **JSON_TYPE, **(headers or {})},
                      timeout=30)  # fmt: skip


def _safetensors(**tensors: Any) -> bytes:
    from safetensors.torch import save

    return save(tensors)


# ---------------------------------------------------------------------------------------------- the key


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/health"), ("POST", "/rollouts"), ("POST", "/update_weights"),
                         ("POST", "/load_adapter?name=x"), ("POST", "/update_adapter?name=x")],
)  # fmt: skip
def test_every_route_needs_the_key(server: str, engine: _Engine, method: str, path: str) -> None:
    import torch

    before = len(engine.synced)
    body = _safetensors(w=torch.zeros(2)) if "adapter" in path or "weights" in path else b'{"requests": []}'
    kind = JSON_TYPE if path == "/rollouts" else TENSORS
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        response = httpx.request(method, f"{server}{path}", content=body if method == "POST" else None,
                                 headers={**kind, **headers}, timeout=10)  # fmt: skip
        assert response.status_code == 401, (path, headers, response.text)
        assert "--api-key-file or $SWIFTCORE_ROLLOUT_KEY" in response.json()["error"]["message"]
    assert len(engine.synced) == before  # nothing reached the engine
    assert httpx.get(f"{server}/health", headers=AUTH, timeout=10).status_code == 200


@pytest.fixture
def rollout_cli(monkeypatch: pytest.MonkeyPatch, checkpoint: Path) -> Any:
    """``swiftcore rollout`` with a fake engine and a ``serve`` that records its arguments instead of serving."""
    import swiftcore_recipe_rl.rollout_server as server_module
    import swiftcore_recipe_rl.sync as sync_module

    from swiftcore.cli.main import main

    served: dict[str, Any] = {}
    monkeypatch.delenv("SWIFTCORE_ROLLOUT_KEY", raising=False)
    monkeypatch.setattr(sync_module, "create_rollout_engine", lambda *a, **k: _Engine(checkpoint))
    monkeypatch.setattr(server_module, "serve", lambda engine, **kw: served.update(kw))

    def run(*args: str) -> tuple[int, dict[str, Any]]:
        served.clear()
        return main(["rollout", "--model", str(checkpoint), *args]), dict(served)

    return run


def test_the_command_needs_a_key_or_an_explicit_no_key_on_loopback(
    rollout_cli: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code, served = rollout_cli()
    assert code == 2 and not served
    code, served = rollout_cli("--no-api-key")
    assert code == 0 and served["api_key"] is None
    code, served = rollout_cli("--no-api-key", "--host", "0.0.0.0")
    assert code == 2 and not served
    key_file = tmp_path / "rollout.key"
    key_file.write_text("from-a-file-123\n")
    key_file.chmod(0o600)
    code, served = rollout_cli("--api-key-file", str(key_file), "--host", "0.0.0.0")
    assert code == 0 and served["api_key"] == "from-a-file-123" and served["host"] == "0.0.0.0"
    monkeypatch.setenv("SWIFTCORE_ROLLOUT_KEY", "from-the-env-456")
    code, served = rollout_cli()
    assert code == 0 and served["api_key"] == "from-the-env-456"
    code, served = rollout_cli("--no-api-key")  # a key in the environment contradicts it
    assert code == 2 and not served
    monkeypatch.setenv("SWIFTCORE_ROLLOUT_KEY", " ")
    code, served = rollout_cli()
    assert code == 2 and not served


def test_the_trainer_sends_the_key_from_its_file(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from swiftcore_recipe_rl.options import GRPOOptions
    from swiftcore_recipe_rl.plan import _server_key
    from swiftcore_recipe_rl.remote import RemoteRolloutEngine

    from swiftcore.api import SwiftcoreError

    monkeypatch.delenv("SWIFTCORE_ROLLOUT_KEY", raising=False)
    key_file = tmp_path / "rollout.key"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    options = GRPOOptions(reward=("format",), rollout_server=server, rollout_server_key_file=str(key_file))
    assert _server_key(options) == KEY
    client = RemoteRolloutEngine(server, timeout=10, api_key=_server_key(options))
    assert client.info["weight_version"] == 0
    client.close()
    with pytest.raises(SwiftcoreError, match="HTTP 401"):
        RemoteRolloutEngine(server, timeout=10, api_key=None)
    from swiftcore_recipe_rl.remote import connect_rollout_server

    with pytest.raises(SwiftcoreError, match="the server wants its key; give this run the file"):
        connect_rollout_server(server, tmp_path, template="plain", lora=True, timeout=10, api_key="wrong")
    with pytest.raises(ValueError, match="--rollout-server-key-file without --rollout-server"):
        GRPOOptions(reward=("format",), rollout_server_key_file=str(key_file))


# ---------------------------------------------------------------------------------------------- Host, Origin, type


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Host": "evil.example"}, 421),
        ({"Host": "localhost.evil.example:80"}, 421),
        ({"Origin": "http://evil.example"}, 403),
        ({"Origin": "null"}, 403),
        ({"Origin": "http://127.0.0.1:1"}, 403),  # another local port is another site
        ({}, 200),
    ],
)
def test_foreign_hosts_and_origins_are_refused(
    server: str, engine: _Engine, headers: dict[str, str], status: int
) -> None:
    port = server.rsplit(":", 1)[1]
    headers = {k: v.replace("{port}", port) for k, v in headers.items()}
    before = len(engine.encoded)
    response = _rollouts(server, {"requests": [{"prompt": [1]}]}, headers)
    assert response.status_code == status, response.text
    assert len(engine.encoded) == before + (status == 200)
    same_origin = _rollouts(server, {"requests": [{"prompt": [1]}]}, {"Origin": server})
    assert same_origin.status_code == 200, same_origin.text


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/rollouts", "text/plain"),
        ("/rollouts", "application/x-www-form-urlencoded"),
        ("/rollouts", "application/octet-stream"),
        ("/update_weights", "text/plain"),
        ("/update_weights", "application/json"),
        ("/update_weights", "multipart/form-data; boundary=x"),
    ],
)
def test_bodies_a_page_could_send_cross_site_are_refused(server: str, engine: _Engine, path: str, kind: str) -> None:
    import torch

    rollouts = json.dumps({"requests": [{"prompt": [1]}]}).encode()
    body = rollouts if path == "/rollouts" else _safetensors(w=torch.ones(1))
    before = (len(engine.encoded), len(engine.synced))
    response = httpx.post(f"{server}{path}", content=body, headers={**AUTH, "content-type": kind}, timeout=10)
    assert response.status_code == 415, response.text
    assert (len(engine.encoded), len(engine.synced)) == before


# ---------------------------------------------------------------------------------------------- limits


def test_a_chunked_body_over_the_limit_is_413_before_it_is_all_read(server: str, engine: _Engine) -> None:
    sent = 0

    def chunks() -> Iterator[bytes]:
        nonlocal sent
        for _ in range(64):  # 64 MiB offered against a 1 MiB limit
            sent += 2**20
            yield b"\0" * 2**20

    before = len(engine.synced)
    try:
        response = httpx.post(f"{server}/update_weights", content=chunks(), headers={**AUTH, **TENSORS}, timeout=30)
        assert response.status_code == 413, response.text
        assert "swiftcore rollout --max-body-mb" in response.json()["error"]["message"]
    except httpx.TransportError:
        pass  # the server closed the connection mid-upload: refused all the same
    assert sent < 32 * 2**20, f"{sent} bytes were read of a body over the limit"
    assert len(engine.synced) == before
    declared = httpx.post(f"{server}/update_weights", content=b"\0" * (2**20 + 1), headers={**AUTH, **TENSORS},
                          timeout=30)  # fmt: skip
    assert declared.status_code == 413


def test_the_default_body_limit_is_sized_to_the_checkpoint(checkpoint: Path, rollout_cli: Any) -> None:
    from swiftcore_recipe_rl.rollout_server import default_max_body_bytes

    # 1000 x 300 float32 is 1.1 MiB: the 64 MiB sync bucket is the larger; plus 1 MiB of header room.
    assert default_max_body_bytes(checkpoint) == 65 * 2**20
    code, served = rollout_cli("--no-api-key")
    assert code == 0 and served["max_body_bytes"] is None  # serve() then derives it from the checkpoint
    code, served = rollout_cli("--no-api-key", "--max-body-mb", "2")
    assert code == 0 and served["max_body_bytes"] == 2 * 2**20
    assert served["max_requests"] == 256


def test_requests_per_call_are_capped_and_the_client_splits_a_round(server: str, engine: _Engine) -> None:
    from swiftcore_infer import Request, SamplingParams
    from swiftcore_recipe_rl.remote import RemoteRolloutEngine

    response = _rollouts(server, {"requests": [{"prompt": [1]}] * 9})
    assert response.status_code == 400 and "--max-requests-per-call" in response.json()["error"]["message"]
    client = RemoteRolloutEngine(server, timeout=10, api_key=KEY)
    assert client.max_requests_per_call == 8
    requests = [Request(prompt=[1], sampling=SamplingParams(max_new_tokens=1)) for _ in range(20)]
    assert len(client.generate_rollouts(requests)) == 20  # three calls: 8, 8 and 4
    client.close()


# ---------------------------------------------------------------------------------------------- media


def test_media_are_read_only_under_the_media_root(server: str, engine: _Engine, tmp_path: Path) -> None:
    outside = tmp_path / "secret.png"
    outside.write_bytes(b"not a png at all")
    missing = tmp_path / "missing.png"

    def image_part(value: str) -> dict[str, Any]:
        return {"requests": [{"record": {"messages": [{"role": "user", "content": [
            {"type": "image", "image": value}, {"type": "text", "text": "what is it?"}]}]}}]}  # fmt: skip

    def column(value: str) -> dict[str, Any]:
        record = {"messages": [{"role": "user", "content": "<image>what?"}], "images": [value]}
        return {"requests": [{"record": record}]}

    before = len(engine.encoded)
    for build in (image_part, column):
        answers = []
        for path in (outside, missing, "/etc/hostname", "../" * 12 + "etc/hostname", f"file://{outside}"):
            response = _rollouts(server, build(str(path)))
            assert response.status_code == 400, response.text
            message = response.json()["error"]["message"]
            assert "outside this server's media root" in message, message
            answers.append(message.replace(repr(str(path)), "<path>"))
        assert len(set(answers)) == 1, answers  # the same answer whether the file exists or not
        bogus = {"requests": [{"record": {"messages": [{"role": "user", "content": "<image>?"}],
                                          "images": [{"bytes": str(outside)}]}}]}  # fmt: skip
        assert _rollouts(server, bogus).status_code == 400
    assert len(engine.encoded) == before  # the engine never saw them
    inline = "data:image/png;base64," + base64.b64encode(_png()).decode()
    assert _rollouts(server, image_part(inline)).status_code == 200


def test_media_under_the_root_are_read(engine: _Engine, tmp_path: Path) -> None:
    from swiftcore_infer import MediaPolicy

    (tmp_path / "cat.png").write_bytes(_png())
    with _Serving(_app(engine, media=MediaPolicy(media_root=str(tmp_path)))) as url:
        record = {"messages": [{"role": "user", "content": "<image>what?"}], "images": ["cat.png"]}
        assert _rollouts(url, {"requests": [{"record": record}]}).status_code == 200
        record = {"messages": [{"role": "user", "content": [{"type": "image", "image": str(tmp_path / "cat.png")}]}]}
        assert _rollouts(url, {"requests": [{"record": record}]}).status_code == 200
        # A part without a value of its own takes its item from the column, which is checked (and read) as above.
        parts = [{"type": "image"}, {"type": "text", "text": "what?"}]
        for item, status in (("cat.png", 200), (str(tmp_path.parent / "elsewhere.png"), 400)):
            record = {"messages": [{"role": "user", "content": parts}], "images": [item]}
            assert _rollouts(url, {"requests": [{"record": record}]}).status_code == status, item


# ---------------------------------------------------------------------------------------------- weights, paths


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_weights_are_refused(server: str, engine: _Engine, bad: float) -> None:
    import torch

    version = httpx.get(f"{server}/health", headers=AUTH, timeout=10).json()["weight_version"]
    before = len(engine.synced)
    weights = torch.ones(4)
    weights[2] = bad
    body = _safetensors(**{"layer.weight": weights, "other.weight": torch.ones(2)})
    response = httpx.post(f"{server}/update_weights", content=body, headers={**AUTH, **TENSORS}, timeout=10)
    assert response.status_code == 400 and "'layer.weight' holds NaN or infinite values" in response.text
    assert len(engine.synced) == before
    assert httpx.get(f"{server}/health", headers=AUTH, timeout=10).json()["weight_version"] == version
    good = httpx.post(f"{server}/update_weights", content=_safetensors(w=torch.ones(2)), headers={**AUTH, **TENSORS},
                      timeout=10)  # fmt: skip
    assert good.status_code == 200 and len(engine.synced) == before + 1


def test_no_answer_names_a_path_of_the_server(server: str, engine: _Engine) -> None:
    health = httpx.get(f"{server}/health", headers=AUTH, timeout=10)
    assert health.status_code == 200
    assert str(engine.base_dir) not in health.text and "dir" not in health.json()["model"]
    engine.fail_with = RuntimeError(f"cannot open {engine.base_dir}/tokenizer.json")
    try:
        failed = _rollouts(server, {"requests": [{"prompt": [1]}]})
    finally:
        engine.fail_with = None
    assert failed.status_code == 500 and str(engine.base_dir) not in failed.text, failed.text
    from swiftcore_infer import InvalidRequestError

    engine.fail_with = InvalidRequestError(f"bad template file {engine.base_dir}/chat_template.jinja")
    try:
        refused = _rollouts(server, {"requests": [{"prompt": [1]}]})
    finally:
        engine.fail_with = None
    assert refused.status_code == 400 and str(engine.base_dir) not in refused.text, refused.text
    unknown = httpx.get(f"{server}/nope", headers=AUTH, timeout=10)
    assert unknown.status_code == 404 and "error" in unknown.json()
