"""Fixtures of swiftcore-plugin-eagle3's tests: a tiny Qwen3.5 target fully fine-tuned on a greeting task (so its
greedy replies are predictable: a fixed sentence around the name asked for), and an Eagle3 draft trained for it by
``swiftcore train --recipe eagle3`` on the same chats, each built once per session."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

TRAIN_NAMES = [
    "Alice",
    "Bruno",
    "Chen",
    "Dara",
    "Emil",
    "Fatou",
    "Gita",
    "Hugo",
    "Ines",
    "Jon",
    "Kira",
    "Lev",
    "Mina",
    "Noor",
    "Omar",
    "Pia",
    "Quin",
    "Rosa",
    "Sami",
    "Tove",
    "Uma",
    "Vik",
    "Wren",
    "Yara",
]
HELD_OUT_NAMES = ["Zed", "Ada", "Bea", "Cyd", "Dov", "Eli", "Fay", "Gus"]
REPLY = "Hello {}, welcome to the Zorbia club! Your seat is by the blue window."
REPLY_TOKENS = 48
TARGET_STEPS, DRAFT_STEPS = 40, 40


def greeting(name: str) -> dict[str, Any]:
    """The prompt asking to greet ``name``, as a user-turn record."""
    return {"messages": [{"role": "user", "content": f"Greet {name}."}]}


@pytest.fixture(scope="session")
def plugins() -> Any:
    """The installed plugins (no SWIFTCORE_PLUGINS from the environment)."""
    import swiftcore

    return swiftcore.load_plugins(env={})


@pytest.fixture(scope="session")
def held_out() -> list[dict[str, Any]]:
    """Greeting prompts for names neither the target nor the draft trained on."""
    return [greeting(name) for name in HELD_OUT_NAMES]


@pytest.fixture(scope="session")
def reply_tokens() -> int:
    """How many tokens a generation runs to at most (a whole reply and its end token)."""
    return REPLY_TOKENS


@pytest.fixture(scope="session")
def greetings_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The training chats: greet each of :data:`TRAIN_NAMES` with :data:`REPLY`."""
    rows = [
        {"messages": [*greeting(n)["messages"], {"role": "assistant", "content": REPLY.format(n)}]} for n in TRAIN_NAMES
    ]
    path = tmp_path_factory.mktemp("eagle3-data") / "greetings.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="session")
def target_dir(
    tiny_model_dir: Callable[[str], Path], greetings_file: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """The tiny Qwen3.5 checkpoint after ``swiftcore train --tuner full`` on the greetings: the drafts' target."""
    from swiftcore_testing import run_cli

    run = tmp_path_factory.mktemp("eagle3-target") / "run"
    run_cli(
        "train", "--model", str(tiny_model_dir("qwen3_5")), "--dataset", str(greetings_file),
        "--output-dir", str(run), "--tuner", "full", "--max-steps", str(TARGET_STEPS), "--batch-size", "8",
        "--learning-rate", "3e-3", "--lr-scheduler", "constant", "--save-steps", str(TARGET_STEPS), "--no-plot",
        "--seed", "0",
    )  # fmt: skip
    return run / f"checkpoint-{TARGET_STEPS}"


@pytest.fixture(scope="session")
def target(target_dir: Path, plugins: Any) -> Any:
    """The target, loaded as swiftcore loads it (eval mode, float32)."""
    from swiftcore.api.models import load_model, resolve_model_spec

    spec = resolve_model_spec(str(target_dir), plugins)
    return load_model(spec, str(target_dir), plugins).eval()


@pytest.fixture(scope="session")
def encoder(tiny_model_dir: Callable[[str], Path], plugins: Any) -> Any:
    """The :class:`~swiftcore.api.template.SampleEncoder` of Qwen3.5's default template, as training encodes (the
    fine-tuned target keeps the tiny checkpoint's tokenizer)."""
    from swiftcore.api.models import load_tokenizer, resolve_model_spec
    from swiftcore.api.template import SampleEncoder, get_template

    base = str(tiny_model_dir("qwen3_5"))
    spec = resolve_model_spec(base, plugins)
    return SampleEncoder(get_template(spec.default_template, plugins), load_tokenizer(base))


@pytest.fixture(scope="session")
def greedy(target: Any, encoder: Any) -> Callable[[dict[str, Any], int], list[int]]:
    """``greedy(record, n)``: the target's plain greedy continuation (transformers' ``generate``) of the record's
    prompt, at most ``n`` tokens."""
    import torch

    def get(record: dict[str, Any], n: int) -> list[int]:
        ids, _ = encoder.prompt(record)
        with torch.no_grad():
            out = target.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False)
        return out[0, len(ids) :].tolist()

    return get


@pytest.fixture(scope="session")
def trained_draft(target_dir: Path, greetings_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``swiftcore train --recipe eagle3`` for the target on the greetings: the draft's directory."""
    from swiftcore_testing import run_cli

    out = tmp_path_factory.mktemp("eagle3-run") / "run"
    run_cli(
        "train", "--recipe", "eagle3", "--model", str(target_dir), "--dataset", str(greetings_file),
        "--output-dir", str(out), "--max-steps", str(DRAFT_STEPS), "--batch-size", "8", "--learning-rate", "3e-3",
        "--lr-scheduler", "constant", "--logging-steps", "10", "--no-plot", "--seed", "0",
    )  # fmt: skip
    return out / f"checkpoint-{DRAFT_STEPS}"
