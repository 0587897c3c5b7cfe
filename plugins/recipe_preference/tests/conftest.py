"""Fixtures of swiftcore-recipe-preference's tests: tiny checkpoints (the repository's ``tiny_model_dir``, built
once per session), the plugin set, one torch thread, and a synthetic preference task."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def plugins() -> Any:
    """The installed plugins (no SWIFTCORE_PLUGINS from the environment)."""
    import swiftcore

    return swiftcore.load_plugins(env={})


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """One torch thread: the models are tiny and the machine is shared (thread-pool waits cost more than they
    save)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def write_jsonl(tmp_path: Path) -> Callable[..., Path]:
    """``write_jsonl(rows, name="pairs.jsonl")``: the rows as a JSONL file under ``tmp_path``."""

    def write(rows: list[Any], name: str = "pairs.jsonl") -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        return path

    return write


def _single_token_letters(tokenizer: Any, letters: str) -> list[str]:
    return [c for c in letters if len(tokenizer.tokenize(" " + c)) == 1]


@pytest.fixture(scope="session")
def vowel_task() -> Callable[..., tuple[list[dict], list[dict]]]:
    """``vowel_task(tokenizer)`` -> ``(train_rows, held_out_rows)`` of a synthetic preference task.

    The prompt asks for ``vowels`` or ``consonants``; the chosen reply is four letters of the asked kind, the
    rejected one four of the other kind. A random tiny model has no such preference. The held-out rows are
    fresh letter strings, each pair asked both ways (chosen and rejected swapped), so a model that ignores the
    prompt scores exactly 50% on them: the accuracy measures the rule, not a bias for some letters.
    """

    def build(tokenizer: Any, n_train: int = 64, n_held: int = 16, seed: int = 0) -> tuple[list[dict], list[dict]]:
        vowels = _single_token_letters(tokenizer, "aeiou")
        consonants = _single_token_letters(tokenizer, "bcdfgklmnprst")[: len(vowels) + 1]
        rng = random.Random(seed)

        def letters(pool: list[str]) -> str:
            return " ".join(rng.choice(pool) for _ in range(4))

        def row(asked: str, vowel_reply: str, consonant_reply: str) -> dict:
            chosen, rejected = (vowel_reply, consonant_reply) if asked == "vowels" else (consonant_reply, vowel_reply)
            return {
                "messages": [{"role": "user", "content": f"say {asked}"}, {"role": "assistant", "content": chosen}],
                "rejected_response": rejected,
            }

        kinds = [rng.choice(["vowels", "consonants"]) for _ in range(n_train)]
        train = [row(kind, letters(vowels), letters(consonants)) for kind in kinds]
        held = []
        for _ in range(n_held):
            v, c = letters(vowels), letters(consonants)
            held += [row("vowels", v, c), row("consonants", v, c)]
        return train, held

    return build


@pytest.fixture(scope="session")
def run_cli() -> Callable[..., str]:
    """The test kit's in-process CLI runner (``swiftcore_testing``; ``swiftcore.testing`` before the rename)."""
    try:
        from swiftcore_testing import run_cli as runner
    except ImportError:  # the kit's former home
        from swiftcore.testing.cli import run_cli as runner  # type: ignore[no-redef]
    return runner
