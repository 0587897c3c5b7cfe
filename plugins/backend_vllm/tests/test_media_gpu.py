"""Images and audio through vLLM's CUDA build, against the transformers engine (run by ``scripts/gpu_check.sh vllm``).

Each multimodal family's tiny checkpoint (what ``swiftcore make-tiny qwen3_5 DIR`` writes; gemma4, qwen3_asr alike)
is served by the vLLM engine and by the transformers engine, and greedy tokens must be equal: an image request
(Qwen3.5, Gemma 4), an audio request (Gemma 4, Qwen3-ASR) and one with both (Gemma 4). The vLLM engine gets the
template's ids and the media items and lets vLLM expand the placeholders; it fails a request whose expansion is not
training's (``expansion_mismatch``), so a request that generated at all ran training's prompt.

vLLM's CPU build cannot run this (its multimodal model files import torchvision, and the only torchvision wheel for
the pinned torch is a CUDA build): ``test_vllm_media.py`` checks the requests on a CPU instead. Each family runs in a
process of its own (an in-process vLLM engine keeps process-wide state).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

#: Family -> (dtype of both engines, the requests' media: one request per entry).
FAMILIES = {
    "qwen3_5": ("float32", [["image"]]),
    "gemma4": ("float32", [["image"], ["audio"], ["image", "audio"]]),
    "qwen3_asr": ("float32", [["audio"]]),
}

_WORKER = r"""
import io, json, sys, wave
from pathlib import Path

import numpy as np
from PIL import Image

family, model_dir, dtype, media_json, work = sys.argv[1:6]
from swiftcore.api.plugins import load_plugins
from swiftcore_backend_vllm.engine import VllmEngine
from swiftcore_infer.transformers_engine import TransformersEngine

plugins = load_plugins(env={})
work = Path(work)
Image.fromarray((np.random.RandomState(0).rand(40, 56, 3) * 255).astype(np.uint8)).save(work / "p.png")
t = np.arange(16000) / 16000
buffer = io.BytesIO()
with wave.open(buffer, "wb") as out:
    out.setnchannels(1)
    out.setsampwidth(2)
    out.setframerate(16000)
    out.writeframes((0.4 * np.sin(2 * np.pi * 330.0 * t) * 32767).astype(np.int16).tobytes())
(work / "a.wav").write_bytes(buffer.getvalue())
files = {"image": str(work / "p.png"), "audio": str(work / "a.wav")}
records = [
    {
        "messages": [
            {"role": "user", "content": [{"type": k, k: files[k]} for k in kinds] + [{"type": "text", "text": "What?"}]}
        ],
        "chat_template_kwargs": {"enable_thinking": False},
    }
    for kinds in json.loads(media_json)
]


def tokens(engine):
    out = engine.generate(records, max_new_tokens=12)
    errors = [g.error for g in out if getattr(g, "error", None)]
    assert not errors, errors
    return [g.token_ids for g in out]


result = {"family": family}
engine = VllmEngine(model_dir, plugins, dtype=dtype, max_model_len=2048, gpu_memory_utilization=0.3)
result["accepts_media"] = engine.accepts_media
result["refusals"] = {kind: engine.media_refusal_for(kind) for kind in engine.media_modalities}
result["vllm"] = tokens(engine)
engine.close()
result["transformers"] = tokens(TransformersEngine(model_dir, plugins, dtype=dtype, device="cuda"))
print("RESULT " + json.dumps(result))
"""


def _on_gpu_build() -> bool:
    from swiftcore_backend_vllm.probe import cuda_build_with_gpu

    return cuda_build_with_gpu()


@pytest.mark.skipif(
    not _on_gpu_build(),
    reason="needs vLLM's CUDA build, torchvision and a GPU (scripts/gpu_check.sh vllm); the CPU build cannot load "
    "these families: test_vllm_media.py checks the requests instead",
)
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_media_requests_generate_what_transformers_generates(family: str, tiny_model_dir: Any, tmp_path: Path) -> None:
    dtype, media = FAMILIES[family]
    argv = [sys.executable, "-c", _WORKER, family, str(tiny_model_dir(family)), dtype, json.dumps(media), str(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ), timeout=900)
    line = next((ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, f"{family}: no result (exit {done.returncode}):\n{done.stderr[-6000:]}"
    got = json.loads(line.removeprefix("RESULT "))
    assert got["accepts_media"] and not any(got["refusals"].values()), got["refusals"]
    assert got["vllm"] == got["transformers"], got
