"""Video samples for Qwen3.5 without torchvision: decoded with PyAV, patched by transformers' own Qwen3-VL video
processor (its torchvision calls replaced, :mod:`swiftcore_media.video`), expanded with its per-frame-group
timestamps, trained on and refused when too long.

The videos are built here with PyAV: a few 32x32 frames of one grey level each, so every frame's pixels are known.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from swiftcore_media import MediaError, MediaLimitError, prepare_media
from swiftcore_testing import grey_video

import swiftcore
from swiftcore.template import IGNORE_INDEX, get_template

av = pytest.importorskip("av")

FPS = 4
#: Eight frames at 4 fps, grey levels 0, 30 ... 210: a 2 s clip whose frames are told apart by their level.
LEVELS = [30 * i for i in range(8)]


@pytest.fixture(scope="module")
def qwen(tiny_model_dir: Callable[[str], Path]) -> dict[str, Any]:
    """The tiny Qwen3.5 checkpoint, its tokenizer, template and media preparer, and the model (float32, eval)."""
    from swiftcore.models import load_model, load_tokenizer

    plugins = swiftcore.load_plugins(env={})
    spec = plugins.registry.get("model", "qwen3_5")
    model_dir = tiny_model_dir("qwen3_5")
    tokenizer = load_tokenizer(model_dir)
    return {
        "spec": spec,
        "dir": model_dir,
        "tokenizer": tokenizer,
        "template": get_template(spec.default_template, plugins),
        "preparer": prepare_media(spec, model_dir, tokenizer),
        "model": load_model(spec, model_dir, plugins, torch_dtype="float32").eval(),
    }


def _record(video: Any, answer: str = "bright", source: str = "videos.jsonl:1") -> dict[str, Any]:
    parts = [{"type": "video", "video": str(video)}, {"type": "text", "text": "Which way does it fade?"}]
    return {
        "messages": [{"role": "user", "content": parts}, {"role": "assistant", "content": answer}],
        "_source": source,
    }


def _expand(qwen: dict[str, Any], record: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    encoded = qwen["template"].encode(qwen["tokenizer"], record)
    return encoded, qwen["preparer"].expand(encoded, record)


def test_the_spec_takes_video_and_the_processor_has_a_torchvision_free_video_part(qwen) -> None:
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
    from transformers.utils import is_torchvision_available

    assert not is_torchvision_available()  # the point: none of this needs it
    assert "video" in qwen["spec"].modalities
    assert "video" in qwen["preparer"].modalities
    video_processor = qwen["preparer"].processor.video_processor
    assert isinstance(video_processor, Qwen3VLVideoProcessor)  # transformers' own class, torchvision calls replaced
    # The tiny checkpoint has no video settings: the tower's geometry comes from its image processor.
    image_processor = qwen["preparer"].processor.image_processor
    for key in ("patch_size", "temporal_patch_size", "merge_size"):
        assert getattr(video_processor, key) == getattr(image_processor, key), key


def test_a_video_sample_is_what_transformers_makes_of_it(qwen, tmp_path: Path) -> None:
    """Placeholders, timestamps and pixels of a prepared video row against transformers' own functions and the model."""
    from transformers.models.qwen3_vl.processing_qwen3_vl import Qwen3VLProcessor

    video = grey_video(tmp_path / "fade.mp4", LEVELS)
    encoded, sample = _expand(qwen, _record(video))
    processor, tokenizer, model = qwen["preparer"].processor, qwen["tokenizer"], qwen["model"]
    video_id = model.config.video_token_id
    grid = sample["video_grid_thw"]
    merge = processor.video_processor.merge_size
    grid_t, grid_h, grid_w = grid[0].tolist()

    # Frames: the processor's fps (2) over a 2 s clip is 4 frames, its min_frames; np.linspace over the 8 frames
    # picks 0, 2, 5, 7; temporal patches of 2 make 2 groups, stamped with the mean time of their two frames.
    assert grid_t == 2
    indices = np.linspace(0, len(LEVELS) - 1, 4).round().astype(int).tolist()
    assert indices == [0, 2, 5, 7]
    stamps = Qwen3VLProcessor._calculate_timestamps(processor, list(indices), FPS, 2)
    assert [f"{t:.1f}" for t in stamps] == ["0.2", "1.5"]  # (0 + 2) / 2 / 4 fps = 0.25 s, (5 + 7) / 2 / 4 = 1.5 s
    per_group = grid_h * grid_w // merge**2
    # transformers (5.x) replaces the template's <|video_pad|> and keeps the template's own wrapper around it.
    expected = (
        "<|vision_start|>"
        + "".join(f"<{t:.1f} seconds><|vision_start|>" + "<|video_pad|>" * per_group + "<|vision_end|>" for t in stamps)
        + "<|vision_end|>"
    )
    (media,) = encoded.media
    inserted = len(sample["input_ids"]) - len(encoded.input_ids) + (media.end - media.start)
    span = sample["input_ids"][media.start : media.start + inserted]
    assert tokenizer.decode(span, skip_special_tokens=False) == expected
    assert set(sample["labels"][media.start : media.start + inserted]) == {IGNORE_INDEX}
    assert sample["input_ids"][media.start + inserted :] == encoded.input_ids[media.end :]

    # Placeholder count = the grid's patches / merge**2 = the rows the vision tower emits for the video.
    count = sample["input_ids"].count(video_id)
    assert count == int(grid.prod()) // merge**2 == grid_t * per_group
    batch = qwen["preparer"].collate([sample])
    with torch.no_grad():
        rows = model.model.get_video_features(batch["pixel_values_videos"], batch["video_grid_thw"]).pooler_output
    assert sum(r.shape[0] for r in rows) == count
    # mm_token_type_ids mark the video tokens 2, as Qwen3.5's get_rope_index reads them: one run per frame group.
    types = sample["mm_token_type_ids"]
    assert [i for i, t in enumerate(types) if t == 2] == [i for i, t in enumerate(sample["input_ids"]) if t == video_id]
    position_ids, _ = model.model.get_rope_index(
        batch["input_ids"], batch["mm_token_type_ids"], video_grid_thw=batch["video_grid_thw"]
    )
    video_positions = position_ids[:, 0, torch.tensor(types) == 2]
    assert video_positions.shape == (3, count)
    # Within each group the temporal position is one value and the spatial ones span the merged grid.
    for g in range(grid_t):
        block = video_positions[:, g * per_group : (g + 1) * per_group]
        assert block[0].unique().numel() == 1
        assert block[1].unique().numel() == grid_h // merge and block[2].unique().numel() == grid_w // merge

    # Pixels: each patch row is (channel, time-in-group, 16, 16); a solid frame resizes to itself, so group g's
    # rows hold frames indices[2g] and indices[2g + 1] normalised by the processor's mean and std (0.5).
    pixels = sample["pixel_values_videos"].reshape(grid_t, grid_h * grid_w, 3, 2, -1)
    for g in range(grid_t):
        for t in range(2):
            level = LEVELS[indices[2 * g + t]]
            assert pixels[g, :, :, t].mean().item() == pytest.approx((level / 255 - 0.5) / 0.5, abs=0.04), (g, t)

    with torch.no_grad():
        out = model(**batch)
    assert torch.isfinite(out.loss)


