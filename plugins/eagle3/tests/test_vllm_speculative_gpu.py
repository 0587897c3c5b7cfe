"""vLLM's CUDA build serving the conftest target with its Eagle3 draft (``--backend vllm --draft``), for
scripts/gpu_check.sh; on a machine without vLLM's CUDA build and a GPU it skips.

The target is conftest's (the tiny Qwen3.5 fine-tuned on greetings, which vLLM's CPU build cannot load: its model
file imports torchvision); the drafts are conftest's trained one and an untrained one of the same shape. Greedy
answers to the 8 held-out prompts with each draft equal those without a draft, token for token; the trained draft's
acceptance (vLLM's own counters) is at least one token per verification step above the untrained one's; the
tokens/s with and without the draft are printed (a tiny model on a GPU is launch-bound: the speed-up there says
little about a real model, so it is reported, not asserted).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _cuda_vllm() -> None:
    pytest.importorskip("swiftcore_backend_vllm")
    from swiftcore_backend_vllm import cuda_build_with_gpu

    if not cuda_build_with_gpu():
        pytest.skip("needs vLLM's CUDA build and a GPU (scripts/gpu_check.sh vllm)")


def test_vllm_with_trained_draft_is_accepted_more_and_answers_as_without(
    target: Any,
    target_dir: Path,
    trained_draft: Path,
    plugins: Any,
    held_out: list[dict[str, Any]],
    tmp_path: Path,
) -> None:
    """Greedy, 48 tokens, k = 3: answers equal with either draft and without; trained acceptance >= untrained + 1."""
    from swiftcore_eagle3.draft import build_draft, save_draft
    from swiftcore_infer import Request, SamplingParams, create_engine

    aux = json.loads((trained_draft / "config.json").read_text())["eagle_aux_hidden_state_layer_ids"]
    untrained = save_draft(build_draft(target, str(target_dir), aux_layer_ids=aux, seed=0), tmp_path / "untrained")
    requests = [Request(record=r, sampling=SamplingParams(max_new_tokens=48)) for r in held_out]
    results: dict[str, Any] = {}
    expected = None
    for name, draft in (("none", None), ("trained", trained_draft), ("untrained", untrained)):
        extra = {"draft": str(draft)} if draft else {}
        engine = create_engine(
            "vllm", target_dir, plugins, dtype="bfloat16", max_model_len=512, enable_lora=False, **extra
        )
        try:
            engine.generate_requests(requests)  # warm-up
            start = time.perf_counter()
            got = engine.generate_requests(requests, batch_size=1)  # one at a time: the latency speculation cuts
            seconds = time.perf_counter() - start
            ids = [g.token_ids for g in got]
            if expected is None:
                expected = ids
            assert ids == expected, name
            stats = engine.speculative_stats() if draft else None
            results[name] = {
                "tokens_per_s": sum(g.completion_tokens for g in got) / seconds,
                "accepted_per_step": stats["accepted"] / stats["steps"] if stats and stats["steps"] else None,
            }
        finally:
            engine.close()
    for name in ("trained", "untrained"):
        results[name]["speed_up"] = results[name]["tokens_per_s"] / results["none"]["tokens_per_s"]
    print("vLLM speculative decoding (k=3):", json.dumps(results, indent=1))
    assert results["trained"]["accepted_per_step"] >= results["untrained"]["accepted_per_step"] + 1.0, results
