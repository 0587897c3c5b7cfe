"""Deterministic benchmark corpora generated like ``shared/reference/conversations.jsonl``.

The reference corpus (a copy ships as ``core/tests/fixtures/conversations.jsonl``) has ~40 rows:
text, system prompts, multi-turn, thinking on/off, tools with (parallel) tool calls, unicode and edge
cases, images and audio. The benchmarks need thousands of rows of the same kinds, identical for both
systems, so this module recombines the reference's own pieces with a seeded RNG.

Media rows are left out: ms-swift would open the image/audio files and run its processors, which
measures image decoding rather than template encoding. Standard library only: the ms-swift worker
(another virtual environment) reads the JSONL files this writes, it never imports this module.
"""

from __future__ import annotations

import copy
import itertools
import json
import random
from pathlib import Path
from typing import Any

__all__ = ["REFERENCE", "chat_corpus", "mixed_length_corpus", "prompt_corpus", "write_jsonl"]

REFERENCE = Path(__file__).resolve().parents[1] / "core" / "tests" / "fixtures" / "conversations.jsonl"


def _pieces(path: Path = REFERENCE) -> dict[str, list[Any]]:
    """The reusable parts of the reference corpus: Q/A pairs, system prompts, reasonings, tool rows."""
    pairs, systems, reasonings, tool_rows = [], set(), set(), []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        tags = set(row.get("tags", ()))
        if tags & {"image", "audio", "asr"}:
            continue
        if "tools" in row:
            tool_rows.append(row)
            continue
        messages = row["messages"]
        for message in messages:
            if message["role"] == "system" and message["content"]:
                systems.add(message["content"])
            if message.get("reasoning_content"):
                reasonings.add(message["reasoning_content"])
        for user, assistant in itertools.pairwise(messages):
            if user["role"] == "user" and assistant["role"] == "assistant":
                text = user["content"] if isinstance(user["content"], str) else user["content"][0]["text"]
                if assistant["content"]:
                    pairs.append((text, assistant["content"]))
    return {"pairs": sorted(set(pairs)), "systems": sorted(systems), "reasonings": sorted(reasonings),
            "tool_rows": tool_rows}


def chat_corpus(n: int, seed: int = 0, *, tools: bool = True) -> list[dict[str, Any]]:
    """``n`` conversations mixing the reference's kinds (text, system, multi-turn, thinking, tools).

    Each row's text is made unique with a ``(sample i)`` suffix so no tokenizer cache can help.

    Args:
        n: number of rows.
        seed: RNG seed; the same seed gives the same rows.
        tools: include tool-calling rows (copies of the reference's tool rows with varied cities).
    """
    rng = random.Random(seed)
    p = _pieces()
    kinds = ["single", "multi", "system", "thinking", "no_think"] + (["tools"] * 2 if tools else [])
    out = []
    for i in range(n):
        kind = rng.choice(kinds)
        if kind == "tools":
            row = copy.deepcopy(rng.choice(p["tool_rows"]))
            row.pop("tags", None)
            row.pop("id", None)
            row["messages"][1]["content"] += f" (sample {i})"
            out.append(row)
            continue
        turns = 1 if kind == "single" else rng.randint(2, 5)
        messages: list[dict[str, Any]] = []
        if kind in ("system", "thinking") or rng.random() < 0.3:
            messages.append({"role": "system", "content": rng.choice(p["systems"])})
        for t in range(turns):
            q, a = rng.choice(p["pairs"])
            messages.append({"role": "user", "content": f"{q} (sample {i}.{t})"})
            reply: dict[str, Any] = {"role": "assistant", "content": a}
            if kind == "thinking":
                reply["reasoning_content"] = rng.choice(p["reasonings"])
            messages.append(reply)
        row = {"messages": messages}
        if kind in ("thinking", "no_think"):
            row["chat_template_kwargs"] = {"enable_thinking": kind == "thinking"}
        out.append(row)
    return out


def mixed_length_corpus(n: int, seed: int = 0, *, max_turns: int = 24) -> list[dict[str, Any]]:
    """``n`` plain multi-turn chats whose lengths spread from one short turn to ``max_turns`` long ones.

    Lengths are drawn log-uniformly so most rows are short and a few are long: the shape of real SFT
    data, and the case where padding wastes the most compute (what packing removes).
    """
    rng = random.Random(seed)
    p = _pieces()
    out = []
    for i in range(n):
        turns = max(1, round(2 ** rng.uniform(0, max_turns.bit_length() - 1)))
        turns = min(turns, max_turns)
        out.append(one_chat(rng, p, i, turns))
    return out


def one_chat(rng: random.Random, pieces: dict[str, Any], index: int, turns: int) -> dict[str, Any]:
    """A chat of ``turns`` user/assistant turns from the reference corpus' ``pieces``, a system prompt with
    probability 1/2, each user turn made unique by ``(index.turn)``."""
    messages: list[dict[str, Any]] = []
    if rng.random() < 0.5:
        messages.append({"role": "system", "content": rng.choice(pieces["systems"])})
    for t in range(turns):
        q, a = rng.choice(pieces["pairs"])
        messages += [{"role": "user", "content": f"{q} ({index}.{t})"}, {"role": "assistant", "content": a}]
    return {"messages": messages}


def prompt_corpus(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` single-user-turn prompts of varied length for the inference benchmark."""
    rng = random.Random(seed)
    p = _pieces()
    out = []
    for i in range(n):
        words = " ".join(rng.choice(p["pairs"])[0] for _ in range(rng.randint(1, 6)))
        out.append({"messages": [{"role": "user", "content": f"Prompt {i}: {words}"}]})
    return out


def write_jsonl(rows: list[dict[str, Any]], path: Path) -> Path:
    """Write ``rows`` as JSON lines (UTF-8) and return ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path
