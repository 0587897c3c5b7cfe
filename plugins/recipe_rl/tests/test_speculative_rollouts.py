"""Speculative rollouts (``--rollout-draft DIR``): the colocated transformers rollout engine decodes with a draft.

The draft is trained here as ``plugins/eagle3/tests`` train theirs (``swiftcore train --recipe eagle3``), for the tiny
random Qwen3.5 on its own greedy replies (what Eagle3 drafts are trained on: the target's outputs), a few steps.

- Greedy rollouts with the draft are the rollouts without it, token for token (same prompts, same weights), with the
  same (the target's) log-probs; also after a weight sync that changed the policy's greedy replies (the draft stays as
  it was trained, the decoder verifies with the synced model).
- Sampled rollouts are reproducible under ``torch.manual_seed`` (what a run's ``--seed`` sets), differ under another
  seed, and their log-probs are the target's at the rollout temperature and top-k.
- A GRPO run with ``--rollout-draft`` (full fine-tuning) trains: after every sync the engine's greedy tokens equal the
  policy's own, and the draft proposed and had tokens accepted; near-greedy (temperature 1e-4) runs with and without
  the draft log the same rewards and losses and end with the same weights.
- Refusals: --rollout-draft with vLLM, TRL's generation, a rollout server, Ray, LoRA, a missing directory, and a
  directory no plugin decodes.
"""

from __future__ import annotations

import json
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from swiftcore.api import SwiftcoreError

pytestmark = pytest.mark.skipif(
    find_spec("speculators") is None or find_spec("swiftcore_eagle3") is None,
    reason="the Eagle3 draft needs swiftcore-plugin-eagle3 and speculators (eagle3/requirements-speculators.txt)",
)

DRAFT_STEPS = 30
REPLY_TOKENS = 12
HELD_OUT = [{"messages": [{"role": "user", "content": f"Write a word, number {i}."}]} for i in (100, 101, 102, 103)]


def _config(tiny_dir: Path, out: Path, **kw: Any) -> Any:
    from swiftcore_train import TrainConfig

    return TrainConfig(model=str(tiny_dir), dataset=("unused",), output_dir=str(out), **kw)


