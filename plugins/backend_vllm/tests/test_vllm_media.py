"""Images and audio through the vLLM backend, on a CPU: the requests vLLM gets, checked against vLLM's own code.

vLLM's CPU build cannot load the project's multimodal families (their vLLM model files import torchvision, and the
only torchvision wheel for torch 2.13 is a CUDA build that fails beside a CPU torch), so no vLLM engine starts on them
here. What runs for real on the CPU:

- prompts encoded as the vLLM engine encodes them (its class settings, through the engine base class), on tiny
  Qwen3.5 / Gemma 4 / Qwen3-ASR checkpoints: training's expanded ids, the template's ids with one placeholder per
  item, and the items training's processor was given;
- the request :func:`vllm_prompt` builds, fed to vLLM's own ``MultiModalDataParser`` and token-replacement code
  (``apply_token_matches``), which is what vLLM 0.32 runs on it before the model;
- the media decision (:func:`media_refusals`) and the refusal a client gets, and the expansion check.

Whether vLLM then generates what the transformers engine does is asserted on a GPU, by ``test_media_gpu.py``
(``scripts/gpu_check.sh vllm``).
"""

from __future__ import annotations

import io
import wave
from pathlib import Path
from typing import Any

import pytest

np = pytest.importorskip("numpy")
Image = pytest.importorskip("PIL.Image")
pytest.importorskip("vllm")

from swiftcore_backend_vllm.engine import (  # noqa: E402
    VllmEngine,
    expansion_mismatch,
    media_refusals,
    vllm_prompt,
)
from swiftcore_infer import (  # noqa: E402
    Engine,
    InferError,
    InvalidRequestError,
    Prompt,
    Request,
)

pytestmark = pytest.mark.slow

RATE = 16_000


class _EncodesAsVllm(Engine):
    """Encodes prompts as the vLLM engine does (its media settings), without starting vLLM."""

    backend = VllmEngine.backend
    media_as_items = VllmEngine.media_as_items
    accepts_media = True


class _EncodesForTensors(Engine):
    """Encodes prompts as the transformers engine does: training's expanded ids and processor tensors."""

    accepts_media = True


@pytest.fixture(scope="module")
def plugins() -> Any:
    from swiftcore.api.plugins import load_plugins

    return load_plugins(env={})


@pytest.fixture(scope="module")
def engines(plugins: Any, tiny_model_dir: Any) -> Any:
    """``engines(family)``: ``(vLLM-style encoder, tensor encoder)`` over that family's tiny checkpoint."""
    made: dict[str, tuple[Engine, Engine]] = {}

    def get(family: str) -> tuple[Engine, Engine]:
        if family not in made:
            model_dir = tiny_model_dir(family)
            made[family] = (_EncodesAsVllm(model_dir, plugins), _EncodesForTensors(model_dir, plugins))
        return made[family]

    return get


def _png(path: Path, size: tuple[int, int]) -> Path:
    pixels = (np.random.RandomState(0).rand(size[1], size[0], 3) * 255).astype(np.uint8)
    Image.fromarray(pixels).save(path, format="PNG")
    return path


def _wav(path: Path, seconds: float) -> Path:
    t = np.arange(int(RATE * seconds)) / RATE
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(RATE)
        out.writeframes((0.4 * np.sin(2 * np.pi * 440.0 * t) * 32767).astype(np.int16).tobytes())
    path.write_bytes(buffer.getvalue())
    return path


# (family, media of the question in order, the parts' media controls, image size, seconds of audio,
#  what vLLM must receive: image size after the controls, audio samples after them)
CASES = {
    "qwen3_5-image": ("qwen3_5", ["image"], {}, (48, 32), 0.0, (48, 32), 0),
    "qwen3_5-image-max_pixels": ("qwen3_5", ["image"], {"max_pixels": 32 * 32}, (64, 64), 0.0, (32, 32), 0),
    "gemma4-image+audio": ("gemma4", ["image", "audio"], {}, (32, 32), 0.5, (32, 32), 8000),
    "qwen3_asr-audio": ("qwen3_asr", ["audio"], {}, (0, 0), 1.0, (0, 0), 16000),
    "qwen3_asr-audio-max_seconds": ("qwen3_asr", ["audio"], {"max_seconds": 0.5}, (0, 0), 1.0, (0, 0), 8000),
}


def _record(tmp_path: Path, kinds: list[str], controls: dict[str, Any], size: Any, seconds: float) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for kind in kinds:
        value = _png(tmp_path / "p.png", size) if kind == "image" else _wav(tmp_path / "a.wav", seconds)
        parts.append({"type": kind, kind: str(value), **controls})
    parts.append({"type": "text", "text": "What is this?"})
    return {"messages": [{"role": "user", "content": parts}], "chat_template_kwargs": {"enable_thinking": False}}


