"""What an inference backend is written with: the :class:`Engine` base class (and the transformers engine, to
build on), request types and errors."""

from __future__ import annotations

from swiftcore.infer.engine import Engine
from swiftcore.infer.errors import InferError, InvalidRequestError, UnsupportedError
from swiftcore.infer.transformers_engine import TransformersEngine
from swiftcore.infer.types import Generation, Request, SamplingParams, StreamDelta

__all__ = [
    "Engine",
    "Generation",
    "InferError",
    "InvalidRequestError",
    "Request",
    "SamplingParams",
    "StreamDelta",
    "TransformersEngine",
    "UnsupportedError",
]
