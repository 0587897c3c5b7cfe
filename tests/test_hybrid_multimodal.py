"""One dataset of text-only, image and audio rows trains in one run, and what each kind teaches is learnt (#50).

Per multimodal family, one JSONL interleaves three kinds of rows (Gemma 4: all three; Qwen3.5: text and image):

- text-only rows whose answer depends only on the text ("Name animal one." -> "cat", "... two." -> "dog");
- image rows with the same prompt text, whose answer depends only on the image (a red or a blue 32x32 image with
  a little per-image noise -> "red" / "blue");
- audio rows with the same prompt text, whose answer depends only on the clip (half a second of a 300 Hz or a
  2,400 Hz tone, random phase, a little noise -> "low" / "high").

Half the media rows use content parts (``{"type": "image", "image": PATH}``), half ms-swift's ``<image>`` /
``<audio>`` tags with ``images`` / ``audios`` columns. ``swiftcore train`` (in-process) trains once per family;
its batches mix the kinds (rows with and without pixel values or audio features in one padded batch). Then
``swiftcore infer`` on one mixed file of held-out images and clips (new noise, new phases) and the trained text
prompts answers each row with one of its kind's answers; the kinds in :data:`LEARNT` exactly right, which the
untrained base does not. A model that ignored the image could answer at most half the image rows right: the same
prompt text has two answers. Qwen3.5 learns text and images; the tiny Gemma 4 learns text, and its media rows'
answer sets, but not (in 40 steps) which image or clip it was given (see :data:`LEARNT`): a finding, not asserted.

``--packing`` / ``--padding-free`` with media rows are refused (packed rows would need per-sample media tensors and
M-RoPE position ids); the refusal names the flag, how many samples carry media, and the fix. In their place, the
loss of one padded batch mixing the three kinds equals the token-weighted mean of each row's loss alone (1e-5).

Gemma 4's checkpoint here asks its image processor for 70 soft tokens per image (one of the budgets Gemma 4
supports: 70, 140, 280, 560, 1120) instead of the default 280, so an image row costs a quarter of the vision
tower and the sequence; the audio tower and everything else are the tiny checkpoint's.
"""

from __future__ import annotations

import json
import shutil
import wave
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import COLOURS, colour_image, run_cli

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")

pytestmark = pytest.mark.slow  # two `swiftcore train` runs and four `swiftcore infer` runs

RATE = 16_000
TEXT = {"Name animal one.": "cat", "Name animal two.": "dog"}
PITCHES = {"low": 300.0, "high": 2400.0}
QUESTION = {"image": "What colour is this?", "audio": "What pitch is this?"}
KINDS = {"gemma4": ("text", "image", "audio"), "qwen3_5": ("text", "image")}
# The kinds whose answers each family's tiny checkpoint is asserted to take from the row itself (the text, the
# image, the clip). Gemma 4's image and audio rows train in the same batches (their loss is checked below, and their
# answers must be their kind's: "red" / "blue", "low" / "high"), but in 40 steps the tiny random Gemma 4 learnt to
# ignore its media tokens: before training a red and a blue image move the answer position's last hidden state by
# 0.98 (relative; two red images 0.06), after it by 0.013; it then answered every image alike (also with black /
# white images, or with the projector frozen), and the held-out clips alike in this data.
LEARNT = {"gemma4": ("text",), "qwen3_5": ("text", "image")}
ANSWERS = {"text": set(TEXT.values()), "image": set(COLOURS), "audio": set(PITCHES)}
ROWS_PER_KIND = 8
# Measured on these tiny checkpoints (fp32, seed 0, batch 8, one torch thread): the loss falls more than 15-fold
# (Gemma 4: 4.38 -> 0.188; with two threads 0.131; Qwen3.5 with two threads: 4.22 -> 0.058). Gemma 4: full
# tuning, lr 3e-3 cosine; Qwen3.5: LoRA, lr 2e-3 as test_served_image_task.py.
TRAIN = {
    "gemma4": ("--tuner", "full", "--learning-rate", "3e-3", "--lr-scheduler", "cosine", "--max-steps", "40"),
    "qwen3_5": ("--tuner", "lora", "--learning-rate", "2e-3", "--lr-scheduler", "constant", "--max-steps", "30"),
}


