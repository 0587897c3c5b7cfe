"""swiftcore-infer: the inference engine (templates, media, LoRA, stop rules over any backend), the transformers
backend, and the ``swiftcore infer`` command.

Backend plugins subclass :class:`Engine` (``from swiftcore_infer import Engine``) and depend on this distribution;
the request and result types (:mod:`swiftcore_infer.types`), the errors (:mod:`swiftcore_infer.errors`) and building
an installed backend's engine (:mod:`swiftcore_infer.backends`; from command-line options,
:mod:`swiftcore_infer.factory`) are here too. The engine's weight sync for online RL is
:mod:`swiftcore_infer.weight_sync`. Importing this package imports no torch.
"""

from __future__ import annotations

from swiftcore.api import lazy_exports
from swiftcore_infer.engine import Engine
from swiftcore_infer.transformers_engine import TransformersEngine

__all__ = [
    "HEAD_INFO_FILE",
    "MAX_TOP_LOGPROBS",
    "PLURAL",
    "BackendUnavailableError",
    "Engine",
    "Generation",
    "HeadCheckpointError",
    "InferError",
    "InvalidRequestError",
    "MediaPolicy",
    "Prompt",
    "Request",
    "SamplingParams",
    "StreamDelta",
    "TokenLogprob",
    "TransformersEngine",
    "UnsupportedError",
    "backend_spec",
    "build_engine",
    "build_head_engine",
    "create_engine",
    "engine_options",
    "error_text",
    "find_head_checkpoint",
    "load_head_engine",
    "media_kinds",
    "merge_lora",
    "openai_media_parts",
    "probe_backend",
    "split_plugin_options",
    "strip_media_values",
]

#: name -> the submodule that defines it, imported on first use (importing the package stays light).
_WHERE = {
    "backend_spec": "backends",
    "create_engine": "backends",
    "probe_backend": "backends",
    "build_engine": "factory",
    "build_head_engine": "factory",
    "engine_options": "factory",
    "split_plugin_options": "factory",
    "BackendUnavailableError": "errors",
    "InferError": "errors",
    "InvalidRequestError": "errors",
    "UnsupportedError": "errors",
    "error_text": "errors",
    "HEAD_INFO_FILE": "heads",
    "HeadCheckpointError": "heads",
    "find_head_checkpoint": "heads",
    "load_head_engine": "heads",
    "MediaPolicy": "media",
    "PLURAL": "media",
    "Prompt": "media",
    "media_kinds": "media",
    "openai_media_parts": "media",
    "strip_media_values": "media",
    "merge_lora": "merge",
    "Generation": "types",
    "Request": "types",
    "SamplingParams": "types",
    "StreamDelta": "types",
    "TokenLogprob": "types",
    "MAX_TOP_LOGPROBS": "types",
}
__getattr__ = lazy_exports(__name__, _WHERE)
