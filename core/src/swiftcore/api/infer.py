"""Moved: the inference contract (request and result types, errors, building a backend's engine) is the
``swiftcore-infer`` distribution's now, with the engine every backend subclasses (package ``swiftcore_infer``)."""

from __future__ import annotations

from swiftcore._lazy import moved

__all__: list[str] = []

_MOVED = {
    **dict.fromkeys(("Engine", "TransformersEngine"), "swiftcore_infer"),
    **dict.fromkeys(("Generation", "Request", "SamplingParams", "StreamDelta"), "swiftcore_infer.types"),
    **dict.fromkeys(
        ("BackendUnavailableError", "InferError", "InvalidRequestError", "UnsupportedError"), "swiftcore_infer.errors"
    ),
    **dict.fromkeys(("backend_spec", "create_engine", "probe_backend"), "swiftcore_infer.backends"),
}
__getattr__ = moved(
    __name__,
    "inference is the swiftcore-infer distribution now; depend on swiftcore-infer and import it from there",
    _MOVED,
)
