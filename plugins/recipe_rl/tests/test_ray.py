"""``--ray`` on a real local Ray cluster (2 CPUs): the trainer, the rollout engine and the reward as Ray actors.

- A GRPO run with ``--ray --async-rollouts`` on the vowel task: the trainer, the rollout worker and the reward
  worker are three processes other than this one (``args.json`` records where each ran), the run learns (mean
  reward of the last 3 steps against the first 3 rises by at least 0.25; not bit-reproducible, see
  test_async_rollouts.py: 8 steps gave 0.17 -> 0.40 once in CI, 0.19-0.21 -> 0.73-0.98 here, so the run has 12 steps,
  measured 0.21-0.42 -> 0.98-1.00 in five runs) and every round after the first comes a round ahead from the rollout
  worker.
- Faults: a reward worker that died costs its samples the fallback reward and a logged error, not the run; a rollout
  worker that died ends the run's call with one error naming it and the way back (resume).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    """A local Ray cluster of 2 CPUs for this module."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()


@pytest.mark.slow
def test_grpo_on_ray_places_trainer_rollouts_and_rewards_in_workers_and_learns(
    ray_cluster: Any, tiny_dir: Path, plugins: Any, tmp_path: Path, vowel: Any
) -> None:
    from swiftcore_recipe_rl.recipe import run

    steps = 12  # one epoch (24 prompts, 2 a step): a new epoch's first round is not read ahead (staleness 0)
    cfg, options = vowel(
        "grpo", tiny_dir, tmp_path, steps=steps, lr=5e-3, prompts=2 * steps, grpo_loss_type="grpo", ray=True,
        async_rollouts=True,
    )
    out = tmp_path / "out"
    result = run(cfg, plugins, options)
    assert result.global_step == steps

    where = json.loads((out / "args.json").read_text())["ray"]
    pids = [where["trainer"]["pid"], where["rollout"]["pid"], where["rewards"]["format"]["pid"]]
    assert len(set(pids)) == 3 and os.getpid() not in pids, where
    assert where["trainer"]["node"] == ray_cluster.get_runtime_context().get_node_id()

    logs = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    logs = [row for row in logs if "rewards/format/mean" in row]
    rewards = [row["rewards/format/mean"] for row in logs]
    before, after = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    print(f"grpo --ray --async-rollouts: mean reward {before:.3f} -> {after:.3f} in {steps} steps")
    assert len(rewards) == steps and after - before >= 0.25, rewards
    assert [row["rollout_staleness"] for row in logs] == [0.0] + [1.0] * (steps - 1)
    assert all(row["sync_bytes"] > 0 for row in logs[:-1])  # the adapter went to the worker before each round


def test_a_dead_reward_worker_costs_the_fallback_not_the_run(
    ray_cluster: Any, plugins: Any, caplog: pytest.LogCaptureFixture
) -> None:
    from swiftcore_recipe_rl.ray_actors import start_reward_workers
    from swiftcore_train import load_rewards, parse_reward_options

    names = ["format"]
    local = load_rewards(plugins, names, options=parse_reward_options(["format.pattern=^a"]), fallback=-1.0)
    (reward,) = start_reward_workers(plugins, names, local)
    assert reward(["apple", "pear"]) == [1.0, 0.0] and reward.faults == 0  # scored in the worker, options applied
    ray_cluster.kill(reward.actor, no_restart=True)
    with caplog.at_level(logging.ERROR, logger="swiftcore.rl"):
        assert reward(["apple", "pear"]) == [-1.0, -1.0]
    assert reward.faults == 2
    assert "reward 'format': its Ray worker failed" in caplog.text


def test_a_dead_rollout_worker_stops_the_call_naming_it(ray_cluster: Any, tiny_dir: Path, plugins: Any) -> None:
    from types import SimpleNamespace

    from swiftcore_infer import Request, SamplingParams
    from swiftcore_recipe_rl.ray_actors import start_rollout_worker

    from swiftcore.api import SwiftcoreError

    cfg = SimpleNamespace(model=str(tiny_dir), model_type=None, dtype="float32")
    engine = start_rollout_worker(plugins, "transformers", cfg, "qwen3_5", timeout=120)
    assert engine.info["backend"] == "transformers" and engine.weight_version == 0
    request = Request(
        record={"messages": [{"role": "user", "content": "hi"}]}, sampling=SamplingParams(max_new_tokens=3)
    )
    ((_, ids),) = engine.generate_rollouts([request])
    assert 1 <= len(ids) <= 3 and request.encoded  # generated in the worker; the prompt ids it encoded came back
    ray_cluster.kill(engine._actor)
    with pytest.raises(SwiftcoreError, match="Ray rollout worker stopped answering during /rollouts.*resume-from"):
        engine.generate_rollouts([request])


def test_ray_options_are_checked() -> None:
    from swiftcore_recipe_rl.options import GRPOOptions

    with pytest.raises(ValueError, match="--rollout-server with --ray"):
        GRPOOptions(reward=("format",), ray=True, rollout_server="http://127.0.0.1:8001")
    assert GRPOOptions(reward=("format",), ray=True, async_rollouts=True).importance_sampling_mode() == "token_truncate"
