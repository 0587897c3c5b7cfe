"""``swiftcore deploy`` of head checkpoints: /v1/embeddings (real ``openai`` client), /v1/rerank and
/v1/classify (httpx), on a real uvicorn server per head; numbers equal ``swiftcore_heads.api``'s."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest
import torch

openai = pytest.importorskip("openai")
api = pytest.importorskip("swiftcore_heads.api")

TEXTS = ["the cat sat on the mat", "a dog", "tax law of 1999 and its many amendments", "ünïcode ✓"]
QUERY = "which pet sat on the mat?"
TASKS = ("embedding", "reranker", "classification")


@pytest.fixture(scope="module")
def checkpoints(tiny_model_dir, tmp_path_factory) -> dict[str, Any]:
    """task -> head checkpoint on tiny qwen3_5 (built directly, no training run)."""
    from swiftcore_heads import make_head_checkpoint

    import swiftcore

    plugins = swiftcore.load_plugins(env={})
    root = tmp_path_factory.mktemp("deploy-heads")
    out = {}
    for task in TASKS:
        options = {"num_labels": 3, "id2label": {0: "neg", 1: "neu", 2: "pos"}} if task == "classification" else {}
        out[task] = make_head_checkpoint(tiny_model_dir("qwen3_5"), task, root / task, plugins, **options)
    return {"plugins": plugins, **out}


@pytest.fixture(scope="module")
def servers(checkpoints) -> Iterator[dict[str, str]]:
    """task -> base URL of a server for that head (served as model ``task``)."""
    from contextlib import ExitStack

    from swiftcore_infer import load_head_engine
    from swiftcore_serve import ServerConfig, build_app
    from swiftcore_testing import ServerThread

    with ExitStack() as stack:
        urls = {}
        for task in TASKS:
            engine = load_head_engine(checkpoints[task], checkpoints["plugins"])
            urls[task] = stack.enter_context(ServerThread(build_app(engine, ServerConfig(model_name=task))))
        yield urls


@pytest.fixture(scope="module")
def reference(checkpoints) -> dict[str, Any]:
    """task -> (model, tokenizer) loaded with swiftcore_heads.api, the numbers the server must give."""
    return {task: api.load_head_model(checkpoints[task]) for task in TASKS}


def _client(url: str) -> Any:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


def test_embeddings_with_the_openai_client_equal_the_api(servers, reference):
    reply = _client(servers["embedding"]).embeddings.create(model="embedding", input=TEXTS)
    got = torch.tensor([d.embedding for d in sorted(reply.data, key=lambda d: d.index)])
    expected = api.embed(*reference["embedding"], TEXTS)
    assert got.shape == expected.shape and (got - expected).abs().max() < 1e-5
    assert reply.usage.prompt_tokens > len(TEXTS)


def test_embeddings_dimensions_truncate_and_renormalise(servers, reference):
    reply = _client(servers["embedding"]).embeddings.create(model="embedding", input=TEXTS, dimensions=8)
    got = torch.tensor([d.embedding for d in reply.data])
    expected = api.embed(*reference["embedding"], TEXTS, dim=8)
    assert got.shape == (len(TEXTS), 8) and (got - expected).abs().max() < 1e-5
    assert torch.allclose(got.norm(dim=-1), torch.ones(len(TEXTS)), atol=1e-5)


def test_embeddings_float_and_base64_formats(servers):
    url = f"{servers['embedding']}/v1/embeddings"
    floats = httpx.post(url, json={"model": "embedding", "input": "a dog", "encoding_format": "float"}, timeout=60)
    packed = httpx.post(url, json={"model": "embedding", "input": "a dog", "encoding_format": "base64"}, timeout=60)
    assert floats.status_code == packed.status_code == 200
    vector = np.frombuffer(base64.b64decode(packed.json()["data"][0]["embedding"]), dtype=np.float32)
    assert np.abs(vector - np.asarray(floats.json()["data"][0]["embedding"], dtype=np.float32)).max() < 1e-6


def test_embedding_bad_requests_are_400(servers):
    client = _client(servers["embedding"])
    with pytest.raises(openai.BadRequestError, match="dimensions must be in"):
        client.embeddings.create(model="embedding", input="x", dimensions=100_000)
    with pytest.raises(openai.BadRequestError, match="not token ids"):
        client.embeddings.create(model="embedding", input=[[1, 2, 3]])
    with pytest.raises(openai.BadRequestError, match="is an embedding model.*/v1/embeddings"):
        client.chat.completions.create(model="embedding", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="embedding model"):
        client.completions.create(model="embedding", prompt="hi")
    assert httpx.post(f"{servers['embedding']}/v1/rerank", json={"model": "embedding", "query": "q",
                      "documents": ["d"]}, timeout=60).status_code == 400  # fmt: skip


def test_rerank_scores_equal_the_api_and_order_follows_them(servers, reference):
    reply = httpx.post(
        f"{servers['reranker']}/v1/rerank", json={"model": "reranker", "query": QUERY, "documents": TEXTS}, timeout=60
    )
    assert reply.status_code == 200, reply.text
    body = reply.json()
    expected = api.score(*reference["reranker"], [(QUERY, d) for d in TEXTS])
    results = body["results"]
    assert sorted(r["index"] for r in results) == list(range(len(TEXTS)))
    assert [r["relevance_score"] for r in results] == sorted((r["relevance_score"] for r in results), reverse=True)
    assert max(abs(r["relevance_score"] - expected[r["index"]]) for r in results) < 1e-5
    assert all(r["document"] == {"text": TEXTS[r["index"]]} for r in results)
    assert body["model"] == "reranker" and body["usage"]["total_tokens"] > 0


def test_rerank_top_n_and_return_documents(servers):
    url = f"{servers['reranker']}/v1/rerank"
    full = httpx.post(url, json={"model": "reranker", "query": QUERY, "documents": TEXTS}, timeout=60).json()
    top = httpx.post(
        url,
        json={"model": "reranker", "query": QUERY, "documents": [{"text": t} for t in TEXTS], "top_n": 2,
              "return_documents": False},
        timeout=60,
    ).json()  # fmt: skip
    assert [r["index"] for r in top["results"]] == [r["index"] for r in full["results"][:2]]
    assert all("document" not in r for r in top["results"])
    bad = httpx.post(url, json={"model": "reranker", "query": QUERY, "documents": []}, timeout=60)
    assert bad.status_code == 400 and "documents" in bad.json()["error"]["message"]
    hello = {"model": "reranker", "messages": [{"role": "user", "content": "hi"}]}
    chat = httpx.post(f"{servers['reranker']}/v1/chat/completions", json=hello, timeout=60)
    assert chat.status_code == 400 and "/v1/rerank" in chat.json()["error"]["message"]


def test_classify_equals_softmax_of_the_api_logits(servers, reference):
    reply = httpx.post(f"{servers['classification']}/v1/classify", json={"model": "classification", "input": TEXTS},
                       timeout=60)  # fmt: skip
    assert reply.status_code == 200, reply.text
    probs = torch.softmax(api.classify(*reference["classification"], TEXTS), dim=-1)
    for item, p in zip(reply.json()["data"], probs, strict=True):
        assert item["label"] == ["neg", "neu", "pos"][int(p.argmax())]
        assert max(abs(a - b) for a, b in zip(item["probabilities"].values(), p.tolist(), strict=True)) < 1e-5


def test_models_and_health_name_the_head(servers):
    assert [m.id for m in _client(servers["reranker"]).models.list().data] == ["reranker"]
    health = httpx.get(f"{servers['reranker']}/health", timeout=10).json()
    assert health["backend"] == "head" and health["model"] == "reranker"
    wrong = httpx.post(f"{servers['reranker']}/v1/rerank", json={"model": "other", "query": "q", "documents": ["d"]},
                       timeout=10)  # fmt: skip
    assert wrong.status_code == 404


def test_deploy_command_serves_a_training_output_dir_as_its_head(checkpoints, tmp_path, monkeypatch):
    """`swiftcore deploy --model OUTPUT_DIR` finds the last checkpoint-N head and hands a head engine to serve."""
    import shutil

    import swiftcore_serve as server
    from click.testing import CliRunner

    from swiftcore.cli.main import cli
    from swiftcore.errors import SwiftcoreError

    monkeypatch.delenv("SWIFTCORE_PLUGINS", raising=False)
    shutil.copytree(checkpoints["embedding"], tmp_path / "out" / "checkpoint-3")
    served = {}
    monkeypatch.setattr(server, "serve", lambda engine, config, **kw: served.update(engine=engine, config=config))
    out = str(tmp_path / "out")
    result = CliRunner().invoke(cli, ["deploy", "--no-api-key", "--model", out, "--served-model-name", "emb"])
    assert result.exit_code == 0, result.output
    assert served["engine"].head_task == "embedding" and served["config"].model_name == "emb"
    assert served["engine"].base_dir == tmp_path / "out" / "checkpoint-3"
    with pytest.raises(SwiftcoreError, match="--lora: head checkpoints"):
        CliRunner().invoke(
            cli, ["deploy", "--no-api-key", "--model", out, "--lora", f"x={tmp_path}"], catch_exceptions=False
        )
    with pytest.raises(SwiftcoreError, match="not 'reranker'"):
        CliRunner().invoke(
            cli, ["deploy", "--no-api-key", "--model", out, "--task", "reranker"], catch_exceptions=False
        )