def _reference_loss(model_dir: Path, batch: dict[str, Any]) -> float:
    """A plain forward of transformers' class on ``batch``'s tensors, and its own shifted cross-entropy."""
    from transformers import Qwen3_5ForConditionalGeneration

    model = Qwen3_5ForConditionalGeneration.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    with torch.no_grad():
        logits = model(**inputs).logits
    labels = batch["labels"]
    return torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1), ignore_index=IGNORE_INDEX
    ).item()


def test_the_sft_loss_on_video_rows_is_a_plain_forwards_and_depends_on_the_video(
    qwen, tmp_path: Path, one_thread: None
) -> None:
    """``swiftcore train``'s first logged loss on two video rows (one batch, LoRA: the base model at step 1) equals
    a plain transformers forward on the tensors the preparer builds; the rows with their videos swapped lose
    differently."""
    from swiftcore_testing import run_cli

    fade_in = grey_video(tmp_path / "in.mp4", LEVELS)
    fade_out = grey_video(tmp_path / "out.mp4", LEVELS[::-1])
    records = [_record(fade_in, "bright", "a:1"), _record(fade_out, "dark", "a:2")]
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "_source"}) + "\n" for r in records))
    run = tmp_path / "run"
    run_cli(
        "train", "--model", str(qwen["dir"]), "--dataset", str(data), "--tuner", "lora", "--max-steps", "1",
        "--batch-size", "2", "--logging-steps", "1", "--max-length", "512", "--seed", "0", "--no-plot",
        "--output-dir", str(run),
    )  # fmt: skip
    logged = [json.loads(line)["loss"] for line in (run / "logs.jsonl").read_text().splitlines() if '"loss"' in line]

    preparer = qwen["preparer"]
    samples = [_expand(qwen, r)[1] for r in records]
    reference = _reference_loss(qwen["dir"], preparer.collate(samples))
    assert logged[0] == pytest.approx(reference, rel=1e-5, abs=1e-6)

    # The same two rows, their videos swapped: the text is the same, only the pixels differ.
    swapped = [_record(fade_out, "bright"), _record(fade_in, "dark")]
    other = _reference_loss(qwen["dir"], preparer.collate([_expand(qwen, r)[1] for r in swapped]))
    assert abs(other - reference) > 1e-4, (other, reference)


