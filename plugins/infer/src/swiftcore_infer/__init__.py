"""swiftcore-infer: the inference engine (templates, media, LoRA, stop rules over any backend), the transformers
backend, and the ``swiftcore infer`` command.

Backend plugins subclass :class:`Engine` (``from swiftcore_infer import Engine``) and depend on this distribution;
request and result types are the core's (``swiftcore.api.infer``). Importing this package imports no torch.
"""

from __future__ import annotations

from swiftcore_infer.engine import Engine
from swiftcore_infer.transformers_engine import TransformersEngine

__all__ = ["Engine", "TransformersEngine"]
