"""Real SGLang on a CUDA GPU against the transformers backend (run by ``scripts/gpu_check.sh``).

Not collected by the CPU test run (the file name does not match ``test_*.py``): SGLang's wheel needs
CUDA. Checks, token for token on a tiny float32 Qwen3: greedy generation, a LoRA adapter trained by
``swiftcore train`` chosen per request, streaming, and generation after ``update_weights``. Then images and audio:
each multimodal family's tiny checkpoint (Qwen3.5 image, Gemma 4 image / audio / both, Qwen3-ASR audio), served by
SGLang from training's expanded ids and processor tensors (``processor_output``), greedy tokens equal to the
transformers engine's.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Any:
    import types

    from swiftcore_infer import TransformersEngine, create_engine
    from swiftcore_testing import make_tiny_qwen3, plugins_with_tiny_qwen3, train_tiny_lora

    plugins = plugins_with_tiny_qwen3()
    root = tmp_path_factory.mktemp("sglang-gpu")
    model_dir = make_tiny_qwen3(root / "tiny")
    lora = train_tiny_lora(model_dir, root, plugins)
    # float32 with the torch-native attention backend: the kernels closest to transformers' eager ones.
    sglang = create_engine(
        "sglang",
        model_dir,
        plugins,
        dtype="float32",
        max_model_len=1024,
        max_lora_rank=8,
        attention_backend="torch_native",
        mem_fraction_static=0.3,
        cuda_graph_max_bs=8,
    )
    sglang.load_adapter("parity", lora)
    reference = TransformersEngine(model_dir, plugins, device="cuda")
    reference.load_adapter("parity", lora)
    yield types.SimpleNamespace(sglang=sglang, reference=reference, model_dir=model_dir, root=root, plugins=plugins)
    sglang.close()


def _records(n: int) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "user", "content": f"question number {i} " + "word " * (i % 5)}]} for i in range(n)]


def test_greedy_parity(setup: Any) -> None:
    records = _records(8)
    got = setup.sglang.generate(records, max_new_tokens=16)
    expected = setup.reference.generate(records, max_new_tokens=16)
    assert [g.token_ids for g in got] == [g.token_ids for g in expected]


def test_lora_parity_per_request(setup: Any) -> None:
    from swiftcore_infer import Request, SamplingParams

    requests = [
        Request(record=r, sampling=SamplingParams(max_new_tokens=16), adapter="parity" if i % 2 else None)
        for i, r in enumerate(_records(6))
    ]
    got = setup.sglang.generate_requests(requests)
    assert [g.token_ids for g in got] == [g.token_ids for g in setup.reference.generate_requests(requests)]


def test_streaming(setup: Any) -> None:
    from swiftcore_infer import Request, SamplingParams

    record = _records(1)[0]
    expected = setup.sglang.generate([record], max_new_tokens=16)[0]
    deltas = list(setup.sglang.stream(Request(record=record, sampling=SamplingParams(max_new_tokens=16))))
    assert deltas[-1].final.token_ids == expected.token_ids


def test_update_weights_parity(setup: Any) -> None:
    from safetensors.torch import load_file
    from swiftcore_infer import TransformersEngine
    from swiftcore_testing import make_tiny_qwen3

    other = make_tiny_qwen3(setup.root / "other", seed=1)
    records = _records(4)
    setup.sglang.update_weights(load_file(str(other / "model.safetensors")))
    expected = TransformersEngine(other, setup.plugins, device="cuda").generate(records, max_new_tokens=16)
    assert [g.token_ids for g in setup.sglang.generate(records, max_new_tokens=16)] == [g.token_ids for g in expected]


#: Family -> the media of each request (one request per entry).
MEDIA = {"qwen3_5": [["image"]], "gemma4": [["image"], ["audio"], ["image", "audio"]], "qwen3_asr": [["audio"]]}


def _media_records(root: Any, media: list[list[str]]) -> list[dict[str, Any]]:
    """One question per entry of ``media``, with a 56x40 image and / or a 1 s clip (files under ``root``)."""
    import io
    import wave

    import numpy as np
    from PIL import Image

    image, audio = root / "p.png", root / "a.wav"
    Image.fromarray((np.random.RandomState(0).rand(40, 56, 3) * 255).astype(np.uint8)).save(image)
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes((0.4 * np.sin(2 * np.pi * 330.0 * np.arange(16000) / 16000) * 32767).astype(np.int16).tobytes())
    audio.write_bytes(buffer.getvalue())
    files = {"image": str(image), "audio": str(audio)}
    return [
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": k, k: files[k]} for k in kinds] + [{"type": "text", "text": "What?"}],
                }
            ],
            "chat_template_kwargs": {"enable_thinking": False},
        }
        for kinds in media
    ]


@pytest.mark.parametrize("family", sorted(MEDIA))
def test_media_parity(family: str, tiny_model_dir: Any, tmp_path: Any) -> None:
    import torch
    from swiftcore_infer import TransformersEngine, create_engine

    from swiftcore.api.plugins import load_plugins

    plugins = load_plugins(env={})
    model_dir = tiny_model_dir(family)
    records = _media_records(tmp_path, MEDIA[family])
    reference = TransformersEngine(model_dir, plugins, dtype="float32", device="cuda")
    expected = reference.generate(records, max_new_tokens=12)
    assert not [g.error for g in expected if g.error]
    del reference
    torch.cuda.empty_cache()
    sglang = create_engine(
        "sglang",
        model_dir,
        plugins,
        dtype="float32",
        max_model_len=2048,
        enable_lora=False,
        attention_backend="torch_native",
        mem_fraction_static=0.25,
        cuda_graph_max_bs=8,
    )
    try:
        assert sglang.accepts_media, sglang.media_refusal
        got = sglang.generate(records, max_new_tokens=12)
        assert not [g.error for g in got if g.error]
        assert [g.token_ids for g in got] == [g.token_ids for g in expected]
    finally:
        sglang.close()