def test_a_too_long_video_is_refused_from_its_header_naming_the_item(qwen, tmp_path: Path) -> None:
    # Four frames at one frame per 300 s: a few KB whose header says 20 minutes, over the default 600 s.
    long = grey_video(tmp_path / "long.mp4", [10, 20, 30, 40], fps=Fraction(1, 300))
    record = _record(long, source="videos.jsonl:7")
    with pytest.raises(MediaLimitError) as refused:
        _expand(qwen, record)
    assert str(refused.value) == "videos.jsonl:7: video 0: 1200.0 s of video, over the limit of 600 s"


def test_unreadable_videos_are_clear_errors(qwen, tmp_path: Path) -> None:
    (tmp_path / "junk.mp4").write_bytes(b"not a video at all")
    with pytest.raises(MediaError, match=r"^videos.jsonl:1: video 0: cannot read '.*junk.mp4' as a video"):
        _expand(qwen, _record(tmp_path / "junk.mp4"))
    with pytest.raises(MediaError, match=r"video 0: file '.*missing.mp4' not found; fix the path"):
        _expand(qwen, _record(tmp_path / "missing.mp4"))


def test_load_video_bounds_hold_before_decoding(qwen, tmp_path: Path) -> None:
    from swiftcore_media import load_video

    video_processor = qwen["preparer"].processor.video_processor
    clip = grey_video(tmp_path / "clip.mp4", LEVELS, size=48)
    frames, metadata = load_video(clip.read_bytes(), video_processor, "clip")  # bytes work as paths do
    assert frames.shape == (4, 48, 48, 3) and metadata.frames_indices.tolist() == [0, 2, 5, 7]
    with pytest.raises(MediaLimitError, match=r"^clip: 2.0 s of video, over the limit of 1.5 s$"):
        load_video(clip, video_processor, "clip", max_seconds=1.5)
    with pytest.raises(MediaLimitError, match=r"^clip: 48x48 pixels per frame, over the limit of 2000 pixels"):
        load_video(clip, video_processor, "clip", max_pixels=2000)


def test_a_parts_fps_and_max_frames_choose_the_frames(qwen, tmp_path: Path) -> None:
    """``fps`` / ``max_frames`` on a video part (as qwen_vl_utils writes them) sample the frames the model sees."""
    from swiftcore_media import load_video

    levels = [10 * i for i in range(16)]  # 4 s at 4 fps
    video = grey_video(tmp_path / "clip.mp4", levels)
    video_processor = qwen["preparer"].processor.video_processor

    def sampled(**controls: Any) -> tuple[list[int], int, str]:
        """The frame indices, the grid's temporal patches and the prompt of the part with ``controls``."""
        record = _record(video)
        record["messages"][0]["content"][0].update(controls)
        _, sample = _expand(qwen, record)
        _, metadata = load_video(video, video_processor, "clip", **controls)
        # Each temporal patch of 2 frames holds the two frames' grey levels (normalised: mean and std 0.5).
        grid_t, grid_h, grid_w = sample["video_grid_thw"][0].tolist()
        pixels = sample["pixel_values_videos"].reshape(grid_t, grid_h * grid_w, 3, 2, -1)
        means = [pixels[g, :, :, t].mean().item() for g in range(grid_t) for t in (0, 1)]
        seen = [round((m * 0.5 + 0.5) * 255 / 10) for m in means]
        indices = metadata.frames_indices.tolist()
        assert seen[: len(indices)] == indices, (seen, indices)  # the pixels are those frames' (level 10 x index)
        text = qwen["tokenizer"].decode(sample["input_ids"])
        return indices, grid_t, text

    default, grid, prompt = sampled()
    assert default == [0, 2, 4, 6, 9, 11, 13, 15] and grid == 4  # the processor's 2 fps over 4 s
    one_fps, grid, slow = sampled(fps=1)
    assert one_fps == [0, 5, 10, 15] and grid == 2 and slow.count(" seconds>") == 2 < prompt.count(" seconds>")
    six, grid, _ = sampled(max_frames=6)
    assert six == [0, 3, 6, 9, 12, 15] and grid == 3
    every, grid, _ = sampled(fps=4, max_frames=12)
    assert len(every) == 12 and grid == 6
    assert sampled(fps=8)[0] == list(range(16))  # no more frames than the video has

    refusals = [
        ({"max_frames": 100}, "video 0: max_frames 100 is above the 64 frames this model's video processor samples"),
        ({"max_frames": 2.5}, "video 0: max_frames must be a whole number of frames, got 2.5"),
        ({"fps": 0}, "video 0: fps must be a positive number, got 0"),
        ({"max_pixels": 4096}, "video 0: max_pixels does not apply to video (its controls: fps, max_frames)"),
    ]
    for controls, message in refusals:
        record = _record(video)
        record["messages"][0]["content"][0].update(controls)
        with pytest.raises(MediaError) as refused:
            _expand(qwen, record)
        assert str(refused.value).startswith("videos.jsonl:1: " + message), str(refused.value)


