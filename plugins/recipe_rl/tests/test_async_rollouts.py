"""Asynchronous rollouts (``--async-rollouts``) and the importance-sampling correction of engine rollouts.

- The correction on a fixed batch: a real trainer and a real colocated engine, the policy moved away from the
  weights the engine samples with; TRL's importance ratio equals ``min(exp(logp_policy - logp_engine), cap)``
  computed by hand from a forward pass and the engine's own sampling log-probs, and the loss equals the GRPO loss
  weighted by it, to 1e-5.
- The async run: GRPO on the vowel task with ``--rollout-engine transformers --async-rollouts``. It learns (mean
  reward of the last 3 steps against the first 3 rises by at least 0.25; measured 0.27-0.35 -> 0.92-0.94 in 8 steps
  over three runs on an AMD EPYC machine: not bit-reproducible, the worker's sampling and the trainer draw from one
  torch generator in whichever order the threads reach it). Round 1 is generated on the spot and every later one a
  round ahead (``rollout_staleness`` 0 then 1); the engine's sampling log-probs of round 1 equal the trainer's
  (nothing is stale yet); the rewards of every later round were scored on the rollout worker; and the run trains on
  exactly the prompts, in the order, of the same run without ``--async-rollouts`` (no round lost or trained twice).
- The parts: ``Lookahead`` and ``RolloutPrefetch`` (:mod:`swiftcore_recipe_rl.prefetch`), and the options' refusals.
"""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path
from typing import Any

import pytest

CAP = 1.5


def test_lookahead_hands_every_item_once_in_order_and_reads_ahead() -> None:
    from swiftcore_recipe_rl.prefetch import Lookahead

    it = Lookahead(iter(range(5)), keep=2)
    assert it.peek(2) == 2 and it.peek(0) == 0
    assert [next(it), next(it), next(it)] == [0, 1, 2]
    assert it.peek(1) == 1 and it.peek(0) is None  # kept: the last 2 handed on
    assert it.peek(4) == 4 and it.peek(5) is None
    assert list(it) == [3, 4]


def test_rollout_prefetch_gives_a_round_only_to_its_prompts_and_passes_failures_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from swiftcore_recipe_rl.prefetch import RolloutPrefetch

    prefetch = RolloutPrefetch()
    assert prefetch.take([[1]]) is None
    prefetch.submit(lambda: "round", [[1, 2]], weights_step=3)
    with pytest.raises(RuntimeError, match="still pending"):
        prefetch.submit(lambda: "another", [[1, 2]], weights_step=3)
    assert prefetch.take([[1, 2]]) == ("round", 3)
    prefetch.submit(lambda: "round", [[1, 2]], weights_step=4)
    assert prefetch.take([[9]]) is None and prefetch.mismatches == 1
    assert "other prompts" in caplog.text

    def dies() -> None:
        raise ConnectionError("rollout server gone")

    prefetch.submit(dies, [[1]], weights_step=5)
    with pytest.raises(ConnectionError, match="gone"):
        prefetch.take([[1]])
    prefetch.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"async_rollouts": True}, "--async-rollouts: needs a swiftcore rollout engine"),
        ({"rollout_importance_sampling": "token_mask"}, "--rollout-importance-sampling token_mask: needs"),
        ({"rollout_importance_sampling": "tokens"}, "'tokens' is not one of auto, none, token_truncate"),
        ({"rollout_engine": "transformers", "rollout_is_clip_max": 0.0}, "--rollout-is-clip-max"),
        (
            {"rollout_engine": "transformers", "async_rollouts": True, "environment": "calculator"},
            "--async-rollouts with --environment: not supported yet",
        ),
    ],
)
def test_async_options_are_checked(options: dict[str, Any], message: str) -> None:
    from swiftcore_recipe_rl.options import GRPOOptions, RLOOOptions

    reward = ("environment",) if "environment" in options else ("format",)
    with pytest.raises(ValueError, match=message):
        GRPOOptions(reward=reward, **options)
    with pytest.raises(ValueError, match="not supported by rloo"):
        RLOOOptions(reward=("format",), rollout_engine="transformers", async_rollouts=True)
    on = GRPOOptions(reward=("format",), rollout_engine="transformers", async_rollouts=True)
    assert on.importance_sampling_mode() == "token_truncate"
    assert GRPOOptions(reward=("format",), rollout_engine="transformers").importance_sampling_mode() is None


