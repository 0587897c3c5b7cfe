"""Padding-free (packed) batches are exact for every model family, on CPU.

For each family a tiny random checkpoint is loaded through ``swiftcore.models.load_model`` (so the
family's ``swiftcore_post_model_load`` hook runs), three samples of different lengths run one by one
and packed into one row by ``PaddingFreeCollator``, and the per-sample summed losses and the
gradients of every parameter must agree. The tiny configs are adjusted where the stock tiny one would
not reach the code that packing can break:

* Gemma 4: a 4-token sliding window (the stock 512 is longer than the samples) and KV sharing
  (the last two layers reuse the keys/values of earlier layers);
* DeepSeek-V4: a heavily-compressed-attention rate of 8 (the stock 128 is longer than the samples),
  so both compressors and the sparse indexer (top-8 of up to 11 blocks) see several windows;
* Qwen3.5: one sample longer than the 64-token chunk of the gated delta rule.

GLM-5 and MiMo-V2-Flash run their stock tiny configs on samples longer than what matters (GLM-5's 16-key DSA top-k,
MiMo's 8-token sliding window with attention sinks) and shorter.

Tolerance (float32): summed losses within 1e-5 (absolute and relative); each parameter's gradient
within 1e-5 + 1e-5 x its largest entry (summation-order noise scales with the tensor, see
``_assert_close_to_scale``). A negative control shows the comparison catches a leak: without the
hook, Qwen3.5's linear attention and DeepSeek-V4's compressors mix the samples, and the worst
difference is over 100 times the tolerance.

On a GPU (``SWIFTCORE_TEST_DEVICE=cuda``, run by ``scripts/gpu_check_core.py``) the same tests run on CUDA, with
TF32 off so float32 stays float32: there Qwen3.5's DeltaNet patch takes its accelerator path (the samples re-laid
as one right-padded batch) and the packed attention runs CUDA's sdpa kernels.

DeepSeek-V4's indexer picks its top-k blocks with a discrete ``topk``: a sample that runs at a
different sequence length can pick differently on near-ties, which is why its patch runs each sample
at exactly the length it has alone (and why the unpatched model differs even on the first sample).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from swiftcore_data import PaddingFreeCollator  # noqa: E402
from swiftcore_tiny import make_tiny  # noqa: E402

import swiftcore  # noqa: E402
from swiftcore.models import load_model, model_class_for, read_hf_config  # noqa: E402

IGNORE = -100
#: Where the models and batches run: ``cpu`` in the suite, ``cuda`` in the GPU check.
DEVICE = os.environ.get("SWIFTCORE_TEST_DEVICE", "cpu")
if DEVICE.startswith("cuda"):  # TF32 would round float32 matmuls and convolutions to 10-bit mantissas
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
# float32 on 2 CPU cores: packed and unpacked runs differ only by summation order.
RTOL = ATOL = 1e-5


@dataclass(frozen=True)
class Case:
    """One family's test set-up: sample lengths and config changes (applied to the text config)."""

    lengths: tuple[int, ...]
    overrides: dict[str, Any] = field(default_factory=dict)


