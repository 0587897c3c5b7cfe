"""Multimodal samples: placeholders expanded by the family's processor, batches the model trains on.

Each family's tiny checkpoint is built once per session (``tiny_model_dir``); media are generated here (a
PIL image, a sine wave written as WAV). The token counts are checked against what the model's own towers
emit, and a forward + backward pass of the collated batch must give a finite loss and language-model
gradients.
"""

from __future__ import annotations

import base64
import io
import math
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from swiftcore_media import MediaError, load_audio, load_image, media_tags_to_parts, prepare_media

import swiftcore
from swiftcore.template import IGNORE_INDEX, get_template

RATE = 16_000


def _write_wav(path: Path, seconds: float, rate: int = RATE, channels: int = 1, freq: float = 440.0) -> Path:
    t = np.arange(int(seconds * rate)) / rate
    tone = (0.5 * np.sin(2 * math.pi * freq * t) * 32767).astype(np.int16)
    frames = np.repeat(tone[:, None], channels, axis=1)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(frames.tobytes())
    return path


@pytest.fixture(scope="session")
def media_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two images of different sizes and two audio clips of different lengths."""
    root = tmp_path_factory.mktemp("media")
    grid = np.indices((64, 96)).sum(axis=0) % 256
    Image.fromarray(np.stack([grid, grid[::-1], 255 - grid], axis=-1).astype("uint8")).save(root / "wide.png")
    Image.fromarray(np.full((40, 40, 3), 200, dtype="uint8")).save(root / "small.jpg")
    return {
        "wide.png": root / "wide.png",
        "small.jpg": root / "small.jpg",
        "long.wav": _write_wav(root / "long.wav", 1.0),
        "short.wav": _write_wav(root / "short.wav", 0.4),
    }


@pytest.fixture(scope="session")
def plugins() -> swiftcore.Plugins:
    return swiftcore.load_plugins(env={})


@pytest.fixture(scope="session")
def family(plugins, tiny_model_dir):
    """``family("gemma4")`` -> (spec, model_dir, tokenizer, template, preparer), built once per name."""
    from swiftcore.models import load_tokenizer

    made: dict[str, tuple] = {}

    def get(name: str) -> tuple:
        if name not in made:
            spec = plugins.registry.get("model", name)
            model_dir = tiny_model_dir(name)
            tokenizer = load_tokenizer(model_dir)
            template = get_template(spec.default_template, plugins)
            made[name] = (spec, model_dir, tokenizer, template, prepare_media(spec, model_dir, tokenizer))
        return made[name]

    return get


@pytest.fixture(scope="session")
def model_of(plugins, family):
    """``model_of("gemma4")``: the tiny model (float32), loaded once per name; tests must not step an optimizer."""
    from swiftcore.models import load_model

    made: dict[str, torch.nn.Module] = {}

    def get(name: str) -> torch.nn.Module:
        if name not in made:
            spec, model_dir, *_ = family(name)
            made[name] = load_model(spec, model_dir, torch_dtype="float32")
        return made[name]

    return get


def _record(parts: list[dict], answer: str = "a striped square", **extra) -> dict:
    content = [*parts, {"type": "text", "text": "What is this?"}]
    return {
        "messages": [{"role": "user", "content": content}, {"role": "assistant", "content": answer}],
        "_source": "media.jsonl:1",
        **extra,
    }


def _image_rows(model, batch) -> int:
    """How many embeddings the vision tower emits for the batch's images (what the placeholders must match)."""
    inner = model.model
    if "image_grid_thw" in batch:  # Qwen3.5
        pooled = inner.get_image_features(batch["pixel_values"], batch["image_grid_thw"]).pooler_output
    else:  # Gemma 4
        pooled = inner.get_image_features(batch["pixel_values"], batch["image_position_ids"]).pooler_output
    return sum(p.shape[0] for p in pooled)


def _audio_rows(model, batch) -> int:
    """How many embeddings the audio tower emits for the batch's clips (padding frames excluded)."""
    out = model.model.get_audio_features(batch["input_features"], batch["input_features_mask"])
    mask = getattr(out, "attention_mask", None)
    if mask is not None and out.pooler_output.dim() == 3:  # Gemma 4: padded [clips, frames, hidden] + validity mask
        return int(mask.sum())
    return out.pooler_output.shape[0]