def _fade(path: Path, rising: bool, seed: int) -> Path:
    """Eight frames fading between a dark and a bright level (both a little random): up when ``rising``."""
    rng = np.random.RandomState(seed)
    dark, bright = int(rng.randint(10, 50)), int(rng.randint(200, 246))
    levels = np.linspace(dark, bright, len(LEVELS)).round().astype(int).tolist()
    return grey_video(path, levels if rising else levels[::-1])


@pytest.mark.slow  # a 30-step `swiftcore train` and two `swiftcore infer` runs
def test_the_order_of_frames_is_learnt(qwen, tmp_path: Path, one_thread: None) -> None:
    """Fading in -> "bright", fading out -> "dark": both kinds hold the same grey levels, so only the order of the
    frames (which frames share a temporal patch, and which group comes first) tells them apart. After LoRA training
    through ``swiftcore train``, ``swiftcore infer`` answers held-out videos (new levels) right; the untrained model
    does not."""
    from swiftcore_testing import run_cli

    def rows(seeds: range) -> list[tuple[dict[str, Any], str]]:
        out = []
        for seed in seeds:
            answer = "bright" if seed % 2 == 0 else "dark"
            video = _fade(tmp_path / f"{answer}-{seed}.mp4", answer == "bright", seed)
            parts = [{"type": "video", "video": str(video)}, {"type": "text", "text": "Which way does it fade?"}]
            out.append(({"messages": [{"role": "user", "content": parts}]}, answer))
        return out

    def write(path: Path, records: list[dict[str, Any]]) -> Path:
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        return path

    train = [{**r, "messages": [*r["messages"], {"role": "assistant", "content": a}]} for r, a in rows(range(16))]
    held = rows(range(100, 104))
    expected = [answer for _, answer in held]
    run = tmp_path / "run"
    run_cli(
        "train", "--model", str(qwen["dir"]), "--dataset", str(write(tmp_path / "train.jsonl", train)),
        "--tuner", "lora", "--learning-rate", "2e-3", "--lr-scheduler", "constant", "--max-steps", "30",
        "--batch-size", "8", "--save-steps", "30", "--logging-steps", "5", "--max-length", "512", "--seed", "0",
        "--no-plot", "--output-dir", str(run),
    )  # fmt: skip
    losses = [json.loads(line)["loss"] for line in (run / "logs.jsonl").read_text().splitlines() if '"loss"' in line]
    questions = write(tmp_path / "questions.jsonl", [record for record, _ in held])

    def answers(name: str, *model: str) -> list[str]:
        out = tmp_path / f"{name}.jsonl"
        run_cli("infer", *model, "--input", str(questions), "--output", str(out), "--max-new-tokens", "4")
        got = [json.loads(line) for line in out.read_text().splitlines()]
        assert [row.get("error") for row in got] == [None] * len(held)
        return [row["response"].strip() for row in got]

    trained = answers("trained", "--model", str(qwen["dir"]), "--adapter", str(run / "checkpoint-30"))
    untrained = answers("untrained", "--model", str(qwen["dir"]))
    assert losses[-1] < losses[0] / 10, losses
    assert trained == expected, (trained, losses)
    assert untrained != expected, untrained
