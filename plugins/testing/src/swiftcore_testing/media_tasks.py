"""Media the tests make: the colour task the image tests train and check (a small image of one of two colours,
whose answer only the image shows: the question's text is the same for both), and small grey videos.

``colour_turns`` writes the images and gives the user turns; ``held_out_accuracy`` asks ``swiftcore infer`` for the
answers to held-out turns and scores them; ``grey_video`` writes an MPEG-4 clip with PyAV. Importing this module
imports neither PIL nor numpy nor av nor torch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = [
    "COLOURS",
    "COLOUR_ANSWERS",
    "COLOUR_CHOICE",
    "colour_image",
    "colour_turns",
    "grey_video",
    "held_out_accuracy",
    "plain_completion_logits",
    "write_jsonl",
]

#: The two colours (RGB) the images have, red first.
COLOURS: dict[str, tuple[int, int, int]] = {"red": (220, 30, 30), "blue": (30, 30, 220)}
#: A question whose answer is a digit, so one generated token is the whole answer.
COLOUR_CHOICE = "Is this red (answer 1) or blue (answer 2)?"
#: The right answer to :data:`COLOUR_CHOICE` for each colour.
COLOUR_ANSWERS = {"red": "1", "blue": "2"}


def colour_image(path: Path, colour: str, seed: int) -> Path:
    """Write a 32x32 PNG of ``colour`` with a little noise drawn from ``seed`` (so held-out images are new ones)."""
    import numpy as np
    from PIL import Image

    noise = np.random.RandomState(seed).randint(-20, 21, size=(32, 32, 3))
    Image.fromarray(np.clip(np.array(COLOURS[colour]) + noise, 0, 255).astype(np.uint8)).save(path)
    return path


def colour_turns(folder: Path, seeds: range, question: str = COLOUR_CHOICE) -> list[tuple[dict[str, Any], str]]:
    """``(user turn, colour)`` for each seed, the colours alternating (red first): the turn is the image (written in
    ``folder``) and ``question``."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for seed in seeds:
        colour = list(COLOURS)[seed % 2]
        path = colour_image(folder / f"{colour}-{seed}.png", colour, seed)
        content = [{"type": "image", "image": str(path)}, {"type": "text", "text": question}]
        out.append(({"role": "user", "content": content}, colour))
    return out


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    """Write ``rows`` as a JSON-lines file at ``path``; ``path``."""
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def held_out_accuracy(work: Path, name: str, held: list[tuple[dict, str]], *model: str) -> tuple[float, list[str]]:
    """The share of ``held`` turns (:func:`colour_turns` of :data:`COLOUR_CHOICE`) whose greedy answer by
    ``swiftcore infer *model`` (two new tokens, in the thinking mode the checkpoint records) is the colour's
    :data:`COLOUR_ANSWERS`, and the replies; the files go in ``work`` under ``name``."""
    from swiftcore_testing.cli import run_cli

    questions = write_jsonl(work / f"{name}-q.jsonl", [{"messages": [user]} for user, _ in held])
    answers = work / f"{name}-a.jsonl"
    run_cli("infer", *model, "--input", str(questions), "--output", str(answers), "--max-new-tokens", "2")
    replies = [json.loads(line)["response"].strip() for line in answers.read_text().splitlines()]
    right = sum(reply == COLOUR_ANSWERS[colour] for reply, (_, colour) in zip(replies, held, strict=True))
    return right / len(held), replies


def grey_video(path: Path, levels: list[int], fps: Any = 4, size: int = 32) -> Path:
    """Write an MPEG-4 video at ``fps`` frames a second (an int or a ``Fraction``) of one solid grey ``size`` x
    ``size`` frame per level (0-255) of ``levels``, with PyAV; ``path``."""
    import av
    import numpy as np

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=fps)
        stream.width = stream.height = size
        stream.pix_fmt = "yuv420p"
        for level in levels:
            frame = av.VideoFrame.from_ndarray(np.full((size, size, 3), level, np.uint8), format="rgb24")
            container.mux(stream.encode(frame))
        container.mux(stream.encode())
    return path


def plain_completion_logits(model: Any, out: dict[str, Any], pixels: dict[str, Any] | None, temperature: float) -> Any:
    """The logits (float64, divided by ``temperature``) predicting each completion token of a rollout round ``out``
    (TRL's ``prompt_ids`` / ``prompt_mask`` / ``completion_ids`` / ``completion_mask``) by a plain forward of ``model``,
    with ``pixels`` (the processor's tensors; the image tokens marked in ``mm_token_type_ids``) or without an image:
    the reference the image RL tests hold the trainers' losses to."""
    import torch

    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
    mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
    kwargs = {}
    if pixels is not None:
        kwargs = {**pixels, "mm_token_type_ids": (ids == model.config.image_token_id).long()}
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, **kwargs).logits.double() / temperature
    keep = out["completion_ids"].size(1)
    return logits[:, -keep - 1 : -1]
