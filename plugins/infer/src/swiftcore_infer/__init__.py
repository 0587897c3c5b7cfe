"""swiftcore-infer: the inference engine (templates, media, LoRA, stop rules over any backend), the transformers
backend, and the ``swiftcore infer`` command.

Backend plugins subclass :class:`Engine` (``from swiftcore_infer import Engine``) and depend on this distribution;
the request and result types (:mod:`swiftcore_infer.types`), the errors (:mod:`swiftcore_infer.errors`) and building
an installed backend's engine (:mod:`swiftcore_infer.backends`) are here too. Importing this package imports no torch.
"""

from __future__ import annotations

from swiftcore_infer.engine import Engine
from swiftcore_infer.transformers_engine import TransformersEngine

__all__ = ["Engine", "TransformersEngine"]
