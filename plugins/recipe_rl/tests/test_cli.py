"""The CLI path end to end, with a third party's reward plugin installed beside swiftcore-recipe-rl.

``acme_rewards`` is a reward distribution as it would come from PyPI: a module and its ``.dist-info`` (entry
points ``swiftcore.plugins`` and the static index ``swiftcore.rewards``) on ``PYTHONPATH``. It provides
``shout`` (1 for a completion with a capital letter), ``flaky`` (raises on completions without an ``e``),
``nan`` (always NaN) and ``sleepy`` (hangs for 30 s). Then:

- ``swiftcore plugins`` lists it as providing those rewards, from metadata alone; ``--check`` passes it (the
  contract's reference check includes ``RewardSpec.function`` against ``RewardProtocol``);
- ``swiftcore rewards`` lists the built-ins and its rewards;
- ``swiftcore train --recipe grpo --reward format --reward shout --reward flaky --reward nan --reward sleepy
  --reward-timeout 1`` finds them by name, trains 2 steps, logs an error naming each faulty reward, gives
  those samples the fallback, and ends with a checkpoint and an ``args.json`` recording the rewards;
- an unknown reward is refused before anything loads, with close matches.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
from swiftcore_testing import run_swiftcore

ACME = '''\
"""A third-party reward plugin."""

import math
import time

from swiftcore.api import RewardSpec, hookimpl

SWIFTCORE_API = "1.2"


def shout(completions, **kwargs):
    return [1.0 if any(ch.isupper() for ch in c) else 0.0 for c in completions]


def flaky(completions, **kwargs):
    if any("e" not in c for c in completions):
        raise RuntimeError("no e in sight")
    return [1.0 for _ in completions]


def nan(completions, **kwargs):
    return [math.nan for _ in completions]


def sleepy(completions, **kwargs):
    time.sleep(30)
    return [1.0 for _ in completions]


@hookimpl
def swiftcore_register_rewards():
    return [
        RewardSpec(name="shout", function="acme_rewards:shout", description="1 for a capital letter"),
        RewardSpec(name="flaky", function="acme_rewards:flaky", description="raises without an e"),
        RewardSpec(name="nan", function="acme_rewards:nan", description="always NaN"),
        RewardSpec(name="sleepy", function="acme_rewards:sleepy", description="hangs"),
    ]
'''

ENTRY_POINTS = """\
[swiftcore.plugins]
acme = acme_rewards

[swiftcore.rewards]
flaky = acme_rewards
nan = acme_rewards
shout = acme_rewards
sleepy = acme_rewards
"""


@pytest.fixture(scope="module")
def acme(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the installed ``acme-rewards`` distribution (module + dist-info)."""
    root = tmp_path_factory.mktemp("site")
    (root / "acme_rewards.py").write_text(ACME)
    info = root / "acme_rewards-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: acme-rewards\nVersion: 0.1.0\nRequires-Dist: swiftcore\n"
    )
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root


def _swiftcore(*args: str, cwd: Path, site: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWIFTCORE_")}
    env["PYTHONPATH"] = str(site)
    env["OMP_NUM_THREADS"] = "1"
    return run_swiftcore(*args, cwd=cwd, env=env, timeout=600)


def test_plugins_lists_a_third_party_reward_plugin_and_checks_it(acme: Path, tmp_path: Path) -> None:
    listed = _swiftcore("plugins", "--json", cwd=tmp_path, site=acme)
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)["plugins"]}
    assert rows["acme"]["provides"] == {"reward": ["flaky", "nan", "shout", "sleepy"]}
    assert rows["acme"]["distribution"] == "acme-rewards"
    assert rows["train"]["provides"]["reward"] == ["accuracy", "format", "length"]
    assert rows["rl"]["provides"] == {
        "recipe": ["gkd", "grpo", "opd", "opsd", "reinforce_pp", "rloo"],
        "environment": ["calculator"],
        "reward": ["environment", "reward_model"],
        "command": ["rollout"],
    }
    checked = _swiftcore("plugins", "--check", "acme", cwd=tmp_path, site=acme)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "check acme: ok" in checked.stdout
    rewards = _swiftcore("rewards", "--json", cwd=tmp_path, site=acme)
    assert rewards.returncode == 0, rewards.stderr
    by_name = {row["name"]: row for row in json.loads(rewards.stdout)}
    assert set(by_name) == {
        "accuracy",
        "environment",
        "format",
        "length",
        "flaky",
        "nan",
        "reward_model",
        "shout",
        "sleepy",
    }
    assert by_name["accuracy"]["columns"] == ["answer"] and by_name["format"]["options"] == ["pattern"]
    assert "acme-rewards 0.1.0" in by_name["shout"]["provider"]