def _wav(path: Path, freq: float, seed: int) -> Path:
    rng = np.random.RandomState(seed)
    t = np.arange(RATE // 2) / RATE
    wave_form = 0.4 * np.sin(2 * np.pi * freq * t + rng.rand() * 2 * np.pi) + 0.02 * rng.randn(len(t))
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes((wave_form * 32767).astype(np.int16).tobytes())
    return path


def _rows(kind: str, folder: Path, seeds: range) -> list[tuple[dict[str, Any], str]]:
    """``(record without its answer, answer)`` per seed; the answers alternate, and so do the two media formats."""
    out = []
    for seed in seeds:
        index = seed % 2
        if kind == "text":
            question, answer = list(TEXT.items())[index]
            out.append(({"messages": [{"role": "user", "content": question}]}, answer))
            continue
        answer = list(COLOURS if kind == "image" else PITCHES)[index]
        if kind == "image":
            path = colour_image(folder / f"{answer}-{seed}.png", answer, seed)
        else:
            path = _wav(folder / f"{answer}-{seed}.wav", PITCHES[answer], seed)
        if seed % 4 < 2:
            parts = [{"type": kind, kind: str(path)}, {"type": "text", "text": QUESTION[kind]}]
            out.append(({"messages": [{"role": "user", "content": parts}]}, answer))
        else:  # ms-swift style: a tag in the text and the path in the images / audios column
            user = {"role": "user", "content": f"<{kind}>{QUESTION[kind]}"}
            out.append(({"messages": [user], f"{kind}s": [str(path)]}, answer))
    return out


def _with_answer(record: dict[str, Any], answer: str) -> dict[str, Any]:
    return {**record, "messages": [*record["messages"], {"role": "assistant", "content": answer}]}


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def _base(family: str, tiny_model_dir: Callable[[str], Path], work: Path) -> Path:
    """The family's tiny checkpoint; Gemma 4's copy asks for 70 image soft tokens (module docstring)."""
    if family != "gemma4":
        return tiny_model_dir(family)
    base = work / "base"
    shutil.copytree(tiny_model_dir(family), base)
    config = json.loads((base / "processor_config.json").read_text())
    config["image_processor"]["max_soft_tokens"] = config["image_seq_length"] = 70
    (base / "processor_config.json").write_text(json.dumps(config, indent=2))
    return base


@pytest.fixture(scope="module")
def hybrid_data(tiny_model_dir: Callable[[str], Path], tmp_path_factory: pytest.TempPathFactory) -> Callable:
    """``hybrid_data(family)``: its base checkpoint, hybrid training file and held-out questions, made once."""
    made: dict[str, dict[str, Any]] = {}

    def get(family: str) -> dict[str, Any]:
        if family not in made:
            work = tmp_path_factory.mktemp(f"hybrid-{family}")
            kinds = KINDS[family]
            train = {kind: _rows(kind, work, range(ROWS_PER_KIND)) for kind in kinds}
            # Interleaved: text, image, audio, text, image, audio ...
            records = [_with_answer(*train[kind][i]) for i in range(ROWS_PER_KIND) for kind in kinds]
            held = {kind: _rows(kind, work, range(100, 104)) for kind in kinds if kind != "text"}
            held["text"] = train["text"][:2]  # the text task has nothing to generalise from: its trained prompts
            made[family] = {
                "base": _base(family, tiny_model_dir, work),
                "data": _write(work / "train.jsonl", records),
                "work": work,
                "held": held,
            }
        return made[family]

    return get


@pytest.fixture(scope="module")
def hybrid(hybrid_data: Callable[[str], dict]) -> Callable[[str], dict]:
    """``hybrid(family)``: :func:`hybrid_data` plus the run's losses and the trained model's arguments; each family is
    trained once per module."""
    done: dict[str, dict[str, Any]] = {}

    def get(family: str) -> dict[str, Any]:
        if family in done:
            return done[family]
        data = hybrid_data(family)
        run, base, steps = data["work"] / "run", str(data["base"]), TRAIN[family][-1]
        import torch

        # One torch thread, as under pytest-xdist: the run's float sums, and so its losses, are the same in a serial
        # run (measured: two threads ended Gemma 4 at 0.131, one thread at 0.188).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            run_cli(
                "train", "--model", base, "--dataset", str(data["data"]), *TRAIN[family], "--batch-size", "8",
                "--save-steps", steps, "--logging-steps", "5", "--max-length", "512", "--seed", "0", "--no-plot",
                "--output-dir", str(run),
            )  # fmt: skip
        finally:
            torch.set_num_threads(threads)
        logs = (run / "logs.jsonl").read_text().splitlines()
        checkpoint = str(run / f"checkpoint-{steps}")
        full = "full" in TRAIN[family]
        done[family] = {
            **data,
            "losses": [json.loads(line)["loss"] for line in logs if '"loss"' in line],
            "trained": ("--model", checkpoint) if full else ("--model", base, "--adapter", checkpoint),
        }
        return done[family]

    return get


