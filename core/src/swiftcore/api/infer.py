"""What inference is written with: request and result types, errors, and building an installed backend's engine.

The :class:`Engine` base class backends subclass, and the transformers engine, are the ``swiftcore-infer``
distribution's (``from swiftcore_infer import Engine, TransformersEngine``); the types here are what every
engine, the server and the callers share.
"""

from __future__ import annotations

from typing import Any

from swiftcore.infer.backends import backend_spec, create_engine, probe_backend
from swiftcore.infer.errors import BackendUnavailableError, InferError, InvalidRequestError, UnsupportedError
from swiftcore.infer.types import Generation, Request, SamplingParams, StreamDelta

__all__ = [
    "BackendUnavailableError",
    "Generation",
    "InferError",
    "InvalidRequestError",
    "Request",
    "SamplingParams",
    "StreamDelta",
    "UnsupportedError",
    "backend_spec",
    "create_engine",
    "probe_backend",
]

_MOVED = {"Engine", "TransformersEngine"}


def __getattr__(name: str) -> Any:
    # Plugin API 1.2 moved the engines out of the core: say where, rather than a bare ImportError.
    if name in _MOVED:
        raise ImportError(
            f"swiftcore.api.infer.{name} moved to the swiftcore-infer distribution (plugin API 1.2): "
            f"use `from swiftcore_infer import {name}` and depend on swiftcore-infer"
        )
    raise AttributeError(name)
