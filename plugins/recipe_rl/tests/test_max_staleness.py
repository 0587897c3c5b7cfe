"""Bounded staleness of asynchronous rollouts (``--max-staleness K``, :mod:`swiftcore_recipe_rl.prefetch`).

- The parts: :class:`~swiftcore_recipe_rl.prefetch.RolloutPrefetch` holds up to ``K`` rounds, runs them in order and
  drops a round (with the rounds after it) that would be trained more than ``K`` steps after its weights; the options
  refuse a bad ``K``, naming the flag, and ``K >= 1`` turns ``--async-rollouts`` on.
- The run: GRPO on the vowel task with ``--rollout-engine transformers --max-staleness 2`` (TIS, the ``auto``
  correction). The rollout worker is held on the second round ahead until the trainer has scheduled step 1, so the
  worker is busy there whatever the machine's speed: a round started then on the engine's weights (step 0) would be
  trained at step 3, 3 steps stale, and must wait for a sync. Asserted: every trained round is at most 2 steps stale
  and one is exactly 2; no round was dropped as too stale (the schedule, not the guard, kept the bound); the engine
  was synced only while the worker was idle; every prompt of the epoch was trained once; the rounds after the first
  were corrected with the engine's own log-probs (round 1's equal the trainer's; later ratios move off 1); and it
  learns (mean reward of the last 3 steps at least 0.25 above the first 3).
- The loss of a stale batch against a float64 reference of the TIS-corrected GRPO loss is
  ``test_async_rollouts.py::test_importance_ratio_and_loss_equal_a_hand_computation`` (the policy moved off the
  engine's weights, as ``K`` steps of training move it) and ``test_mismatch.py``'s reference for every mode.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

K = 2


def test_prefetch_holds_k_rounds_in_order_and_drops_a_round_staler_than_k(caplog: pytest.LogCaptureFixture) -> None:
    from swiftcore_recipe_rl.prefetch import RolloutPrefetch

    prefetch = RolloutPrefetch(K)
    release = threading.Event()
    prefetch.submit(lambda: "r1", [[1]], weights_step=0, item=1)
    prefetch.submit(lambda: release.wait(30) and "r2", [[2]], weights_step=0, item=2)
    assert prefetch.pending == 2 and prefetch.last_item == 2 and not prefetch.idle  # r2 is held on the worker
    with pytest.raises(RuntimeError, match="--max-staleness 2"):
        prefetch.submit(lambda: "r3", [[3]], weights_step=0)
    assert prefetch.allows(2, 0) and not prefetch.allows(3, 0)
    assert prefetch.take([[1]], train_step=1) == ("r1", 0)
    release.set()
    prefetch.wait()
    assert prefetch.idle and prefetch.pending == 1
    prefetch.submit(lambda: "r3", [[3]], weights_step=0, item=3)
    assert prefetch.take([[2]], train_step=3) is None  # 3 steps after its weights: dropped, and r3 after it
    assert prefetch.too_stale == 1 and prefetch.pending == 0 and "more than --max-staleness 2" in caplog.text
    with pytest.raises(ValueError, match="max_staleness"):
        RolloutPrefetch(0)
    prefetch.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_staleness": -1}, "--max-staleness: -1 must be a whole number >= 0"),
        ({"max_staleness": 1.5}, "--max-staleness: 1.5 must be a whole number"),
        ({"max_staleness": 0, "async_rollouts": True}, "--max-staleness 0 with --async-rollouts"),
        ({"rollout_engine": "trainer", "max_staleness": 2}, "--max-staleness 2: needs a swiftcore rollout engine"),
    ],
)
def test_bad_max_staleness_is_refused_naming_the_option(options: dict[str, Any], message: str) -> None:
    from swiftcore_recipe_rl.options import GRPOOptions, ReinforcePPOptions, RLOOOptions

    options = {"rollout_engine": "transformers", **options}
    with pytest.raises(ValueError, match=message):
        GRPOOptions(reward=("format",), **options)
    assert ReinforcePPOptions(reward=("format",), rollout_engine="transformers", max_staleness=2).async_rollouts
    with pytest.raises(ValueError, match="--max-staleness 2: not supported by rloo"):
        RLOOOptions(reward=("format",), rollout_engine="transformers", max_staleness=2)
    implied = GRPOOptions(reward=("format",), rollout_engine="transformers", max_staleness=2)
    assert implied.async_rollouts and implied.importance_sampling_mode() == "token_truncate"
    synchronous = GRPOOptions(reward=("format",), rollout_engine="transformers", max_staleness=0)
    assert not synchronous.async_rollouts and synchronous.importance_sampling_mode() is None


@pytest.fixture(scope="module")
def k2_run(tiny_dir: Path, plugins: Any, tmp_path_factory: pytest.TempPathFactory, vowel: Any) -> dict[str, Any]:
    """GRPO with ``--max-staleness 2`` on the vowel task (8 steps), the worker held as the module says."""
    from swiftcore_recipe_rl.recipe import run
    from swiftcore_recipe_rl.trainer import grpo_trainer_class

    steps, work = 8, tmp_path_factory.mktemp("k2")
    cls = grpo_trainer_class()
    seen: dict[str, Any] = {"trained": [], "synced_busy": 0, "prefetch": None, "ahead": 0}
    scheduled_step1 = threading.Event()
    original = {name: getattr(cls, name) for name in ("_calculate_rewards", "_prefetch_rounds", "_generate_ahead",
                                                      "sync_rollout_engine")}  # fmt: skip

    def calculate(self: Any, inputs: Any, *args: Any) -> Any:
        seen["trained"].append({x["prompt"] for x in inputs})
        return original["_calculate_rewards"](self, inputs, *args)

    def prefetch_rounds(self: Any) -> None:
        original["_prefetch_rounds"](self)
        seen["prefetch"] = self._prefetch
        if self.state.global_step >= 1:
            scheduled_step1.set()

    def generate_ahead(self: Any, *args: Any) -> Any:
        seen["ahead"] += 1
        if seen["ahead"] == 2:  # the second round ahead: held until step 1 has been scheduled
            assert scheduled_step1.wait(300), "step 1 was never scheduled"
        return original["_generate_ahead"](self, *args)

    def sync(self: Any) -> Any:
        if self._prefetch is not None and not self._prefetch.idle:
            seen["synced_busy"] += 1
        return original["sync_rollout_engine"](self)

    cfg, options = vowel(
        "grpo", tiny_dir, work, steps=steps, lr=5e-3, grpo_loss_type="grpo", rollout_engine="transformers",
        max_staleness=K,
    )  # fmt: skip
    assert options.async_rollouts and options.importance_sampling_mode() == "token_truncate"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cls, "_calculate_rewards", calculate)
        mp.setattr(cls, "_prefetch_rounds", prefetch_rounds)
        mp.setattr(cls, "_generate_ahead", generate_ahead)
        mp.setattr(cls, "sync_rollout_engine", sync)
        result = run(cfg, plugins, options)
    assert result.global_step == steps
    logs = [json.loads(line) for line in (work / "out" / "logs.jsonl").read_text().splitlines()]
    seen["logs"] = [row for row in logs if "rewards/format/mean" in row]
    seen["steps"] = steps
    return seen


@pytest.mark.slow
def test_every_round_is_trained_at_most_k_steps_after_its_weights(k2_run: dict[str, Any]) -> None:
    logs, steps = k2_run["logs"], k2_run["steps"]
    staleness = [row["rollout_staleness"] for row in logs]
    print(f"--max-staleness {K}: rollout_staleness {staleness}, sync_s {[round(r.get('sync_s', 0), 4) for r in logs]}")
    assert len(staleness) == steps and max(staleness) <= K, staleness
    assert staleness[0] == 0.0 and staleness[2] == K  # round 3 was sampled at step 0: the bound is reached
    prefetch = k2_run["prefetch"]
    assert prefetch.too_stale == 0 and prefetch.mismatches == 0  # the schedule kept the bound, not the guard
    assert k2_run["synced_busy"] == 0  # weights pushed only while no round was being generated
    trained = k2_run["trained"]  # one epoch: 16 prompts, 2 a step, each trained once
    assert len(trained) == steps and len(set().union(*trained)) == 2 * steps and all(len(t) == 2 for t in trained)


@pytest.mark.slow
def test_k2_with_tis_learns_on_the_engines_log_probs(k2_run: dict[str, Any]) -> None:
    logs = k2_run["logs"]
    rewards = [row["rewards/format/mean"] for row in logs]
    before, after = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    print(f"--max-staleness {K} + TIS: mean reward {before:.3f} -> {after:.3f}; "
          f"IS ratio min {[round(r['sampling/importance_sampling_ratio/min'], 3) for r in logs]}")  # fmt: skip
    assert after - before >= 0.25, rewards
    # Round 1 is sampled from the weights being trained: the engine's log-probs are the trainer's own ...
    assert logs[0]["sampling/sampling_logp_difference/max"] < 1e-4
    # ... and the stale rounds are weighed by the policy over the engine's sampling probabilities, capped at 3.
    stale = [row for row in logs if row["rollout_staleness"] >= 1]
    assert any(row["sampling/sampling_logp_difference/max"] > 1e-3 for row in stale)
    assert all(row["sampling/importance_sampling_ratio/max"] <= 3.0 + 1e-6 for row in logs)