def _answers(work: Path, name: str, held: dict[str, list], *model: str) -> dict[str, list[str]]:
    """Each kind's answers to its held-out questions, asked through one mixed ``swiftcore infer --input`` file."""
    order = [(kind, record) for kind, rows in held.items() for record, _ in rows]
    questions = _write(work / f"{name}-questions.jsonl", [record for _, record in order])
    answers = work / f"{name}-answers.jsonl"
    run_cli("infer", *model, "--input", str(questions), "--output", str(answers), "--max-new-tokens", "4")
    rows = [json.loads(line) for line in answers.read_text().splitlines()]
    assert [row.get("error") for row in rows] == [None] * len(order)
    out: dict[str, list[str]] = {kind: [] for kind in held}
    for (kind, _), row in zip(order, rows, strict=True):
        out[kind].append(row["response"].strip())
    return out


@pytest.mark.parametrize("family", list(KINDS))
def test_each_kind_of_a_hybrid_dataset_is_learnt(family: str, hybrid: Callable[[str], dict]) -> None:
    run = hybrid(family)
    losses = run["losses"]
    assert losses[-1] < losses[0] / 15, f"{family} did not learn the hybrid data: {losses}"
    expected = {kind: [answer for _, answer in rows] for kind, rows in run["held"].items()}
    for kind, answers in expected.items():
        assert len(set(answers)) == 2, kind  # both answers asked: same prompt text, two different media
    trained = _answers(run["work"], "trained", run["held"], *run["trained"])
    untrained = _answers(run["work"], "untrained", run["held"], "--model", str(run["base"]))
    for kind in KINDS[family]:
        assert set(trained[kind]) <= ANSWERS[kind], f"{family} {kind}: trained answers {trained[kind]}"
    for kind in LEARNT[family]:
        assert trained[kind] == expected[kind], f"{family} {kind}: trained answers {trained[kind]}"
        assert untrained[kind] != expected[kind], f"{family} {kind}: the untrained base already answers them"


@pytest.mark.parametrize("flag", ["--packing", "--padding-free"])
def test_packing_media_rows_is_refused_clearly(flag: str, hybrid_data: Callable[[str], dict], tmp_path: Path) -> None:
    from click.testing import CliRunner

    from swiftcore.api import SwiftcoreError
    from swiftcore.api.cli import cli

    run = hybrid_data("gemma4")
    args = ["train", "--model", str(run["base"]), "--dataset", str(run["data"]), "--max-steps", "1", flag]
    with pytest.raises(SwiftcoreError) as refused:
        CliRunner().invoke(cli, [*args, "--output-dir", str(tmp_path / "run")], catch_exceptions=False)
    message = str(refused.value)
    assert message.startswith(f"{flag}: 16 of 24 samples carry media (images, audio or video)"), message
    assert message.endswith(f"train without {flag}: batches mixing text and media rows are then padded")
    assert not (tmp_path / "run").exists()  # refused before anything was written


@pytest.mark.parametrize("family", list(KINDS))
def test_a_padded_batch_of_mixed_rows_has_each_rows_own_loss(family: str, hybrid_data: Callable[[str], dict]) -> None:
    """One collated batch of a text, an image (and an audio) row: its loss is the token-weighted mean of each row's
    loss alone, so rows without media beside rows with media (and the two media types together) lose nothing."""
    from swiftcore_media import prepare_media
    from swiftcore_train import TrainConfig, encode_records

    import swiftcore
    from swiftcore.models import load_model, load_tokenizer, resolve_model_spec
    from swiftcore.template import get_template

    run = hybrid_data(family)
    plugins = swiftcore.load_plugins(env={})
    base = str(run["base"])
    spec = resolve_model_spec(base, plugins)
    tokenizer = load_tokenizer(base)
    media = prepare_media(spec, base, tokenizer)
    records = [json.loads(line) for line in run["data"].read_text().splitlines()][: len(KINDS[family])]
    cfg = TrainConfig(model=base, dataset=("unused",), max_length=512)
    samples = encode_records(records, get_template(spec.default_template, plugins), tokenizer, cfg, media=media)
    model = load_model(spec, base, plugins, torch_dtype="float32").eval()

    def loss_and_tokens(batch_samples: list[dict[str, Any]]) -> tuple[float, int]:
        batch = media.collate(batch_samples)
        with torch.no_grad():
            loss = model(**batch).loss
        return float(loss), int((batch["labels"][:, 1:] != -100).sum())

    mixed, _ = loss_and_tokens(samples)
    alone = [loss_and_tokens([sample]) for sample in samples]
    reference = sum(loss * n for loss, n in alone) / sum(n for _, n in alone)
    assert abs(mixed - reference) <= 1e-5 * max(1.0, abs(reference)), (mixed, alone)
    lengths = {len(s["input_ids"]) for s in samples}
    assert len(lengths) == len(samples)  # the rows differ in length: the batch is padded
