"""The small patches megatron-core 0.16.1 needs to run its local (non-Transformer-Engine) spec on a CPU.

megatron-core assumes CUDA in a few places that the local spec otherwise never needs. Each patch
below names the place; :func:`apply_cpu_patches` applies them once, and only when CUDA is not
available (on a GPU machine nothing is touched). Measured facts: ``../shared/notes/megatron_cpu.md``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["apply_cpu_patches", "eager_on_cpu", "pipeline_on_cpu"]

_applied = False


def _cpu_causal_mask(sq: int):  # type: ignore[no-untyped-def]
    import torch

    return torch.triu(torch.ones(sq, sq, device="cpu"), diagonal=1).bool()


def apply_cpu_patches() -> bool:
    """Patch megatron-core for CPU-only use; return True when patches were applied (now or before).

    Patches:
        - ``torch.cuda.current_device`` returns ``"cpu"`` instead of raising: the rotary embedding
          (``RotaryEmbedding.get_emb`` moves ``inv_freq`` there), ``GlobalMemoryBuffer.get_tensor``
          and the MoE router allocate on it. Only done when CUDA is unavailable, where the original
          can only raise.
        - ``get_default_causal_mask`` (``transformer.utils``, re-imported by ``fusions.fused_softmax``)
          builds its mask on "cuda" when ``attention_mask`` is None: replaced by a CPU version.
        - ``moe_utils.te_general_gemm`` is undefined without Transformer Engine (NameError in the
          router): set to None, which selects the plain matmul path.
        - ``multi_latent_attention.HAVE_TE`` reads True without Transformer Engine (a stand-in
          module imports), so ``isinstance(..., TELinear)`` raises: set to False.

    Run megatron models inside :func:`eager_on_cpu` as well (see there).
    """
    global _applied
    import torch

    if torch.cuda.is_available():
        return False
    if _applied:
        return True
    torch.cuda.current_device = lambda: "cpu"  # type: ignore[assignment]

    from megatron.core.fusions import fused_softmax
    from megatron.core.transformer import multi_latent_attention
    from megatron.core.transformer import utils as transformer_utils
    from megatron.core.transformer.moe import moe_utils

    transformer_utils.get_default_causal_mask = _cpu_causal_mask
    fused_softmax.get_default_causal_mask = _cpu_causal_mask
    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None
    try:
        import transformer_engine  # noqa: F401
    except ImportError:
        multi_latent_attention.HAVE_TE = False
    _applied = True
    return True


def eager_on_cpu() -> contextlib.AbstractContextManager[None]:
    """A context in which megatron's ``torch.compile``d fusions run as the plain functions they wrap, on a CPU.

    megatron decorates its fused kernels (``jit_fuser``: SwiGLU, the MoE router, the gated DeltaNet's gate) with
    ``torch.compile`` when its modules are imported; on a CPU inductor then builds C++ for each new input shape
    (the first training step of a tiny Qwen3.5 took 30 s and steps with a new sequence length seconds, for fusions
    that only pay on a GPU). TorchDynamo is switched off for the calls inside the context only, so nothing else in
    the process (a vLLM engine, which compiles on purpose) is affected. On a GPU it changes nothing.
    """
    import torch

    if torch.cuda.is_available():
        return contextlib.nullcontext()
    import torch._dynamo

    return torch._dynamo.config.patch(disable=True)


@contextlib.contextmanager
def pipeline_on_cpu() -> Iterator[None]:
    """A context in which megatron's pipeline-parallel code runs on a CPU (gloo); on a GPU it changes nothing.

    - The schedules (``pipeline_parallel.schedules``) count tokens in tensors made with ``device="cuda"``: factory
      calls naming CUDA make CPU tensors instead (a ``TorchFunctionMode``, for the calls inside the context only).
    - ``p2p_communication`` calls ``torch.cuda.synchronize()`` after its exchanges: a no-op (gloo is synchronous).
    - A last stage with a tied head copies the embedding from the first stage with ``weight.data.cuda()``
      (``LanguageModule.setup_embeddings_and_output_layer``): ``Tensor.cuda`` returns the tensor itself.
    """
    import torch

    if torch.cuda.is_available():
        yield
        return
    from torch.overrides import TorchFunctionMode

    class _CudaFactoriesOnCpu(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            device = kwargs.get("device")
            if device is not None and torch.device(device).type == "cuda":
                kwargs = {**kwargs, "device": "cpu"}
            return func(*args, **kwargs)

    synchronize, to_cuda = torch.cuda.synchronize, torch.Tensor.cuda
    torch.cuda.synchronize = lambda *args, **kwargs: None  # type: ignore[assignment]
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    try:
        with _CudaFactoriesOnCpu():
            yield
    finally:
        torch.cuda.synchronize, torch.Tensor.cuda = synchronize, to_cuda  # type: ignore[method-assign]
