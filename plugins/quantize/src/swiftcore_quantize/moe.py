"""The check an export of a mixture-of-experts model runs on what it wrote: does plain transformers load the experts?

Measured with transformers 5.19 and llm-compressor 0.14.1a20261020 on the tiny OLMoE: the calibrated schemes replace a
model's fused experts with one Linear per expert, and the checkpoint keeps them that way. Quantized to 4 or 8 bits in
groups (``w4a16``, ``w8a16``) transformers loads them; **kept** in full precision (``--ignore
're:.*mlp\\.experts\\..*'``) transformers reports its fused experts MISSING and runs with random ones; as int8
(``w8a8-int8``) its weight conversion fails. vLLM serves all three. So the export is written either way (it is right
for vLLM) and the check says, in the output and in ``swiftcore_quantize.json``, when transformers would load it
wrongly, and what to pass instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["EXPERTS_IGNORE", "has_experts", "transformers_load_problem"]

#: The ``--ignore`` value that keeps every expert in full precision (vLLM's MoE kernels for some schemes need it).
EXPERTS_IGNORE = r"re:.*mlp\.experts\..*"


def has_experts(model: Any) -> bool:
    """Whether ``model`` has mixture-of-experts layers (a submodule named ``experts``)."""
    return any(name.rpartition(".")[2] == "experts" for name, _ in model.named_modules())


def transformers_load_problem(model_dir: Path, cls: Any, experts_kept: bool) -> str | None:
    """Load ``model_dir`` with the transformers class ``cls`` and say what goes wrong with its experts (None: it loads
    with every weight in place).

    Args:
        model_dir: the written, quantized checkpoint.
        cls: the transformers class the source checkpoint loads with.
        experts_kept: the export's ignore list kept the experts in full precision.
    """
    import torch
    import transformers

    version = f"transformers {transformers.__version__}"
    remedy = "the checkpoint is right for vLLM; for transformers, export with w4a16 or w8a16 " + (
        f"without --ignore '{EXPERTS_IGNORE}'" if experts_kept else "(experts quantized in groups)"
    )
    try:
        _, info = cls.from_pretrained(str(model_dir), dtype=torch.float32, output_loading_info=True)
    except Exception as err:  # any failure to load is the finding reported
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return f"{version} cannot load it ({type(err).__name__}: {first}); {remedy}"
    missing = sorted(k for k in info.get("missing_keys") or () if ".experts" in k)
    if not missing:
        return None
    what = "kept experts" if experts_kept else "experts"
    return (
        f"{version} loads its {what} as random weights: llm-compressor wrote one Linear per expert and transformers "
        f"expects its fused experts ({len(missing)} MISSING, e.g. {missing[0]}); {remedy}"
    )