def test_importance_ratio_and_loss_equal_a_hand_computation(
    tiny_dir: Path, plugins: Any, tmp_path: Path, trainer_factory: Any
) -> None:
    import torch
    from swiftcore_recipe_rl.sync import WeightSync, create_rollout_engine
    from swiftcore_train import TrainConfig

    rewards = [1.0, 0.0, 0.5, 0.0, 2.0, 2.0, 1.0, -1.0]
    trainer = trainer_factory(
        "grpo", tiny_dir, plugins, tmp_path / "out", rollout_engine="transformers", grpo_loss_type="grpo",
        rollout_importance_sampling="token_truncate", rollout_is_clip_max=CAP,
    )  # fmt: skip
    cfg = TrainConfig(model=str(tiny_dir), dataset=("unused",), output_dir=str(tmp_path / "out"))
    engine = create_rollout_engine("transformers", cfg, plugins, template=None, device="cpu")
    trainer.rollout_engine, trainer.importance_sampling = engine, True
    trainer.weight_sync = WeightSync(engine)
    trainer.weight_sync.attach(trainer.model)
    trainer.model.train()
    assert trainer.sync_rollout_engine() is not None  # the engine samples with these weights ...
    torch.manual_seed(1)
    with torch.no_grad():  # ... and the policy moves on (as it has when a round comes from an earlier step)
        for name, param in trainer.model.named_parameters():
            if "lora_B" in name:
                param.add_(torch.randn_like(param) * 0.05)
    seen: list[Any] = []
    real = engine.generate_rollouts

    def recording(requests: Any, **kwargs: Any) -> Any:
        out = real(requests, **kwargs)
        seen.extend(out)
        return out

    engine.generate_rollouts = recording
    out = trainer._generate_and_score_completions([{"prompt": "p", "r": r} for r in rewards])
    assert all(g.logprobs is not None for g, _ in seen)

    prompt_ids, completion_ids = out["prompt_ids"], out["completion_ids"]
    mask = out["completion_mask"].float()
    temperature = trainer.args.temperature
    with torch.no_grad():
        logits = trainer.model(
            input_ids=torch.cat([prompt_ids, completion_ids], 1),
            attention_mask=torch.cat([out["prompt_mask"], out["completion_mask"]], 1),
        ).logits[:, prompt_ids.size(1) - 1 : -1]
    policy = torch.log_softmax(logits.double() / temperature, -1).gather(-1, completion_ids[..., None]).squeeze(-1)
    ratio = torch.ones_like(policy)
    for i, (generation, ids) in enumerate(seen):
        sampled = torch.tensor(generation.logprobs, dtype=torch.float64)
        ratio[i, : len(ids)] = torch.exp(policy[i, : len(ids)] - sampled).clamp(max=CAP)
    got = out["importance_sampling_ratio"].double()
    assert torch.allclose(got * mask, ratio * mask, atol=1e-5), (got, ratio)
    assert ((ratio < 0.99) * mask).sum() > 0 and ((ratio == CAP) * mask).sum() > 0  # both sides exercised

    # The loss: on-policy for the trainer (rho = 1), each token's -A weighted by its ratio; grpo's mean of token means.
    trainer.current_gradient_accumulation_steps = 1  # set by the training loop, which this test does not run
    loss = trainer._compute_loss(trainer.model, out).item()
    advantages = out["advantages"].double()
    per_seq = [(-(advantages[i] * ratio[i]) * mask[i]).sum() / mask[i].sum() for i in range(len(rewards))]
    expected = float(sum(per_seq) / len(per_seq))
    assert math.isclose(loss, expected, rel_tol=1e-5, abs_tol=1e-6), (loss, expected)
    engine.close()