IMAGE_FAMILIES = ["qwen3_5", "gemma4"]
AUDIO_FAMILIES = ["gemma4", "qwen3_asr"]


@pytest.mark.parametrize("name", IMAGE_FAMILIES)
def test_image_placeholders_expand_to_the_vision_towers_count(name, family, model_of, media_files) -> None:
    _, _, tokenizer, template, preparer = family(name)
    record = _record([{"type": "image", "image": str(media_files["wide.png"])}])
    encoded = template.encode(tokenizer, record)
    sample = preparer.expand(encoded, record)

    model = model_of(name)
    batch = preparer.collate([sample])
    image_id = model.config.image_token_id
    count = sample["input_ids"].count(image_id)
    assert count > 1  # the template's single placeholder token became many
    assert count == _image_rows(model, batch)
    # Text around the placeholder is untouched; every inserted token is -100.
    (media,) = encoded.media
    inserted = len(sample["input_ids"]) - len(encoded.input_ids) + (media.end - media.start)
    assert sample["input_ids"][: media.start] == encoded.input_ids[: media.start]
    assert sample["input_ids"][media.start + inserted :] == encoded.input_ids[media.end :]
    assert sample["labels"][media.start + inserted :] == encoded.labels[media.end :]
    assert set(sample["labels"][media.start : media.start + inserted]) == {IGNORE_INDEX}


@pytest.mark.parametrize("name", AUDIO_FAMILIES)
def test_audio_placeholders_expand_to_the_audio_towers_count(name, family, model_of, media_files) -> None:
    _, _, tokenizer, template, preparer = family(name)
    model = model_of(name)
    audio_id = model.config.audio_token_id
    counts = []
    for clip in ("long.wav", "short.wav"):
        record = _record([{"type": "audio", "audio": str(media_files[clip])}], answer="a tone")
        sample = preparer.expand(template.encode(tokenizer, record), record)
        count = sample["input_ids"].count(audio_id)
        assert count == _audio_rows(model, preparer.collate([sample]))
        assert all(
            label == IGNORE_INDEX
            for tok, label in zip(sample["input_ids"], sample["labels"], strict=True)
            if tok == audio_id
        )
        counts.append(count)
    assert counts[0] > counts[1] > 1  # the count follows the clip's length