CASES = {
    "qwen3_5": Case(lengths=(70, 23, 41)),
    "qwen3_5_moe": Case(lengths=(20, 33, 12)),
    "gemma4": Case(
        lengths=(13, 9, 17),
        overrides={
            "sliding_window": 4,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
            "num_kv_shared_layers": 2,
        },
    ),
    "deepseek_v4": Case(
        lengths=(45, 38, 27),
        overrides={"compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 8}},
    ),
    "qwen3_asr": Case(lengths=(12, 30, 7)),
    "glm5": Case(lengths=(21, 13, 30)),  # longer than the indexer's top-16 and shorter: sparse and dense rows
    "mimo_v2_flash": Case(lengths=(21, 13, 30)),  # longer than the 8-token sliding window with attention sinks
    "olmoe": Case(lengths=(21, 13, 30)),
}
# Families whose stock transformers layers leak across packed samples (what their hooks fix).
LEAKY = ("qwen3_5", "deepseek_v4", "glm5")
# Families whose attention runs eager (no sdpa): packed training takes swiftcore_data.packed_attention.PACKED_EAGER.
EAGER = ("deepseek_v4", "mimo_v2_flash")
# Families whose plugin keeps transformers' attention for packed training (GLM-5: its sparse mask needs the name).
KEPT = ("glm5",)


@pytest.fixture(scope="session")
def plugins() -> Any:
    return swiftcore.load_plugins()


@pytest.fixture(scope="session", autouse=True)
def _hub_offline() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield


def _with_overrides(config: Any, overrides: dict[str, Any]) -> Any:
    """A copy of ``config`` with ``overrides`` set on its text config (rebuilt, so derived fields follow)."""
    data = config.to_dict()
    target = data["text_config"] if "text_config" in data else data
    target.update(overrides)
    return type(config).from_dict(data)


@pytest.fixture(scope="session")
def checkpoints(plugins: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``build(family) -> Path``: the family's tiny checkpoint, written once per session."""
    built: dict[str, Path] = {}

    def build(family: str) -> Path:
        if family not in built:
            spec = plugins.registry.get("model", family)
            path = make_tiny(spec, tmp_path_factory.mktemp("packing") / family)
            overrides = CASES[family].overrides
            if overrides:
                from transformers import AutoConfig

                config = _with_overrides(AutoConfig.from_pretrained(path), overrides)
                torch.manual_seed(0)
                model_class_for(spec, read_hf_config(path))(config).save_pretrained(path)
                saved = AutoConfig.from_pretrained(path).get_text_config()
                assert all(getattr(saved, key) == value for key, value in overrides.items()), family
            built[family] = path
        return built[family]

    return build


def _samples(family: str, vocab: int) -> list[dict[str, list[int]]]:
    generator = torch.Generator().manual_seed(sum(map(ord, family)))
    samples = []
    for n in CASES[family].lengths:
        ids = torch.randint(40, vocab, (n,), generator=generator).tolist()
        prompt = n // 3  # a prompt without loss, as a template would mask it
        samples.append({"input_ids": ids, "labels": [IGNORE] * prompt + ids[prompt:]})
    return samples


def _summed_loss(logits: Any, labels: Any) -> Any:
    """Summed next-token loss of one sample: ``logits[t]`` predicts ``labels[t + 1]``."""
    logits = logits if logits.dtype == torch.float64 else logits.float()  # float64 when debugging a mismatch
    return torch.nn.functional.cross_entropy(logits[:-1], labels[1:], ignore_index=IGNORE, reduction="sum")


def _grads(model: Any) -> dict[str, Any]:
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _unpacked(model: Any, samples: list[dict[str, list[int]]]) -> tuple[list[float], dict[str, Any]]:
    """Per-sample summed losses and the gradients of their sum, one sample per forward."""
    model.zero_grad(set_to_none=True)
    losses = []
    for sample in samples:
        logits = model(input_ids=torch.tensor([sample["input_ids"]], device=DEVICE), use_cache=False).logits[0]
        loss = _summed_loss(logits, torch.tensor(sample["labels"], device=DEVICE))
        loss.backward()
        losses.append(loss.item())
    return losses, _grads(model)


def _on_device(batch: dict[str, Any]) -> dict[str, Any]:
    """``batch`` with its tensors on :data:`DEVICE`."""
    return {key: value.to(DEVICE) if isinstance(value, torch.Tensor) else value for key, value in batch.items()}


def _packed(model: Any, batch: dict[str, Any]) -> tuple[list[float], dict[str, Any]]:
    """Per-sample summed losses of one packed row, and the gradients of their sum."""
    model.zero_grad(set_to_none=True)
    batch = _on_device(batch)
    labels = batch["labels"][0]
    inputs = {key: value for key, value in batch.items() if key not in ("labels", "seq_lens")}
    logits = model(**inputs).logits[0]
    cu = batch["cu_seq_lens_q"].tolist() if "cu_seq_lens_q" in batch else None
    if cu is None:  # derive the segments from position_ids, as the model has to
        starts = [t for t, p in enumerate(batch["position_ids"][0].tolist()) if p == 0]
        cu = [*starts, logits.shape[0]]
    per_sample = [_summed_loss(logits[a:b], labels[a:b]) for a, b in pairwise(cu)]
    torch.stack(per_sample).sum().backward()
    return [loss.item() for loss in per_sample], _grads(model)


def _load(family: str, checkpoints: Any, plugins: Any, *, hooks: bool = True, **kwargs: Any) -> Any:
    spec = plugins.registry.get("model", family)
    model = load_model(spec, checkpoints(family), plugins if hooks else None, torch_dtype="float32", **kwargs)
    return model.to(DEVICE).train()


def _vocab(model: Any) -> int:
    return model.get_input_embeddings().num_embeddings


@pytest.fixture(scope="session")
def hooked(checkpoints: Any, plugins: Any) -> Any:
    """``get(family) -> (model, samples, unpacked losses and gradients)``, loaded and run once per session."""
    cache: dict[str, Any] = {}

    def get(family: str) -> Any:
        if family not in cache:
            model = _load(family, checkpoints, plugins)
            samples = _samples(family, _vocab(model))
            cache[family] = model, samples, _unpacked(model, samples)
        return cache[family]

    return get


def _assert_close_to_scale(actual: Any, expected: Any, what: str) -> None:
    """``max|actual - expected| <= ATOL + RTOL * max|expected|``.

    Like ``torch.testing.assert_close`` but relative to the tensor's largest entry: float32 summation-order
    noise scales with a gradient's large entries, so an elementwise relative test would fail on the near-zero
    entries of a correct result.
    """
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    error = float((actual - expected).abs().max()) if expected.numel() else 0.0
    assert error <= ATOL + RTOL * scale, f"{what}: max |difference| {error:.3g}, allowed {ATOL} + {RTOL} x {scale:.3g}"


def _assert_same(packed: tuple[list[float], dict[str, Any]], alone: tuple[list[float], dict[str, Any]]) -> None:
    (packed_losses, packed_grads), (alone_losses, alone_grads) = packed, alone
    torch.testing.assert_close(torch.tensor(packed_losses), torch.tensor(alone_losses), rtol=RTOL, atol=ATOL)
    assert packed_grads.keys() == alone_grads.keys()
    for name, grad in alone_grads.items():
        _assert_close_to_scale(packed_grads[name], grad, f"gradient of {name}")


@pytest.mark.parametrize("family", list(CASES))
def test_packed_losses_and_gradients_equal_unpacked(family: str, hooked: Any) -> None:
    model, samples, alone = hooked(family)
    _assert_same(_packed(model, PaddingFreeCollator()(samples)), alone)


def test_qwen3_5_packed_with_position_ids_only(hooked: Any) -> None:
    """Boundaries come from position_ids restarts when the batch has no cu_seq_lens (e.g. TRL's padding-free)."""
    model, samples, alone = hooked("qwen3_5")
    batch = PaddingFreeCollator()(samples)
    keep = ("input_ids", "labels", "position_ids", "use_cache")
    _assert_same(_packed(model, {key: batch[key] for key in keep}), alone)


def test_qwen3_5_packed_as_one_padded_batch(hooked: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The accelerator path of the DeltaNet patch (samples re-laid as one right-padded batch) is exact too; on a
    CPU the samples run one by one."""
    from swiftcore_plugin_qwen3_5 import packing

    monkeypatch.setattr(packing, "SAMPLE_BY_SAMPLE_DEVICES", ())
    model, samples, alone = hooked("qwen3_5")
    _assert_same(_packed(model, PaddingFreeCollator()(samples)), alone)


def test_gemma4_packed_with_eager_attention(checkpoints: Any, plugins: Any) -> None:
    """Eager attention (often preferred for Gemma fine-tuning) gets the same block-diagonal sliding mask."""
    model = _load("gemma4", checkpoints, plugins, attn_implementation="eager")
    assert model.config.get_text_config()._attn_implementation == "eager"
    samples = _samples("gemma4", _vocab(model))
    _assert_same(_packed(model, PaddingFreeCollator()(samples)), _unpacked(model, samples))


def test_qwen3_5_packed_with_gradient_checkpointing(hooked: Any) -> None:
    """The patched layer is re-run in the backward pass: it must split the same way again."""
    model, samples, alone = hooked("qwen3_5")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    try:
        _assert_same(_packed(model, PaddingFreeCollator()(samples)), alone)
    finally:
        model.gradient_checkpointing_disable()


@pytest.mark.parametrize("family", LEAKY)
def test_packed_lora_training_is_exact(family: str, checkpoints: Any, plugins: Any) -> None:
    """The trainer's order (load_model runs the hook, then LoRA wraps the layers) keeps the patch working."""
    from peft import LoraConfig, get_peft_model

    # Adapters on the projections feeding the patched layers and on their outputs.
    targets = {
        "qwen3_5": ["in_proj_qkv", "out_proj", "q_proj"],
        "deepseek_v4": ["q_b_proj", "kv_proj", "o_b_proj"],
        "glm5": ["q_b_proj", "kv_b_proj", "o_proj"],
    }
    model = _load(family, checkpoints, plugins)
    torch.manual_seed(0)
    # Random B matrices (not zeros), so the adapters change the outputs and carry gradients of their own.
    model = get_peft_model(model, LoraConfig(r=4, target_modules=targets[family], init_lora_weights=False)).train()
    samples = _samples(family, _vocab(model))
    packed = _packed(model, PaddingFreeCollator()(samples))
    assert packed[1] and all("lora_" in name for name in packed[1])
    _assert_same(packed, _unpacked(model, samples))


def _worst_error(packed: tuple[list[float], dict[str, Any]], alone: tuple[list[float], dict[str, Any]]) -> float:
    """The largest difference between the two runs, in units of the tolerance ``_assert_same`` allows."""
    (packed_losses, packed_grads), (alone_losses, alone_grads) = packed, alone
    ratios = [abs(p - a) / (ATOL + RTOL * abs(a)) for p, a in zip(packed_losses, alone_losses, strict=True)]
    for name, grad in alone_grads.items():
        error = float((packed_grads[name] - grad).abs().max())
        ratios.append(error / (ATOL + RTOL * float(grad.abs().max())))
    return max(ratios)


@pytest.mark.parametrize("family", LEAKY)
def test_without_the_hook_packed_samples_leak(family: str, checkpoints: Any, plugins: Any, hooked: Any) -> None:
    """Negative control: without the family's patch the same comparison fails, by over 100 times the tolerance."""
    _, samples, alone = hooked(family)
    model = _load(family, checkpoints, plugins, hooks=False)
    assert _worst_error(_packed(model, PaddingFreeCollator()(samples)), alone) > 100


# --------------------------------------------------------------------------- the patches themselves


def test_hooks_patch_every_layer_that_needs_it_once(hooked: Any) -> None:
    from swiftcore_plugin_deepseek_v4.packing import patch_packed_compressed_attention
    from swiftcore_plugin_glm5.packing import patch_packed_dsa_attention
    from swiftcore_plugin_qwen3_5.packing import patch_packed_linear_attention

    for family, patch, kind in (
        ("qwen3_5", patch_packed_linear_attention, "GatedDeltaNet"),
        ("qwen3_5_moe", patch_packed_linear_attention, "GatedDeltaNet"),
        ("deepseek_v4", patch_packed_compressed_attention, "Attention"),
        ("glm5", patch_packed_dsa_attention, "DsaAttention"),
    ):
        model = hooked(family)[0]
        layers = [m for m in model.modules() if type(m).__name__.endswith(kind) and "Vision" not in type(m).__name__]
        if family == "deepseek_v4":
            layers = [m for m in layers if m.compressor is not None]
        assert layers, family
        assert all(m._swiftcore_packing_patched for m in layers), family
        assert patch(model) == 0, f"{family}: patching twice must do nothing"


def test_patch_outside_the_checked_transformers_range_does_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from swiftcore_plugin_qwen3_5 import packing

    monkeypatch.setattr(packing, "TRANSFORMERS_RANGE", "<1")
    with caplog.at_level("WARNING", logger="swiftcore.plugins.qwen3_5"):
        assert packing.patch_packed_linear_attention(torch.nn.Linear(2, 2)) == 0
    assert "outside <1" in caplog.text


def test_boundaries_from_position_ids() -> None:
    from swiftcore_plugin_deepseek_v4.packing import packed_segments
    from swiftcore_plugin_qwen3_5.packing import packed_cu_seq_lens

    assert packed_cu_seq_lens(torch.tensor([[0, 1, 2, 0, 1, 0]])).tolist() == [0, 3, 5, 6]
    assert packed_cu_seq_lens(torch.tensor([[0, 1, 0, 1], [0, 1, 2, 3]])).tolist() == [0, 2, 4, 8]
    assert packed_cu_seq_lens(torch.tensor([[0, 1, 2], [0, 1, 2]])) is None
    assert packed_segments(torch.tensor([[0, 1, 2, 0, 1, 0]]), None, 1, 6) == [(0, 0, 3), (0, 3, 5), (0, 5, 6)]
    assert packed_segments(torch.tensor([[0, 1, 0, 1], [0, 1, 2, 3]]), None, 2, 4) == [(0, 0, 2), (0, 2, 4), (1, 0, 4)]
    assert packed_segments(torch.tensor([[0, 1, 2, 3]]), None, 1, 4) is None
    # cu_seq_lens wins over position_ids when both are given (the collator sends both).
    assert packed_segments(torch.tensor([[0, 1, 2, 3]]), torch.tensor([0, 1, 4]), 1, 4) == [(0, 0, 1), (0, 1, 4)]


def test_boundaries_that_do_not_fit_the_batch_are_refused(hooked: Any) -> None:
    from swiftcore_plugin_deepseek_v4.packing import PackedBatchError as DeepseekError
    from swiftcore_plugin_deepseek_v4.packing import packed_segments
    from swiftcore_plugin_qwen3_5.packing import PackedBatchError as QwenError

    from swiftcore.errors import SwiftcoreError

    with pytest.raises(DeepseekError, match=r"cu_seq_lens_q=\[0, 3, 5\] does not cover the 1x6 tokens"):
        packed_segments(None, torch.tensor([0, 3, 5]), 1, 6)
    with pytest.raises(DeepseekError, match="spans rows"):
        packed_segments(None, torch.tensor([0, 3, 8]), 2, 4)
    model, samples, _ = hooked("qwen3_5")
    batch = _on_device(PaddingFreeCollator()(samples))
    batch["cu_seq_lens_q"] = batch["cu_seq_lens_q"][:-1]  # drops the last sample's end
    with pytest.raises(QwenError, match=r"layer 0\): cu_seq_lens_q=.* does not cover") as raised, torch.no_grad():
        model(**{key: value for key, value in batch.items() if key not in ("labels", "seq_lens")})
    assert isinstance(raised.value, SwiftcoreError)


@pytest.mark.parametrize("family", list(CASES))
def test_packed_attention_runs_each_sample_alone_and_is_exact(
    family: str, checkpoints: Any, plugins: Any, hooked: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trainer's packed attention (``swiftcore_data.packed_attention``: sdpa, or the model's own eager function,
    per sample, no T x T mask) gives the unpacked losses and gradients, and no attention call of the packed row
    spans more than one sample (transformers' masked sdpa or eager attention never sees the whole row). GLM-5 keeps
    transformers' sdpa (its sparse top-k mask exists only under that name): its plugin already runs each sample's
    attention alone."""
    from swiftcore_data import packed_attention
    from transformers.integrations import sdpa_attention

    _, samples, alone = hooked(family)
    model = _load(family, checkpoints, plugins)
    before = model.config.get_text_config()._attn_implementation
    assert before == ("eager" if family in EAGER else "sdpa")
    assert packed_attention.use_packed_attention(model) == (family not in KEPT)
    expected = packed_attention.PACKED_EAGER if family in EAGER else packed_attention.PACKED_SDPA
    assert model.config.get_text_config()._attn_implementation == (before if family in KEPT else expected)
    queries: list[int] = []  # the query length of every call that reached transformers' own attention
    real_sdpa, real_eager_of = sdpa_attention.sdpa_attention_forward, packed_attention._eager_function

    def sdpa(module: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        queries.append(query.shape[2])
        return real_sdpa(module, query, *args, **kwargs)

    def eager_of(module: Any) -> Any:
        real = real_eager_of(module)

        def eager(module: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
            queries.append(query.shape[2])
            return real(module, query, *args, **kwargs)

        return eager

    monkeypatch.setattr(sdpa_attention, "sdpa_attention_forward", sdpa)
    monkeypatch.setattr(packed_attention, "_eager_function", eager_of)
    batch = PaddingFreeCollator()(samples)
    _assert_same(_packed(model, batch), alone)
    # TRL's padding-free batches: the samples only in position_ids' restarts.
    keep = ("input_ids", "labels", "position_ids", "use_cache")
    _assert_same(_packed(model, {key: batch[key] for key in keep}), alone)
    assert max(queries, default=0) <= max(CASES[family].lengths), f"an attention call spanned the row: {queries}"
