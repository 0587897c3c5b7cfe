"""``--ray`` on a real local Ray cluster (2 CPUs): the trainer, the rollout engine and the reward as Ray actors.

- A GRPO run with ``--ray --async-rollouts`` on the vowel task: the trainer, the rollout worker and the reward
  worker are three processes other than this one (``args.json`` records where each ran), the run learns (mean
  reward of the last 3 steps against the first 3 rises by at least 0.25; not bit-reproducible, see
  test_async_rollouts.py: 8 steps gave 0.17 -> 0.40 once in CI, 0.19-0.21 -> 0.73-0.98 here, so the run has 12 steps,
  measured 0.21-0.42 -> 0.98-1.00 in five runs) and every round after the first comes a round ahead from the rollout
  worker.
- Planned once: the command's process loads and checks the prompt rows, loads the rewards and encodes every prompt,
  once each; the trainer actor receives the plan and does none of it again (each call is logged with its process by
  a counter installed in this process and, through Ray's ``worker_process_setup_hook``, in every worker).
- Faults: a reward worker that died costs its samples the fallback reward and a logged error, not the run; a rollout
  worker that died ends the run's call with one error naming it and the way back (resume).
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

#: The call counter, a module written next to its log (``{log}``): ``counted(name, function)`` logs ``PID NAME`` for
#: each call of ``function``; ``install()`` counts, in the process it runs in, the calls that load and check the prompt
#: rows, load the rewards and encode a prompt.
COUNTER = """
import os
from pathlib import Path

LOG = Path({log!r})


def counted(name, function):
    def wrapper(*args, **kwargs):
        with LOG.open("a") as out:  # appends of one short line: whole lines even from several processes
            out.write(f"{{os.getpid()}} {{name}}\\n")
        return function(*args, **kwargs)

    return wrapper


def install():
    import swiftcore_train
    from swiftcore_recipe_rl import data, rollout

    data.load_prompt_rows = counted("load_prompt_rows", data.load_prompt_rows)
    swiftcore_train.load_rewards = counted("load_rewards", swiftcore_train.load_rewards)
    rollout.PromptCodec.encode = counted("encode", rollout.PromptCodec.encode)
"""


@pytest.fixture(scope="module")
def call_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The counter's log; its module, ``rl_call_counter``, is in the same folder."""
    folder = tmp_path_factory.mktemp("call_counter")
    log = folder / "calls.log"
    (folder / "rl_call_counter.py").write_text(COUNTER.format(log=str(log)))
    return log


@pytest.fixture(scope="module")
def ray_cluster(call_log: Path) -> Iterator[Any]:
    """A local Ray cluster of 2 CPUs for this module, the call counter installed in every worker it starts."""
    import ray

    path = os.pathsep.join(p for p in (str(call_log.parent), os.environ.get("PYTHONPATH", "")) if p)
    runtime_env = {"env_vars": {"PYTHONPATH": path}, "worker_process_setup_hook": "rl_call_counter.install"}
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False,
             runtime_env=runtime_env)  # fmt: skip
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
    )  # fmt: skip
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


@pytest.mark.slow
def test_a_ray_run_is_planned_once_in_the_command_and_the_trainer_actor_executes_the_plan(
    ray_cluster: Any, call_log: Path, tiny_dir: Path, plugins: Any, tmp_path: Path, vowel: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The prompt rows are loaded and checked, the rewards loaded and every prompt encoded once, in this process (the
    command's); the trainer actor does none of it (it re-entered the recipe and did it all again before the run was
    planned once). A reward worker loads its own reward: the counter works in the workers too."""
    import importlib

    import swiftcore_train
    from swiftcore_recipe_rl import data
    from swiftcore_recipe_rl.recipe import run
    from swiftcore_recipe_rl.rollout import PromptCodec

    monkeypatch.syspath_prepend(str(call_log.parent))
    counter = importlib.import_module("rl_call_counter")
    monkeypatch.setattr(data, "load_prompt_rows", counter.counted("load_prompt_rows", data.load_prompt_rows))
    monkeypatch.setattr(swiftcore_train, "load_rewards", counter.counted("load_rewards", swiftcore_train.load_rewards))
    # encode_prompt: what the plan encodes every prompt with (encode, for text alone, goes through it too)
    monkeypatch.setattr(PromptCodec, "encode_prompt", counter.counted("encode", PromptCodec.encode_prompt))
    call_log.write_text("")  # the module's earlier tests' calls left out

    prompts = 4
    cfg, options = vowel("grpo", tiny_dir, tmp_path, steps=1, lr=5e-3, prompts=prompts, ray=True)
    assert run(cfg, plugins, options).global_step == 1

    where = json.loads((tmp_path / "out" / "args.json").read_text())["ray"]
    here, trainer, reward = str(os.getpid()), str(where["trainer"]["pid"]), str(where["rewards"]["format"]["pid"])
    assert len({here, trainer, reward}) == 3, where
    calls = Counter(tuple(line.split()) for line in call_log.read_text().splitlines())
    assert calls == {
        (here, "load_prompt_rows"): 1,
        (here, "load_rewards"): 1,
        (here, "encode"): prompts,
        (reward, "load_rewards"): 1,
    }, calls


@pytest.mark.slow
def test_grpo_on_ray_takes_image_prompts(
    ray_cluster: Any, tiny_dir: Path, plugins: Any, image_data: Path, tmp_path: Path
) -> None:
    """``--ray`` on prompts with images (refused before): the rollout worker is sent each row's record with its image
    inlined (as a rollout server is: ``test_image_prompts.py``), so it needs no access to the trainer's files, and
    the trainer actor checks that the worker encoded each prompt into the ids it trains on, image tokens included
    (a worker that dropped the image would encode one placeholder token, and the run would stop)."""
    from swiftcore_recipe_rl.options import GRPOOptions
    from swiftcore_recipe_rl.recipe import run
    from swiftcore_train import TrainConfig

    out = tmp_path / "out"
    cfg = TrainConfig(
        model=str(tiny_dir), dataset=(str(image_data),), output_dir=str(out), tuner="lora", learning_rate=5e-3,
        max_steps=2, batch_size=2, logging_steps=1, save_steps=10_000, seed=0, plot=False,
    )  # fmt: skip
    options = GRPOOptions(reward=("accuracy",), num_generations=2, max_completion_length=4, ray=True)
    assert run(cfg, plugins, options).global_step == 2
    where = json.loads((out / "args.json").read_text())["ray"]
    assert where["rollout"]["pid"] not in (os.getpid(), where["trainer"]["pid"]), where
    logs = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    rounds = [row for row in logs if "rollout_tokens" in row]
    assert len(rounds) == 2 and all(row["rollout_tokens"] > 0 and row["sync_bytes"] > 0 for row in rounds), rounds


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
