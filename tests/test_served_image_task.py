"""The image matters when served: a model trained on a task only the image decides answers it through deploy.

The prompt is the same for every row ("What colour is this?"); only the image (red or blue, with a little
per-image noise so held-out images are new ones) says whether the answer is "red" or "blue". A model that ignores
the image can answer at most half of the held-out images right. A LoRA adapter is trained on the tiny Qwen3.5 by
``swiftcore train``; then, on held-out images:

- ``swiftcore infer`` (the offline path) answers every image with its colour, and the untrained base does not;
- ``swiftcore deploy`` with the real ``openai`` client (the image as an ``image_url`` data URL) gives the same
  answers, so two different images give the two trained answers through the server too.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import deploy_process, run_cli, user_env

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.slow

COLOURS = {"red": (220, 30, 30), "blue": (30, 30, 220)}
QUESTION = "What colour is this?"
API_KEY = "served-image-key"
SERVED = "tuned"
# Measured on the tiny Qwen3.5 (fp32, seed 0): 16 rows, batch 8, lr 2e-3: the loss falls from ~3.6 to < 0.1.
STEPS = 30


def _png(rgb: tuple[int, int, int], seed: int) -> bytes:
    """A 32x32 PNG of ``rgb`` with a little per-image noise."""
    import random

    from PIL import Image

    rng = random.Random(seed)
    image = Image.new("RGB", (32, 32))
    image.putdata([tuple(max(0, min(255, c + rng.randint(-20, 20))) for c in rgb) for _ in range(32 * 32)])
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _images(folder: Path, seeds: range) -> list[tuple[Path, str]]:
    """One image per seed, the colours alternating: ``(path, colour)``."""
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for seed in seeds:
        colour = list(COLOURS)[seed % 2]
        path = folder / f"{colour}-{seed}.png"
        path.write_bytes(_png(COLOURS[colour], seed))
        out.append((path, colour))
    return out


def _user(path: Path) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "image", "image": str(path)}, {"type": "text", "text": QUESTION}]}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A tiny Qwen3.5 and a LoRA adapter trained on the colour task; the held-out images."""
    work = tmp_path_factory.mktemp("served-image")
    base = work / "base"
    run_cli("make-tiny", "qwen3_5", str(base))
    rows = [
        {"messages": [_user(path), {"role": "assistant", "content": colour}]}
        for path, colour in _images(work / "train", range(16))
    ]
    data = work / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = work / "run"
    run_cli(
        "train", "--model", str(base), "--dataset", str(data), "--tuner", "lora", "--learning-rate", "2e-3",
        "--lr-scheduler", "constant", "--batch-size", "8", "--max-steps", str(STEPS), "--save-steps", str(STEPS),
        "--logging-steps", "5", "--seed", "0", "--no-plot", "--output-dir", str(run),
    )  # fmt: skip
    losses = [json.loads(line)["loss"] for line in (run / "logs.jsonl").read_text().splitlines() if '"loss"' in line]
    assert losses[-1] < 0.3, f"the adapter did not learn the colours: losses {losses}"
    return {"base": base, "adapter": run / f"checkpoint-{STEPS}", "held": _images(work / "held", range(100, 108))}


def _infer(work: Path, name: str, held: list[tuple[Path, str]], *model_args: str) -> list[str]:
    questions = work / f"{name}-questions.jsonl"
    questions.write_text("".join(json.dumps({"messages": [_user(path)]}) + "\n" for path, _ in held))
    answers = work / f"{name}.jsonl"
    run_cli("infer", *model_args, "--input", str(questions), "--output", str(answers), "--max-new-tokens", "4")
    return [json.loads(line)["response"] for line in answers.read_text().splitlines()]


@pytest.fixture(scope="module")
def offline(trained: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The adapter's answers to the held-out images by ``swiftcore infer``."""
    work = tmp_path_factory.mktemp("served-image-infer")
    model = ("--model", str(trained["base"]), "--adapter", str(trained["adapter"]))
    return _infer(work, "adapter", trained["held"], *model)


def test_the_offline_path_answers_what_the_image_says(
    trained: dict[str, Any], offline: list[str], tmp_path: Path
) -> None:
    expected = [colour for _, colour in trained["held"]]
    assert offline == expected, f"trained answers {offline}, images {expected}"
    untrained = _infer(tmp_path, "base", trained["held"], "--model", str(trained["base"]))
    assert untrained != expected, f"the untrained base already answers the colours: {untrained}"


@pytest.fixture(scope="module")
def client(trained: dict[str, Any]) -> Iterator[Any]:
    """``swiftcore deploy --model BASE --adapter DIR`` and an ``openai`` client for it."""
    env = user_env(SWIFTCORE_API_KEY=API_KEY)
    args = ("--model", str(trained["base"]), "--adapter", str(trained["adapter"]))
    with deploy_process(*args, served_model_name=SERVED, env=env) as (url, _):
        yield openai.OpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0, timeout=120)


def test_two_images_get_the_two_trained_answers_through_deploy(
    trained: dict[str, Any], offline: list[str], client: Any
) -> None:
    served = []
    for path, _ in trained["held"]:
        url = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
        content = [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": QUESTION}]
        reply = client.chat.completions.create(
            model=SERVED, messages=[{"role": "user", "content": content}], max_tokens=4, temperature=0
        )
        served.append(reply.choices[0].message.content)
    expected = [colour for _, colour in trained["held"]]
    assert set(expected) == set(COLOURS)  # both colours asked: the same prompt text, two different images
    assert served == expected, f"served answers {served}, images {expected}"
    assert served == offline  # the server's answers are the offline path's
