"""SP=2 (and SP=4 hybrid) loss and gradients equal the single-process run, on local gloo ranks.

Each module runs its ranks once (one spawn for every case) and the tests compare case by case.
"""

from __future__ import annotations

from typing import Any

import pytest
from swiftcore_sequence_parallel.testing import (
    HEAD_TASKS,
    PER_SAMPLE_REFERENCE,
    Case,
    head_batch,
    reference_head_loss_and_grads,
    reference_loss_and_grads,
    run_sp_cases,
    sample_batch,
    tiny_head_model,
    tiny_model,
)

TOL = 1e-5
MODELS = ("qwen3", "qwen3_mqa", "qwen3_sliding", "gemma3")
# The project's other softmax-attention families, in the two main modes.
FAMILIES = ("gemma4", "olmoe")
MODES = (("ulysses", "p2p"), ("ring", "p2p"), ("ring", "allgather"))
CASES = [Case(m, mode, b, impl) for m in MODELS for b in ("padded", "packed") for mode, impl in MODES]
CASES += [Case(m, mode, b, "p2p") for m in FAMILIES for b in ("padded", "packed") for mode in ("ulysses", "ring")]
# Qwen3.5's gated DeltaNet layer: the convolution halo and the recurrent state cross the shard border
# (both batches split a sample there); the softmax layer's mode does not change the linear layer.
LINEAR = ("qwen3_5", "qwen3_5_moe")
CASES += [Case(m, mode, b, "p2p") for m in LINEAR for b in ("padded", "packed") for mode in ("ulysses", "ring")]
# Gradient checkpointing re-runs the attention (and its collectives) inside the backward.
CASES += [Case("gemma3", mode, "packed", impl, checkpointing=True) for mode, impl in MODES]
CASES += [Case("qwen3_5", "ring", "packed", "p2p", checkpointing=True)]
# The head recipes' models (embedding: mean pooling; classification: last token and a score layer) on the
# decoder: the decoder computes the shard, the pooling and the loss see the whole sequence.
HEAD_MODELS = ("qwen3", "gemma3", "gemma4", "olmoe", "qwen3_5", "qwen3_5_moe")
CASES += [
    Case(m, mode, b, "p2p", task=t)
    for m in HEAD_MODELS
    for t in HEAD_TASKS
    for b in ("padded", "packed")
    for mode in ("ulysses", "ring")
]
# Four processes on a small machine cost ~35 s (start-up dominates), hence few cases, marked slow. The last
# one is SP 2 x data parallel 2 (two SP groups side by side).
HYBRID = [
    Case("qwen3_2heads", "hybrid", "packed", "p2p", ulysses_size=2),
    Case("qwen3_2heads", "hybrid", "padded", "allgather", ulysses_size=2),
    Case("qwen3_2heads", "ulysses", "packed", sp_size=2),
    # Four shards of 4 tokens: the state passes down a chain of four ranks, samples cross two of the borders.
    Case("qwen3_5", "hybrid", "packed", "p2p", ulysses_size=2),
    Case("qwen3_2heads", "hybrid", "packed", "p2p", ulysses_size=2, task="embedding"),
    Case("qwen3_2heads", "ring", "padded", "p2p", sp_size=2, task="classification"),  # SP 2 x DP 2
]


def _key(case: Case) -> tuple[str, str, str | None]:
    return case.model, case.batch, case.task


@pytest.fixture(scope="module")
def references() -> dict[tuple[str, str, str | None], tuple[float, dict[str, Any]]]:
    """Single-process (plain sdpa, transformers' own loss or the head loss) loss and gradients per case kind."""
    out: dict[tuple[str, str, str | None], tuple[float, dict[str, Any]]] = {}
    for c in CASES + HYBRID:
        if _key(c) in out:
            continue
        per_sample = c.model in PER_SAMPLE_REFERENCE
        if c.task:
            model = tiny_head_model(c.model, c.task)
            out[_key(c)] = reference_head_loss_and_grads(model, head_batch(c.batch), c.task, per_sample)
        else:
            out[_key(c)] = reference_loss_and_grads(tiny_model(c.model), sample_batch(c.batch), per_sample)
    return out


@pytest.fixture(scope="module")
def sp2() -> dict[str, dict[str, Any]]:
    """Every SP=2 case, run once on two gloo ranks."""
    return run_sp_cases(CASES, 2)


def _check(case: Case, result: dict[str, Any], reference: tuple[float, dict[str, Any]]) -> None:
    """Loss within TOL; each gradient within TOL of the reference, scaled by the gradient's size when it is
    above 1 (float32 rounding grows with the magnitude: Gemma 4's embedding gradients reach 5.5)."""
    loss, grads = reference
    assert set(result["grads"]) == set(grads)
    loss_diff = max(abs(x - loss) for x in result["losses"])
    grad_diff = max(
        float((grads[n] - result["grads"][n]).abs().max()) / max(1.0, float(grads[n].abs().max())) for n in grads
    )
    assert loss_diff <= TOL, f"{case.name}: loss {result['losses']} vs {loss}"
    assert grad_diff <= TOL, f"{case.name}: max gradient difference {grad_diff:.3e} (scaled)"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_sp2_matches_single_process(case: Case, sp2: dict[str, dict[str, Any]], references: Any) -> None:
    _check(case, sp2[case.name], references[_key(case)])


@pytest.mark.slow
def test_hybrid_sp4_matches_single_process(references: Any) -> None:
    """4 ranks, a 2-head model: Ulysses over pairs of ranks, ring over the two pairs; and SP 2 x DP 2 (LM, head)."""
    results = run_sp_cases(HYBRID, 4)
    for case in HYBRID:
        _check(case, results[case.name], references[_key(case)])