def test_train_grpo_from_the_cli_with_builtin_and_third_party_rewards(
    acme: Path, tiny_dir: Path, tmp_path: Path
) -> None:
    data = tmp_path / "prompts.jsonl"
    rows = [
        {"prompt": "Say something.", "answer": "1"},
        {"messages": [{"role": "user", "content": "Hi"}], "answer": "2"},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out"
    proc = _swiftcore(
        "train", "--recipe", "grpo", "--model", str(tiny_dir), "--dataset", str(data),
        "--reward", "format", "--reward-option", "format.pattern=^[a-z]", "--reward", "shout",
        "--reward", "flaky", "--reward", "nan", "--reward", "accuracy", "--reward-weight", "shout=0.5",
        "--reward-fallback", "-1", "--reward", "sleepy", "--reward-timeout", "1",
        "--num-generations", "4", "--max-completion-length", "4",
        "--max-steps", "2", "--save-steps", "2", "--logging-steps", "1", "--output-dir", str(out),
        cwd=tmp_path, site=acme,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "trained 2 steps on 2 samples" in proc.stdout
    assert "reward 'nan' (acme (acme-rewards 0.1.0)) gave sample" in proc.stderr
    assert "the fallback reward -1.0" in proc.stderr
    assert "reward 'flaky' (acme (acme-rewards 0.1.0)) raised RuntimeError: no e in sight" in proc.stderr
    assert "reward 'sleepy' (acme (acme-rewards 0.1.0)) did not return within 1 s" in proc.stderr
    logs = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    steps = [row for row in logs if "rewards/nan/mean" in row]
    assert len(steps) == 2
    # --batch-size 1 prompt x 4 generations per step: every one of the 4 NaN scores costs the fallback.
    assert all(row["rewards/nan/mean"] == -1.0 and row["reward_faults/nan"] == 4 for row in steps), steps
    assert all(-1.0 <= row["rewards/flaky/mean"] <= 1.0 for row in steps)
    assert all(row["rewards/sleepy/mean"] == -1.0 and row["reward_faults/sleepy"] == 4 for row in steps)
    args = json.loads((out / "args.json").read_text())
    assert [r["name"] for r in args["rewards"]] == ["format", "shout", "flaky", "nan", "accuracy", "sleepy"]
    assert args["rewards"][0]["options"] == {"pattern": "^[a-z]"}
    assert args["recipe"]["name"] == "grpo" and args["grpo"]["reward_weight"] == ["shout=0.5"]
    checkpoint = out / "checkpoint-2"
    assert (checkpoint / "adapter_model.safetensors").is_file()
    assert json.loads((checkpoint / "swiftcore_args.json").read_text())["rewards"] == args["rewards"]


def test_an_unknown_reward_is_refused_with_close_matches(acme: Path, tiny_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "hi"}) + "\n")
    proc = _swiftcore(
        "train", "--recipe", "grpo", "--model", str(tiny_dir), "--dataset", str(data), "--reward", "shuot",
        "--output-dir", str(tmp_path / "out"), cwd=tmp_path, site=acme,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "no loaded plugin provides a reward called 'shuot'" in proc.stderr and "shout" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_reward_column_missing_from_the_dataset_is_refused(acme: Path, tiny_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "hi"}) + "\n")
    proc = _swiftcore(
        "train", "--recipe", "grpo", "--model", str(tiny_dir), "--dataset", str(data), "--reward", "accuracy",
        "--output-dir", str(tmp_path / "out"), cwd=tmp_path, site=acme,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "reward 'accuracy' (train (swiftcore-train 0.1.0)) reads column(s) 'answer'" in proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("recipe", "flags", "weights"),
    [
        # RLOO with its KL penalty (reference = the LoRA adapter switched off), an ordinary peft adapter out; its
        # rollouts from the colocated transformers engine (LoRA-only weight sync).
        (
            "rloo",
            ("--rloo-beta", "0.05", "--rloo-normalize-advantages", "--rollout-engine", "transformers"),
            "adapter_model.safetensors",
        ),
        # REINFORCE++-baseline, full fine-tuning with the KL in the returns (TRL loads a reference model copy).
        ("reinforce_pp", ("--tuner", "full", "--reinforce-pp-beta", "0.05"), "model.safetensors"),
    ],
)
def test_train_rloo_and_reinforce_pp_from_the_cli(
    recipe: str, flags: tuple[str, ...], weights: str, acme: Path, tiny_dir: Path, tmp_path: Path
) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say something {i}.", "answer": str(i)}) + "\n" for i in range(2)))
    out = tmp_path / "out"
    proc = _swiftcore(
        "train", "--recipe", recipe, "--model", str(tiny_dir), "--dataset", str(data),
        "--reward", "format", "--reward-option", "format.pattern=^[a-z]", "--reward", "shout", "--reward", "accuracy",
        "--reward-weight", "shout=0.5", "--num-generations", "4", "--max-completion-length", "4", *flags,
        "--max-steps", "2", "--save-steps", "2", "--logging-steps", "1", "--output-dir", str(out),
        cwd=tmp_path, site=acme,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "trained 2 steps on 2 samples" in proc.stdout
    # the policy's log-probs come from the chunked lm_head (no full-vocabulary logits), as GRPO's do
    assert "log-probs: chunked lm_head, 1024 tokens per chunk" in proc.stderr, proc.stderr[-4000:]
    logs = [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]
    steps = [row for row in logs if "rewards/shout/mean" in row]
    assert len(steps) == 2 and all("kl" in row and math.isfinite(row["loss"]) for row in steps), steps
    if "--rollout-engine" in flags:  # one sync per step, logged
        assert all(row["sync_bytes"] > 0 and row["sync_s"] >= 0 for row in steps), steps
    args = json.loads((out / "args.json").read_text())
    assert args["recipe"]["name"] == recipe and args[recipe]["reward_weight"] == ["shout=0.5"]
    assert [r["name"] for r in args["rewards"]] == ["format", "shout", "accuracy"]
    checkpoint = out / "checkpoint-2"
    assert (checkpoint / weights).is_file() and (checkpoint / "swiftcore_args.json").is_file()


def test_a_flag_of_another_rl_recipe_is_refused(acme: Path, tiny_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "hi"}) + "\n")
    proc = _swiftcore(
        "train", "--recipe", "rloo", "--model", str(tiny_dir), "--dataset", str(data), "--reward", "format",
        "--grpo-loss-type", "dapo", "--output-dir", str(tmp_path / "out"), cwd=tmp_path, site=acme,
    )  # fmt: skip
    assert proc.returncode != 0
    assert "--grpo-loss-type belongs to recipe 'grpo'" in proc.stderr and "--recipe rloo" in proc.stderr


