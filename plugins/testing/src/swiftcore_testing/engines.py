"""Test helpers for inference: a tiny plain-Qwen3 checkpoint that every backend (vLLM on a CPU too) runs.

Qwen3.5 on vLLM's CPU build needs torchvision and bf16 (see ``notes/vllm_cpu.md``); a plain Qwen3 with
head_dim 32 runs in float32 on transformers and on vLLM alike, so parity tests use it. It is also a
plugin module (``--plugin swiftcore_testing.engines``) providing the ``tiny_qwen3`` model spec; the
checkpoint records that spec in ``swiftcore_args.json``, so it resolves without any model plugin that
claims ``qwen3``.

Example::

    from swiftcore_testing.engines import make_tiny_qwen3, plugins_with_tiny_qwen3
    plugins = plugins_with_tiny_qwen3()
    model_dir = make_tiny_qwen3(tmp_path / "tiny")
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from swiftcore.api import hookimpl

SWIFTCORE_API = "1.5"  # written against plugin API 1.5: the package face uses swiftcore.api.lazy_exports

__all__ = [
    "TINY_QWEN3",
    "ServerThread",
    "check_batch_streams_logprobs_only_where_asked",
    "check_live_stream_logprobs",
    "make_tiny_qwen3",
    "plugins_with_tiny_qwen3",
    "sampled_logprobs",
    "swiftcore_register_models",
    "train_tiny_lora",
]

#: The model spec name of the tiny Qwen3 checkpoints.
TINY_QWEN3 = "tiny_qwen3"

_SPECIAL = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)

if TYPE_CHECKING:
    from swiftcore.api import PluginSet
# As in Qwen3's released tokenizer, these stay in decoded text.
_NON_SPECIAL = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")


@hookimpl
def swiftcore_register_models() -> list:
    """The ``tiny_qwen3`` spec: ``Qwen3ForCausalLM`` with the ``qwen3`` template (tests only)."""
    from swiftcore.api import ModelSpec

    return [
        ModelSpec(
            name=TINY_QWEN3,
            model_types=("qwen3",),
            architectures=("Qwen3ForCausalLM",),
            model_class="transformers:Qwen3ForCausalLM",
            default_template="qwen3",
            description="a tiny random Qwen3 for inference tests (swiftcore_testing.engines)",
        )
    ]


def make_tiny_qwen3(
    out_dir: str | Path, *, seed: int = 0, tie_word_embeddings: bool = True, num_layers: int = 2
) -> Path:
    """Write a tiny random Qwen3 (hidden 64, head_dim 32) with a Qwen3-layout tokenizer to ``out_dir``.

    Args:
        out_dir: the checkpoint directory (created).
        seed: the weights' random seed.
        tie_word_embeddings: tie the output head to the embeddings (the vLLM CPU re-pack trap needs it).
        num_layers: decoder layers.

    Returns:
        ``out_dir``.
    """
    from importlib import resources

    import torch
    from swiftcore_tiny import build_tiny_tokenizer
    from transformers import Qwen3Config, Qwen3ForCausalLM
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    from swiftcore.api.models import ARGS_FILE

    out = Path(out_dir)
    template = (resources.files("swiftcore_template_qwen") / "official" / "qwen3.jinja").read_text(encoding="utf-8")
    tokenizer = build_tiny_tokenizer(
        out,
        special_tokens=_SPECIAL,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        non_special=_NON_SPECIAL,
        chat_template=template,
        style="split_bytelevel",
        split_regex=PRETOKENIZE_REGEX,
        tokenizer_class="Qwen2Tokenizer",
        vocab_size=512,
    )
    vocab = len(tokenizer)
    config = Qwen3Config(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=1024,
        tie_word_embeddings=tie_word_embeddings,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
        # The default 0.02 gives near-uniform logits and a reply that repeats one token; 0.5 gives
        # varied replies with clear argmax margins, so backend parity compares real choices.
        initializer_range=0.5,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    model.save_pretrained(str(out))
    (out / ARGS_FILE).write_text(json.dumps({"model_type": TINY_QWEN3}) + "\n")
    return out


def plugins_with_tiny_qwen3(requested: tuple[str, ...] = ()) -> Any:
    """Every installed plugin, plus this module (the ``tiny_qwen3`` spec)."""
    from swiftcore.api import load_plugins

    plugins = load_plugins(list(requested))
    module = sys.modules[__name__]
    if not plugins.pm.is_registered(module):
        plugins.add(module, "swiftcore_testing.engines", explicit=False)
    return plugins


class ServerThread:
    """Run an ASGI app with uvicorn on a free loopback port in a background thread (tests, benchmarks).

    Example::

        with ServerThread(build_app(engine, ServerConfig(model_name="tiny"))) as base_url:
            OpenAI(base_url=base_url + "/v1", api_key="x").models.list()
    """

    def __init__(self, app: Any, host: str = "127.0.0.1") -> None:
        self.app = app
        self.host = host
        self.port = 0
        self._server: Any = None
        self._thread: Any = None

    def __enter__(self) -> str:
        import socket
        import threading
        import time

        import uvicorn

        with socket.socket() as sock:
            sock.bind((self.host, 0))
            self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app, host=self.host, port=self.port, log_level="warning", lifespan="on")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="swiftcore-test-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the test server did not start within 30 s")
            time.sleep(0.02)
        return f"http://{self.host}:{self.port}"

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(30)


def train_tiny_lora(
    model_dir: str | Path, work_dir: str | Path, plugins: PluginSet, *, steps: int = 4, rank: int = 8
) -> Path:
    """Train a LoRA adapter on ``model_dir`` with ``swiftcore train``'s code (a few steps, high LR).

    Args:
        model_dir: the base checkpoint.
        work_dir: where the data and the run go.
        plugins: the loaded plugins (they must provide the model's spec and template).
        steps: optimiser steps.
        rank: the LoRA rank (vLLM's ``max_lora_rank`` must be at least this).

    Returns:
        The last checkpoint directory (a peft adapter).
    """
    from swiftcore_train import TrainConfig, run_training

    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    data = work / "train.jsonl"
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Is {n} even or odd?"},
                {"role": "assistant", "content": "even" if n % 2 == 0 else "odd"},
            ]
        }
        for n in range(32)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = TrainConfig(
        model=str(model_dir),
        dataset=(str(data),),
        output_dir=str(work / "run"),
        tuner="lora",
        lora_rank=rank,
        lora_alpha=2 * rank,
        learning_rate=5e-2,
        max_steps=steps,
        batch_size=8,
        max_length=64,
        logging_steps=1,
        save_steps=steps,
        seed=0,
        plot=False,
        plugins=tuple(plugins.resolved_specs),
    )
    return Path(run_training(cfg, plugins).last_checkpoint)


def sampled_logprobs(model: Any, prompt: list[int], ids: list[int], *, temperature: float = 1.0, top_k: int = 0) -> Any:
    """The reference for an engine's rollout log-probs: each of ``ids``' log-probability under ``model``'s
    next-token distribution after ``prompt`` and the ids before it (one forward pass), the logits divided by
    ``temperature`` and, with ``top_k``, all but the ``top_k`` largest masked out (what a sampler draws from)."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float() / temperature
    if top_k:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(ids)[:, None]).squeeze(-1)


def check_live_stream_logprobs(engine: Any, record: dict[str, Any], *, sampled: bool, gap: float) -> None:
    """An engine's streamed pieces with ``sampling.logprobs`` (top 3, 16 tokens; greedy, or ``sampled`` at temperature
    2 from the 3 most likely, seed 7) carry their own tokens' entries, live, and those equal what a separate scoring
    pass (``engine.completion_logprobs``) gives the finished reply: the same ids and alternatives (most likely first),
    values to ``gap`` (float32 rounding of two computations of the same raw values). Sampled, some token is not the
    most likely one, so the entries are shown raw (temperature 1), not the sampler's processed values."""
    from swiftcore_infer import Request, SamplingParams

    top = 3
    sampling = {"temperature": 2.0, "top_k": 3, "seed": 7} if sampled else {"temperature": 0.0}
    request = Request(record=record, sampling=SamplingParams(max_new_tokens=16, logprobs=top, **sampling))
    deltas = list(engine.stream(request))
    final = deltas[-1].final
    assert final is not None and len(final.token_ids) >= 4
    for delta in deltas:  # every piece carries its own tokens' entries (no scoring pass involved)
        assert delta.logprobs is not None and [e.token_id for e in delta.logprobs] == delta.token_ids
    live = [e for d in deltas for e in d.logprobs]
    ids, rescored = engine.completion_logprobs(request, final.token_ids, top_logprobs=top)
    assert ids == final.token_ids == [e.token_id for e in live]
    assert [e.logprob for e in live] == pytest.approx([e.logprob for e in rescored], abs=gap)
    for a, b in zip(live, rescored, strict=True):
        assert len(a.top) == top and [t for t, _ in a.top] == [t for t, _ in b.top]
        assert [v for _, v in a.top] == pytest.approx([v for _, v in b.top], abs=gap)
    if not request.sampling.greedy:
        assert any(e.token_id != e.top[0][0] for e in live)


def check_batch_streams_logprobs_only_where_asked(engine: Any, record: dict[str, Any]) -> None:
    """In one ``stream_many`` batch of the same greedy request twice, only the row with ``logprobs`` (0: no
    alternatives) gets entries, one per token of its reply, and both rows give the same reply."""
    from swiftcore_infer import Request, SamplingParams

    asks = Request(record=record, sampling=SamplingParams(max_new_tokens=6, logprobs=0))
    plain = Request(record=record, sampling=SamplingParams(max_new_tokens=6))
    pieces: dict[int, list[Any]] = {0: [], 1: []}
    for index, piece in engine.stream_many([asks, plain]):
        pieces[index].append(piece)
    assert all(p.logprobs is not None and all(e.top == () for e in p.logprobs) for p in pieces[0])
    assert [e.token_id for p in pieces[0] for e in p.logprobs] == pieces[0][-1].final.token_ids
    assert all(p.logprobs is None for p in pieces[1])
    assert pieces[0][-1].final.token_ids == pieces[1][-1].final.token_ids  # the same greedy reply
