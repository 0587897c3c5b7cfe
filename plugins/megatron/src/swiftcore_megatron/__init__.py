"""swiftcore-megatron: Hugging Face <-> Megatron-core conversion, the bridge base class and the conversion driver.

What a bridge plugin is written with is importable from here (``from swiftcore_megatron import MegatronBridge,
Rule, COLUMN, ...``); the plugin (:mod:`swiftcore_megatron.plugin`) gives ``swiftcore export`` its ``--to-mcore``
and ``--to-hf`` conversions. Bridge distributions depend on this one.

Modules (import the one you need; this package imports neither torch nor megatron):

- :mod:`~swiftcore_megatron.bridge`: :class:`MegatronBridge`, the base class bridges subclass.
- :mod:`~swiftcore_megatron.mapping`: rules tying mcore tensors to HF tensors, used in both directions.
- :mod:`~swiftcore_megatron.convert`: :func:`hf_to_mcore`, :func:`mcore_to_hf`, :func:`load_mcore_state`.
- :mod:`~swiftcore_megatron.checkpoint`: the checkpoint layout written, and streamed readers/writers.
- :mod:`~swiftcore_megatron.resolve`: which installed bridge converts a checkpoint.
- :mod:`~swiftcore_megatron.runtime`, :mod:`~swiftcore_megatron.parity`: run mcore models, check logits.
- :mod:`~swiftcore_megatron.mtp`: a GPTModel whose multi-token-prediction layers also give logits without labels.
- :mod:`~swiftcore_megatron.mtp_reference`: test helpers for MTP layers (a reference from transformers' modules,
  megatron's MTP logits at TP 1, a tiny checkpoint with a release-style MTP layer).
- :mod:`~swiftcore_megatron.perturb`: a copy of a tiny checkpoint with every tensor and rope base perturbed, so
  that parity tells every tensor apart (norms and biases of a random-init checkpoint are constants).
- :mod:`~swiftcore_megatron.cpu_patches`: what megatron-core needs to run on a CPU.
"""

from __future__ import annotations

from swiftcore.api import lazy_exports
from swiftcore_megatron.bridge import MegatronBridge
from swiftcore_megatron.errors import (
    BridgeError,
    BridgeNotFoundError,
    CheckpointError,
    MappingError,
    ParallelismError,
)
from swiftcore_megatron.mapping import COLUMN, QKV, ROW, Concat, Fuse, Rule, Shard, Tied

SWIFTCORE_API = "1.5"  # written against plugin API 1.5: the package face uses swiftcore.api.lazy_exports

__all__ = [
    "COLUMN",
    "DEFAULT_TOLERANCE",
    "PASSTHROUGH_SUBDIR",
    "QKV",
    "ROPE_FACTOR",
    "ROW",
    "SWIFTCORE_API",
    "BridgeError",
    "BridgeNotFoundError",
    "CheckpointError",
    "Concat",
    "Fuse",
    "HFReader",
    "METADATA_FILE",
    "HFWriter",
    "MappingError",
    "MegatronBridge",
    "ParallelismError",
    "Rule",
    "Shard",
    "Tied",
    "check_parity",
    "check_parity_tp",
    "compare_logits",
    "constant_tensors",
    "copy_hf_side_files",
    "eager_on_cpu",
    "find_bridge_spec",
    "free_port",
    "hf_logits",
    "hf_to_mcore",
    "init_model_parallel",
    "load_into_model",
    "load_mcore_state",
    "load_one_layer",
    "make_bridge",
    "mcore_logits",
    "mcore_mtp_logits",
    "mcore_to_hf",
    "mtp_logits",
    "mtp_reference_logits",
    "one_layer_state",
    "open_ranks",
    "perturb_checkpoint",
    "pipeline_on_cpu",
    "rank_file",
    "rank_producers",
    "read_hf_config",
    "read_metadata",
    "write_metadata",
    "resolve_bridge",
    "sample_tokens",
    "Stage",
    "stages",
    "tp_shards",
    "with_mtp_layer",
    "write_checkpoint_extras",
]

#: name -> the submodule that defines it, imported on first use (importing the package stays light).
_WHERE = {
    "HFReader": "checkpoint",
    "HFWriter": "checkpoint",
    "PASSTHROUGH_SUBDIR": "checkpoint",
    "copy_hf_side_files": "checkpoint",
    "rank_file": "checkpoint",
    "read_metadata": "checkpoint",
    "write_metadata": "checkpoint",
    "METADATA_FILE": "checkpoint",
    "hf_to_mcore": "convert",
    "load_mcore_state": "convert",
    "mcore_to_hf": "convert",
    "open_ranks": "convert",
    "rank_producers": "convert",
    "tp_shards": "convert",
    "write_checkpoint_extras": "convert",
    "eager_on_cpu": "cpu_patches",
    "pipeline_on_cpu": "cpu_patches",
    "mtp_logits": "mtp",
    "load_one_layer": "mtp_reference",
    "mcore_mtp_logits": "mtp_reference",
    "mtp_reference_logits": "mtp_reference",
    "one_layer_state": "mtp_reference",
    "with_mtp_layer": "mtp_reference",
    "DEFAULT_TOLERANCE": "parity",
    "check_parity": "parity",
    "check_parity_tp": "parity",
    "compare_logits": "parity",
    "hf_logits": "parity",
    "sample_tokens": "parity",
    "ROPE_FACTOR": "perturb",
    "constant_tensors": "perturb",
    "perturb_checkpoint": "perturb",
    "Stage": "pipeline",
    "stages": "pipeline",
    "find_bridge_spec": "resolve",
    "make_bridge": "resolve",
    "read_hf_config": "resolve",
    "resolve_bridge": "resolve",
    "free_port": "runtime",
    "init_model_parallel": "runtime",
    "load_into_model": "runtime",
    "mcore_logits": "runtime",
}
__getattr__ = lazy_exports(__name__, _WHERE)