def _run(tiny_dir: Path, plugins: Any, work: Path, vowel: Any, *, asynchronous: bool, steps: int) -> dict[str, Any]:
    from swiftcore_recipe_rl.recipe import run
    from swiftcore_recipe_rl.rewards import TRLReward
    from swiftcore_recipe_rl.trainer import grpo_trainer_class

    trained: list[list[str]] = []
    scored_on: list[str] = []
    cls = grpo_trainer_class()
    original_rewards, original_score = cls._calculate_rewards, TRLReward._score

    def calculate(self: Any, inputs: Any, *args: Any) -> Any:
        trained.append([x["prompt"] for x in inputs])
        return original_rewards(self, inputs, *args)

    def score(self: Any, *args: Any) -> Any:
        scored_on.append(threading.current_thread().name)
        return original_score(self, *args)

    cfg, options = vowel(
        "grpo", tiny_dir, work, steps=steps, lr=5e-3, grpo_loss_type="grpo", rollout_engine="transformers",
        async_rollouts=asynchronous,
    )  # fmt: skip
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cls, "_calculate_rewards", calculate)
        mp.setattr(TRLReward, "_score", score)
        result = run(cfg, plugins, options)
    assert result.global_step == steps
    logs = [json.loads(line) for line in (work / "out" / "logs.jsonl").read_text().splitlines()]
    return {"logs": [row for row in logs if "rewards/format/mean" in row], "trained": trained, "scored_on": scored_on}


@pytest.mark.slow
def test_async_rollouts_learn_one_round_ahead_and_train_on_every_round_once(
    tiny_dir: Path, plugins: Any, tmp_path: Path, vowel: Any
) -> None:
    steps = 8
    run = _run(tiny_dir, plugins, tmp_path / "async", vowel, asynchronous=True, steps=steps)
    logs = run["logs"]
    rewards = [row["rewards/format/mean"] for row in logs]
    before, after = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    print(f"grpo --async-rollouts: mean reward {before:.3f} -> {after:.3f} in {steps} steps; "
          f"rollout_s {[round(r['rollout_s'], 4) for r in logs]}")  # fmt: skip
    assert len(rewards) == steps and after - before >= 0.25, rewards
    assert [row["rollout_staleness"] for row in logs] == [0.0] + [1.0] * (steps - 1)
    # Round 1 is sampled from the weights being trained: the engine's log-probs are the trainer's own.
    assert logs[0]["sampling/sampling_logp_difference/max"] < 1e-4
    assert logs[0]["sampling/importance_sampling_ratio/min"] > 0.999
    assert all(row["sampling/importance_sampling_ratio/max"] <= 3.0 + 1e-6 for row in logs)
    # Round 1's rewards are scored when TRL asks (on its reward threads), every later round's on the rollout worker.
    assert not run["scored_on"][0].startswith("swiftcore-rollout")
    assert all(name.startswith("swiftcore-rollout") for name in run["scored_on"][1:steps]), run["scored_on"]

    plain = _run(tiny_dir, plugins, tmp_path / "sync", vowel, asynchronous=False, steps=steps)
    assert run["trained"] == plain["trained"] and len(run["trained"]) == steps


@pytest.mark.slow
def test_async_rollouts_through_a_rollout_server(
    tiny_dir: Path, plugins: Any, tmp_path: Path, vowel: Any, rollout_servers: Any
) -> None:
    """Server mode: the round ahead is generated by a ``swiftcore rollout`` server while the trainer trains, and the
    sampling log-probs come over the wire (round 1's equal the trainer's: the ratio is 1 when nothing is stale)."""
    from swiftcore_recipe_rl.recipe import run

    served = rollout_servers(tiny_dir)
    steps = 4
    cfg, options = vowel(
        "grpo", tiny_dir, tmp_path, steps=steps, lr=5e-3, grpo_loss_type="grpo", rollout_server=served.url,
        async_rollouts=True,
    )  # fmt: skip
    assert run(cfg, plugins, options).global_step == steps
    logs = [json.loads(line) for line in (tmp_path / "out" / "logs.jsonl").read_text().splitlines()]
    logs = [row for row in logs if "rewards/format/mean" in row]
    assert [row["rollout_staleness"] for row in logs] == [0.0] + [1.0] * (steps - 1)
    assert logs[0]["sampling/sampling_logp_difference/max"] < 1e-4
    assert served.health()["weight_version"] >= steps  # a sync before every round (load_adapter, then updates)