@pytest.mark.slow
def test_train_gkd_from_the_cli(acme: Path, tiny_dir: Path, teacher_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Say something {i}."}) + "\n" for i in range(2)))
    out = tmp_path / "out"
    proc = _swiftcore(
        "train", "--recipe", "gkd", "--model", str(tiny_dir), "--dataset", str(data), "--teacher-model",
        str(teacher_dir), "--gkd-beta", "0.5", "--max-completion-length", "4", "--max-steps", "2", "--save-steps", "2",
        "--logging-steps", "1", "--output-dir", str(out), cwd=tmp_path, site=acme,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "trained 2 steps on 2 samples" in proc.stdout
    args = json.loads((out / "args.json").read_text())
    assert args["recipe"]["name"] == "gkd" and args["gkd"]["gkd_beta"] == 0.5
    assert (out / "checkpoint-2" / "adapter_model.safetensors").is_file()


def test_gkd_refuses_a_teacher_api_and_reward_flags(acme: Path, tiny_dir: Path, tmp_path: Path) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "hi"}) + "\n")
    common = ("train", "--recipe", "gkd", "--model", str(tiny_dir), "--dataset", str(data))
    api = _swiftcore(
        *common, "--teacher-api", "http://localhost:8000/v1", "--output-dir", str(tmp_path / "out"),
        cwd=tmp_path, site=acme,
    )  # fmt: skip
    assert api.returncode != 0 and "--teacher-api 'http://localhost:8000/v1': not supported" in api.stderr
    assert "not from an OpenAI-compatible API" in api.stderr and not (tmp_path / "out").exists()
    reward = _swiftcore(*common, "--teacher-model", str(tiny_dir), "--reward", "format", cwd=tmp_path, site=acme)
    assert reward.returncode != 0 and "--reward belongs to recipe 'grpo' or 'rloo' or 'reinforce_pp'" in reward.stderr