@pytest.mark.parametrize("case", list(CASES))
def test_the_request_vllm_gets_for_a_media_prompt(case: str, engines: Any, tmp_path: Path) -> None:
    from vllm.multimodal.parse import MultiModalDataParser

    family, kinds, controls, size, seconds, want_size, want_samples = CASES[case]
    as_vllm, for_tensors = engines(family)
    record = _record(tmp_path, kinds, controls, size, seconds)
    prompt = as_vllm.encode(Request(record=record))
    trained = for_tensors.encode(Request(record=record))

    # The prompt keeps training's expanded ids (token counts, the expansion check), and no tensors were made.
    assert isinstance(prompt, Prompt) and list(prompt) == list(trained)
    assert set(prompt.media) <= {"mm_token_type_ids"} and set(trained.media) - {"mm_token_type_ids"}
    assert [kind for kind, _ in prompt.items] == kinds

    request = vllm_prompt(prompt)
    assert request["prompt_token_ids"] == prompt.placeholder_ids
    processor = as_vllm.media_preparer().processor
    for kind in set(kinds):
        # vLLM replaces each item's target token (the processor's image / audio token) by the expansion, and refuses a
        # prompt whose count of targets is not the item count: one per item here, many in training's expanded ids.
        target = getattr(processor, f"{kind}_token_id")
        assert request["prompt_token_ids"].count(target) == kinds.count(kind)
        assert list(prompt).count(target) > kinds.count(kind)

    # vLLM's own parser takes the data as media items (not embeddings), the audio at its rate, not resampled.
    parsed = MultiModalDataParser(target_sr=RATE).parse_mm_data(request["multi_modal_data"])
    assert set(parsed) == set(kinds)
    if "image" in kinds:
        assert tuple(parsed["image"].get_image_size(0)) == want_size  # after the part's max_pixels
    if "audio" in kinds:
        assert parsed["audio"].get_audio_length(0) == want_samples  # after the part's max_seconds
        (array, rate) = request["multi_modal_data"]["audio"][0]
        assert rate == RATE and np.array_equal(parsed["audio"].get(0), array)


def test_training_s_expanded_ids_would_be_expanded_again(engines: Any, tmp_path: Path) -> None:
    """Why vLLM gets the template's ids: its token-replacement step (``apply_token_matches``, run by every
    multimodal processor's ``apply``) replaces the target token whatever follows it. With Qwen3-VL's replacement for
    one image (its ``<|image_pad|>`` becomes N of them: ``Qwen3VLMultiModalProcessor._get_prompt_updates``), the
    placeholder ids become training's expanded ids, and training's ids would grow by N - 1 tokens."""
    from vllm.multimodal.processing.processor import PromptReplacement, apply_token_matches

    as_vllm, _ = engines("qwen3_5")
    prompt = as_vllm.encode(Request(record=_record(tmp_path, ["image"], {}, (48, 32), 0.0)))
    pad = as_vllm.media_preparer().processor.image_token_id
    n = list(prompt).count(pad)
    update = {"image": [[PromptReplacement(modality="image", target=[pad], replacement=[pad] * n).resolve(0)]]}
    assert apply_token_matches(vllm_prompt(prompt)["prompt_token_ids"], update)[0] == list(prompt)
    assert len(apply_token_matches(list(prompt), update)[0]) == len(prompt) + n - 1


def test_text_prompts_are_plain_token_prompts() -> None:
    assert vllm_prompt([5, 6, 7]) == {"prompt_token_ids": [5, 6, 7]}
    assert vllm_prompt(Prompt([5, 6])) == {"prompt_token_ids": [5, 6]}
    with pytest.raises(InferError, match="processor tensors, not media items"):
        vllm_prompt(Prompt([5, 6], {"pixel_values": object()}))  # encoded for another backend


def test_expansion_mismatch_names_both_counts() -> None:
    assert expansion_mismatch([1, 2, 2, 3], [1, 2, 2, 3]) is None
    message = expansion_mismatch([1, 2, 2, 3], [1, 2, 2, 2, 3])
    assert message is not None
    assert "into 5 tokens, training's processor into 4" in message and "from token 3" in message
    assert "--backend transformers" in message
    assert expansion_mismatch([1, 2], None) is not None


def test_media_refusals_follow_what_vllm_serves() -> None:
    arch, version = "Gemma4ForConditionalGeneration", "0.32.0 (vllm)"
    assert media_refusals(("image", "audio"), {"image": 999, "audio": 999, "video": 999}, arch, version) == {
        "image": None,
        "audio": None,
    }
    refused = media_refusals(("image", "audio"), {"image": 999}, arch, version)
    assert refused["image"] is None
    assert refused["audio"] == "vLLM 0.32.0 (vllm) serves Gemma4ForConditionalGeneration without audio"
    off = media_refusals(("image",), {"image": 0}, arch, version)["image"]
    assert off is not None and "images switched off" in off and "limit_mm_per_prompt image=0" in off
    assert media_refusals((), {}, arch, version) == {}


def test_a_refused_media_type_is_a_400_naming_why(plugins: Any, tiny_model_dir: Any, tmp_path: Path) -> None:
    """The vLLM engine's per-type decision reaches the client: audio refused (vLLM serves it without), images served."""

    class _ServesImagesOnly(_EncodesAsVllm):
        media_refusal_for = VllmEngine.media_refusal_for

        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            self.vllm_version = "0.32.0 (vllm)"
            self._media_refusals = media_refusals(self.media_modalities, {"image": 999}, "Gemma4", self.vllm_version)

    engine = _ServesImagesOnly(tiny_model_dir("gemma4"), plugins)
    with pytest.raises(InvalidRequestError) as refused:
        engine.encode(Request(record=_record(tmp_path, ["audio"], {}, (0, 0), 0.5)))
    assert refused.value.status == 400 and refused.value.param == "messages"
    assert "messages[0].content[0]: vLLM 0.32.0 (vllm) serves Gemma4 without audio" in str(refused.value)
    assert "--backend transformers" in str(refused.value)
    prompt = engine.encode(Request(record=_record(tmp_path, ["image"], {}, (32, 32), 0.0)))
    assert [kind for kind, _ in prompt.items] == ["image"]