@pytest.fixture(scope="module")
def draft_dir(tiny_dir: Path, plugins: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An Eagle3 draft for the tiny Qwen3.5, trained ``DRAFT_STEPS`` steps on the target's greedy replies to 32
    prompts (not the held-out ones)."""
    from swiftcore_infer import Request, SamplingParams, TransformersEngine
    from swiftcore_testing import run_cli

    work = tmp_path_factory.mktemp("rollout-draft")
    records = [{"messages": [{"role": "user", "content": f"Write a word, number {i}."}]} for i in range(32)]
    greedy = SamplingParams(max_new_tokens=24)
    with TransformersEngine(tiny_dir, plugins, device="cpu") as engine:
        replies = engine.generate_requests([Request(record=r, sampling=greedy) for r in records])
    rows = [
        {"messages": [*r["messages"], {"role": "assistant", "content": g.text}]}
        for r, g in zip(records, replies, strict=True)
    ]
    data = work / "replies.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run_cli(
        "train", "--recipe", "eagle3", "--model", str(tiny_dir), "--dataset", str(data), "--output-dir",
        str(work / "run"), "--max-steps", str(DRAFT_STEPS), "--batch-size", "8", "--learning-rate", "3e-3",
        "--lr-scheduler", "constant", "--save-steps", str(DRAFT_STEPS), "--no-plot", "--seed", "0",
    )  # fmt: skip
    return work / "run" / f"checkpoint-{DRAFT_STEPS}"


def _engines(tiny_dir: Path, plugins: Any, draft_dir: Path, tmp_path: Path) -> tuple[Any, Any]:
    """The rollout engines of a run without and with ``--rollout-draft``, as the recipe builds them."""
    from swiftcore_recipe_rl.sync import create_rollout_engine

    from swiftcore.api.models import resolve_model_spec

    cfg = _config(tiny_dir, tmp_path / "out")
    template = resolve_model_spec(str(tiny_dir), plugins).default_template
    plain = create_rollout_engine("transformers", cfg, plugins, template=template, device="cpu")
    drafted = create_rollout_engine("transformers", cfg, plugins, template=template, device="cpu", draft=str(draft_dir))
    return plain, drafted


def _rollouts(engine: Any, records: list[dict], n: int = 1, **sampling: Any) -> tuple[list[list[int]], list[Any]]:
    """Token ids and log-probs of ``n`` rollouts per record, one ``generate_rollouts`` call (as the trainer does)."""
    from swiftcore_infer import Request, SamplingParams

    params = SamplingParams(max_new_tokens=REPLY_TOKENS, **sampling)
    requests = [Request(record=r, sampling=params) for r in records for _ in range(n)]
    out = engine.generate_rollouts(requests, logprobs=True)
    return [ids for _, ids in out], [g.logprobs for g, _ in out]


def _perturbed_policy(tiny_dir: Path, plugins: Any) -> Any:
    """The policy after an update: the tiny model with every weight moved by a fixed random amount (seeded)."""
    import torch

    from swiftcore.api.models import load_model, resolve_model_spec

    model = load_model(resolve_model_spec(str(tiny_dir), plugins), str(tiny_dir), plugins)
    generator = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for param in model.parameters():
            if param.numel() > 1:
                param.add_(torch.randn(param.shape, generator=generator) * 0.3 * float(param.std()))
    return model


@pytest.mark.slow  # the draft is trained first (about a minute)
def test_greedy_rollouts_equal_without_the_draft_also_after_a_sync(
    tiny_dir: Path, plugins: Any, draft_dir: Path, tmp_path: Path
) -> None:
    import torch
    from swiftcore_recipe_rl.sync import WeightSync

    plain, drafted = _engines(tiny_dir, plugins, draft_dir, tmp_path)
    before, before_logps = _rollouts(plain, HELD_OUT)
    got, got_logps = _rollouts(drafted, HELD_OUT)
    stats = dict(drafted.speculative_stats)
    print(f"before the sync: {drafted.speculative_summary()}")
    assert got == before, (got, before)
    assert stats["steps"] > 0 and stats["accepted"] > 0, stats  # the draft proposed, and was right at times
    torch.testing.assert_close(got_logps, before_logps, atol=1e-4, rtol=0)

    policy = _perturbed_policy(tiny_dir, plugins)
    for engine in (plain, drafted):
        WeightSync(engine, bucket_mb=0.25).push(policy)
    after, after_logps = _rollouts(plain, HELD_OUT)
    got, got_logps = _rollouts(drafted, HELD_OUT)
    print(f"after the sync: {drafted.speculative_summary()}")
    assert after != before, "the sync did not change the greedy rollouts: the check below proves nothing"
    assert got == after, (got, after)
    torch.testing.assert_close(got_logps, after_logps, atol=1e-4, rtol=0)
    assert drafted.speculative_stats["steps"] > stats["steps"]


@pytest.mark.slow  # the draft is trained first (about a minute)
def test_sampled_rollouts_are_reproducible_and_scored_by_the_target(
    tiny_dir: Path, plugins: Any, draft_dir: Path, tmp_path: Path
) -> None:
    import torch
    from swiftcore_infer import Request

    _, drafted = _engines(tiny_dir, plugins, draft_dir, tmp_path)
    sampling = {"temperature": 0.7, "top_k": 20}
    runs = []
    for seed in (0, 0, 1):
        torch.manual_seed(seed)
        runs.append(_rollouts(drafted, HELD_OUT[:2], n=3, **sampling))
    (ids, logps), (again, again_logps), (other, _) = runs
    assert ids == again and logps == again_logps, (ids, again)
    assert other != ids, "another seed drew the same rollouts: they are not sampled"
    assert len({tuple(r) for r in ids}) > 2, ids  # a prompt's rollouts differ from each other
    # The log-probs are the target's (the engine's model: the policy) at the rollout temperature and top-k.
    prompts = [list(drafted.encode(Request(record=r))) for r in HELD_OUT[:2] for _ in range(3)]
    for prompt, tokens, reported in zip(prompts, ids, logps, strict=True):
        with torch.no_grad():
            logits = drafted.model(input_ids=torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
        scores = logits.float() / sampling["temperature"]
        kth = scores.topk(sampling["top_k"], dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
        expected = torch.log_softmax(scores, dim=-1).gather(-1, torch.tensor(tokens)[:, None]).squeeze(-1)
        torch.testing.assert_close(torch.tensor(reported), expected, atol=1e-4, rtol=0)


def _grpo_run(
    tiny_dir: Path,
    plugins: Any,
    work: Path,
    steps: int,
    *,
    temperature: float,
    draft: str = "",
    checks: Any = None,
    **extra: Any,
) -> tuple[list[dict], Any]:
    """A full fine-tuning GRPO run on the vowel task of ``test_rollout_engine.py`` with ``--rollout-engine
    transformers`` (and ``--rollout-draft draft``); returns its logs and its trainer."""
    from swiftcore_recipe_rl.options import GRPOOptions
    from swiftcore_recipe_rl.recipe import run
    from swiftcore_recipe_rl.trainer import grpo_trainer_class
    from swiftcore_train import TrainConfig

    work.mkdir(parents=True, exist_ok=True)
    data = work / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Write a word, number {i}."}) + "\n" for i in range(16)))
    cfg = TrainConfig(
        model=str(tiny_dir), dataset=(str(data),), output_dir=str(work / "out"), tuner="full", learning_rate=1e-3,
        lr_scheduler="constant", max_steps=steps, batch_size=2, logging_steps=1, save_steps=10_000, seed=0,
        plot=False,
    )  # fmt: skip
    options = GRPOOptions(
        reward=("format",), reward_option=(r"format.pattern=^\s*[aeiouAEIOU]",), num_generations=4,
        max_completion_length=4, rollout_engine="transformers", rollout_temperature=temperature, rollout_draft=draft,
        **extra,
    )  # fmt: skip
    cls = grpo_trainer_class()
    original, original_rollouts = cls.sync_rollout_engine, cls.engine_rollouts
    seen: dict[str, Any] = {"rollouts": []}

    def sync(self: Any) -> Any:
        stats = original(self)
        seen["trainer"] = self
        if stats is not None and checks is not None:
            checks(self)
        return stats

    def rollouts(self: Any, prompt_ids: list[list[int]], records: Any = None) -> Any:
        out = original_rollouts(self, prompt_ids, records)
        seen["rollouts"].append([ids for _, ids in out])
        return out

    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setattr(cls, "sync_rollout_engine", sync)
        monkeypatch.setattr(cls, "engine_rollouts", rollouts)
        result = run(cfg, plugins, options)
    assert result.global_step == steps
    logs = [json.loads(line) for line in (work / "out" / "logs.jsonl").read_text().splitlines()]
    seen["trainer"].seen_rollouts = seen["rollouts"]
    return logs, seen["trainer"]


@pytest.mark.slow  # the draft is trained first (about a minute)
def test_grpo_trains_with_a_rollout_draft(tiny_dir: Path, plugins: Any, draft_dir: Path, tmp_path: Path) -> None:
    import torch
    from swiftcore_recipe_rl.sync import greedy_tokens

    from swiftcore.api.models import load_model, resolve_model_spec

    equal: list[bool] = []

    def policy_greedy_is_the_engines(trainer: Any) -> None:
        engine = trainer.rollout_engine
        records = list(trainer.prompt_records.values())[:3]
        mine = _rollouts(engine, records)[0]
        theirs = greedy_tokens(
            trainer.model, [list(p) for p in list(trainer.prompt_records)[:3]], max_new_tokens=REPLY_TOKENS,
            stop_ids=engine.stop_token_ids, pad_id=engine.pad_token_id,
        )  # fmt: skip
        equal.append(mine == theirs)

    steps = 3
    logs, trainer = _grpo_run(
        tiny_dir, plugins, tmp_path / "sampled", steps, temperature=1.0, draft=str(draft_dir),
        checks=policy_greedy_is_the_engines, rollout_importance_sampling="token_truncate",
    )  # fmt: skip
    stats = trainer.rollout_engine.speculative_stats
    print(f"grpo with --rollout-draft: {trainer.rollout_engine.speculative_summary()}")
    assert equal == [True] * steps, equal
    assert stats["steps"] > 0 and stats["accepted"] > 0, stats
    assert len([row for row in logs if "loss" in row]) == steps
    # The importance-sampling correction compared the engine's log-probs with the trainer's own: they are the
    # policy's (the draft's would be far off), so their k3 KL is float rounding.
    kls = [row["rollout_kl"] for row in logs if "rollout_kl" in row]
    assert len(kls) == steps and max(kls) < 1e-5, kls
    start = load_model(resolve_model_spec(str(tiny_dir), plugins), str(tiny_dir), plugins).state_dict()
    moved = [n for n, t in trainer.model.state_dict().items() if not torch.equal(t.cpu(), start[n])]
    assert moved, "no weight changed: the run did not train"

    # Near-greedy (temperature 1e-4): the trainer gets the same rollouts with and without the draft, so the runs log
    # the same rewards and losses and end on the same weights. (Every group is then one completion repeated, so its
    # advantages are 0: this checks the rollouts' path through the trainer, the sampled run above the training.)
    runs = [
        _grpo_run(tiny_dir, plugins, tmp_path / f"greedy-{i}", 2, temperature=1e-4, draft=d)
        for i, d in enumerate(("", str(draft_dir)))
    ]
    keys = ("loss", "reward", "completions/mean_length")
    picked = [[{k: row[k] for k in keys if k in row} for row in logs if "loss" in row] for logs, _ in runs]
    (_, plain), (_, drafted) = runs
    assert plain.seen_rollouts == drafted.seen_rollouts and len(plain.seen_rollouts) == 2, drafted.seen_rollouts
    assert picked[0] == picked[1] and len(picked[0]) == 2, picked
    assert drafted.rollout_engine.speculative_stats["steps"] > 0
    for (name, a), b in zip(plain.model.state_dict().items(), drafted.model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


def test_rollout_draft_refusals(tiny_dir: Path, plugins: Any, tmp_path: Path) -> None:
    from swiftcore_recipe_rl.options import GKDOptions, GRPOOptions
    from swiftcore_recipe_rl.plan import check_rollout_draft
    from swiftcore_recipe_rl.sync import create_rollout_engine

    draft = str(tmp_path)
    reward = {"reward": ("format",)}
    with pytest.raises(ValueError, match="--rollout-draft .* with --rollout-engine vllm: .* not wired"):
        GRPOOptions(**reward, rollout_engine="vllm", rollout_draft=draft)
    with pytest.raises(ValueError, match="--rollout-draft .*: needs --rollout-engine transformers"):
        GKDOptions(teacher_model=draft, rollout_draft=draft)  # gkd shares the option
    with pytest.raises(ValueError, match="--rollout-draft .* with --rollout-server: .* takes no draft"):
        GRPOOptions(**reward, rollout_server="http://127.0.0.1:1", rollout_draft=draft)
    with pytest.raises(ValueError, match="--rollout-draft .* with --ray: .* takes no draft"):
        GRPOOptions(**reward, ray=True, rollout_draft=draft)
    options = GRPOOptions(**reward, rollout_engine="transformers", rollout_draft=str(tmp_path / "missing"))
    with pytest.raises(SwiftcoreError, match="--rollout-draft .*missing: no such directory"):
        check_rollout_draft(options, _config(tiny_dir, tmp_path / "out", tuner="full"))
    options.rollout_draft = draft
    with pytest.raises(SwiftcoreError, match="--rollout-draft .*: no config.json there"):
        check_rollout_draft(options, _config(tiny_dir, tmp_path / "out", tuner="full"))
    options.rollout_draft = str(tiny_dir)
    with pytest.raises(SwiftcoreError, match="--rollout-draft with --tuner lora: .* use --tuner full"):
        check_rollout_draft(options, _config(tiny_dir, tmp_path / "out", tuner="lora"))
    check_rollout_draft(options, _config(tiny_dir, tmp_path / "out", tuner="full"))  # a directory with config.json
    # ... which no plugin decodes (a model, not a draft): refused when the engine loads, naming the option.
    from swiftcore.api.models import resolve_model_spec

    template = resolve_model_spec(str(tiny_dir), plugins).default_template
    cfg = _config(tiny_dir, tmp_path / "out", tuner="full")
    with pytest.raises(SwiftcoreError, match="--rollout-draft .*: no installed plugin recognises this draft"):
        create_rollout_engine("transformers", cfg, plugins, template=template, device="cpu", draft=str(tiny_dir))
    with pytest.raises(SwiftcoreError, match="--rollout-draft with --rollout-engine vllm: only the transformers"):
        create_rollout_engine("vllm", cfg, plugins, template=template, draft=str(tiny_dir))