CASES = {
    "qwen3_5": [[("image", "wide.png")], [("image", "small.jpg"), ("image", "wide.png")], []],
    "gemma4": [[("image", "wide.png"), ("audio", "long.wav")], [("audio", "short.wav")], [("image", "small.jpg")]],
    "qwen3_asr": [[("audio", "long.wav")], [("audio", "short.wav")]],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_mixed_multimodal_batch_trains(name, family, model_of, media_files) -> None:
    """Samples with different media (sizes, lengths, counts, none) in one batch: finite loss, LM gradients."""
    spec, _, tokenizer, template, preparer = family(name)
    samples = []
    for items in CASES[name]:
        parts = [{"type": kind, kind: str(media_files[file])} for kind, file in items]
        record = _record(parts, answer="it is a test")
        samples.append(preparer.expand(template.encode(tokenizer, record), record))
    batch = preparer.collate(samples)
    lengths = [len(s["input_ids"]) for s in samples]
    assert batch["input_ids"].shape == (len(samples), max(lengths))
    assert batch["attention_mask"].sum(dim=1).tolist() == lengths

    model = model_of(name)
    model.train()
    model.zero_grad(set_to_none=True)
    loss = model(**batch).loss
    loss.backward()
    assert torch.isfinite(loss)
    prefix = spec.parts.language_model[0] + "."
    lm_grads = [p.grad for n, p in model.named_parameters() if n.startswith(prefix) and p.grad is not None]
    assert lm_grads and any(g.abs().sum() > 0 for g in lm_grads)
    model.zero_grad(set_to_none=True)


def test_lazy_samples_keep_items_and_collate_to_the_same_batch(family, media_files) -> None:
    _, _, tokenizer, template, preparer = family("gemma4")
    records = [
        _record(
            [
                {"type": "image", "image": str(media_files["wide.png"])},
                {"type": "audio", "audio": str(media_files["long.wav"])},
            ]
        ),
        _record([{"type": "audio", "audio": str(media_files["short.wav"])}]),
    ]
    encoded = [template.encode(tokenizer, r) for r in records]
    eager = [preparer.expand(e, r) for e, r in zip(encoded, records, strict=True)]
    lazy = [preparer.expand(e, r, lazy=True) for e, r in zip(encoded, records, strict=True)]
    assert "pixel_values" not in lazy[0] and [item[0] for item in lazy[0]["media_items"]] == ["image", "audio"]
    assert [s["input_ids"] for s in lazy] == [s["input_ids"] for s in eager]
    want, got = preparer.collate(eager), preparer.collate(lazy)
    assert sorted(want) == sorted(got)
    assert all(torch.equal(want[key], got[key]) for key in want)


def test_item_inputs_are_what_the_processor_is_given(family, media_files) -> None:
    """A lazy sample's items as an engine that runs the processor itself gets them (vLLM): the image within its
    part's controls, the waveform at the processor's rate cut to the part's ``max_seconds``."""
    from swiftcore_media import load_audio

    _, _, tokenizer, template, preparer = family("gemma4")
    image = {"type": "image", "image": str(media_files["wide.png"]), "max_pixels": 48 * 32}
    audio = {"type": "audio", "audio": str(media_files["short.wav"]), "max_seconds": 0.25}
    record = _record([image, audio])
    sample = preparer.expand(template.encode(tokenizer, record), record, lazy=True)
    [(first, picture), (second, clip)] = preparer.item_inputs(sample["media_items"])
    assert (first, second) == ("image", "audio")
    assert picture.mode == "RGB" and picture.size == (48, 32)  # 96x64 resized to 48 * 32 pixels
    rate = preparer.sampling_rate
    assert clip["sampling_rate"] == rate and len(clip["array"]) == int(0.25 * rate)
    assert np.array_equal(clip["array"], load_audio(str(media_files["short.wav"]), rate, "clip")[: int(0.25 * rate)])


def test_value_less_parts_take_the_records_column_in_order(family, media_files) -> None:
    _, _, tokenizer, template, preparer = family("qwen3_5")
    record = _record(
        [{"type": "image"}, {"type": "image"}], images=[str(media_files["small.jpg"]), str(media_files["wide.png"])]
    )
    by_column = preparer.expand(template.encode(tokenizer, record), record)
    inline = _record(
        [
            {"type": "image", "image": str(media_files["small.jpg"])},
            {"type": "image", "image": str(media_files["wide.png"])},
        ]
    )
    by_part = preparer.expand(template.encode(tokenizer, inline), inline)
    assert by_column["input_ids"] == by_part["input_ids"]
    assert torch.equal(by_column["image_grid_thw"], by_part["image_grid_thw"])
    assert by_column["image_grid_thw"][0].tolist() != by_column["image_grid_thw"][1].tolist()


def test_ms_swift_tags_become_parts_and_unplaced_column_items_are_refused(family, media_files) -> None:
    _, _, tokenizer, template, preparer = family("gemma4")
    tagged = {
        "messages": [
            {"role": "user", "content": "<audio>Transcribe <image> and this."},
            {"role": "assistant", "content": "ok"},
        ],
        "images": [str(media_files["small.jpg"])],
        "audios": [str(media_files["short.wav"])],
    }
    converted = media_tags_to_parts(tagged)
    assert tagged["messages"][0]["content"].startswith("<audio>")  # the input is not modified
    assert [p["type"] for p in converted["messages"][0]["content"]] == ["audio", "text", "image", "text"]
    by_tags = preparer.expand(template.encode(tokenizer, converted), converted)
    content = [
        {"type": "audio", "audio": str(media_files["short.wav"])},
        {"type": "text", "text": "Transcribe "},
        {"type": "image", "image": str(media_files["small.jpg"])},
        {"type": "text", "text": " and this."},
    ]
    parts = {"messages": [{"role": "user", "content": content}, {"role": "assistant", "content": "ok"}]}
    assert by_tags["input_ids"] == preparer.expand(template.encode(tokenizer, parts), parts)["input_ids"]
    # Left as tags, the images would silently not be trained on: refused instead.
    with pytest.raises(MediaError, match=r"1 item\(s\) of the 'images' column have no image placeholder.*<image>"):
        preparer.expand(template.encode(tokenizer, tagged), tagged)


def test_media_errors_name_the_record_and_say_what_to_do(family, media_files) -> None:
    _, _, tokenizer, template, preparer = family("gemma4")
    missing = _record([{"type": "image", "image": str(media_files["wide.png"].with_name("nope.png"))}])
    with pytest.raises(MediaError, match=r"media\.jsonl:1: image 0: file .*nope\.png.* not found"):
        preparer.expand(template.encode(tokenizer, missing), missing)
    no_item = _record([{"type": "image"}], images=[])
    with pytest.raises(MediaError, match=r"image 0 has no value and the 'images' column has no item left"):
        preparer.expand(template.encode(tokenizer, no_item), no_item)
    video = _record([{"type": "video", "video": "clip.mp4"}])
    with pytest.raises(MediaError, match=r"video 0: model in .* takes image, audio only"):
        preparer.expand(template.encode(tokenizer, video), video)


def test_expanded_sample_longer_than_max_length_is_refused(family, media_files) -> None:
    from swiftcore.template import SampleTooLongError

    _, _, tokenizer, template, preparer = family("gemma4")
    record = _record([{"type": "image", "image": str(media_files["wide.png"])}])
    encoded = template.encode(tokenizer, record, max_length=64)  # fits before expansion
    with pytest.raises(SampleTooLongError, match="after expanding its media"):
        preparer.expand(encoded, record, max_length=64)


def test_text_only_models_need_no_preparer(plugins) -> None:
    spec = plugins.registry.get("model", "deepseek_v4")
    assert prepare_media(spec, "/nonexistent", tokenizer=None) is None


def test_load_audio_mixes_down_and_resamples(tmp_path) -> None:
    stereo_8k = _write_wav(tmp_path / "s.wav", 0.5, rate=8_000, channels=2, freq=440.0)
    wave_16k = load_audio(str(stereo_8k), RATE)
    assert wave_16k.dtype == np.float32 and wave_16k.ndim == 1
    assert abs(len(wave_16k) - RATE // 2) <= 2
    spectrum = np.abs(np.fft.rfft(wave_16k))
    peak_hz = np.argmax(spectrum) * RATE / len(wave_16k)
    assert abs(peak_hz - 440.0) < 5.0  # the tone survives resampling
    # The same clip as a Hugging Face Audio dict and as OpenAI input_audio gives the same waveform.
    native = load_audio(str(_write_wav(tmp_path / "m.wav", 0.25)), RATE)
    as_dict = load_audio({"array": native, "sampling_rate": RATE}, RATE)
    as_b64 = load_audio({"data": base64.b64encode((tmp_path / "m.wav").read_bytes()).decode(), "format": "wav"}, RATE)
    assert np.allclose(native, as_dict) and np.allclose(native, as_b64)


def test_load_audio_refuses_what_it_cannot_decode(tmp_path) -> None:
    bad = tmp_path / "x.flac"
    bad.write_bytes(b"fLaC not really")
    has_soundfile = subprocess.run([sys.executable, "-c", "import soundfile"], capture_output=True).returncode == 0
    with pytest.raises(MediaError, match="soundfile" if not has_soundfile else "cannot decode"):
        load_audio(str(bad), RATE)


def test_load_image_accepts_paths_urls_arrays_and_dataset_dicts(media_files) -> None:
    path = media_files["wide.png"]
    reference = np.asarray(load_image(str(path)))
    data_url = "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()
    for value in (
        path,
        f"file://{path}",
        data_url,
        {"bytes": path.read_bytes(), "path": None},
        reference,
        Image.open(path),
    ):
        assert np.array_equal(np.asarray(load_image(value)), reference)
    with pytest.raises(MediaError, match="is a URL; download it"):
        load_image("https://example.com/cat.png")
    with pytest.raises(MediaError, match="cannot read .* as an image"):
        load_image(io.BytesIO(b"not an image").getvalue())


def test_importing_the_media_modules_stays_light() -> None:
    code = (
        "import sys, swiftcore_media, swiftcore_media.video, swiftcore_plugin_gemma4.media; "
        "heavy = [m for m in ('av', 'torch', 'transformers', 'PIL', 'numpy') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
