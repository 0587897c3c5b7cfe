"""Find an inference backend among the loaded plugins, check it can run, and build its engine."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore.api import resolve
from swiftcore_infer.errors import BackendUnavailableError

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = ["backend_spec", "create_engine", "probe_backend"]


def backend_spec(name: str, plugins: PluginSet) -> Any:
    """The :class:`~swiftcore.specs.BackendSpec` called ``name`` (``name@plugin`` picks a provider).

    Raises:
        UnknownNameError: no loaded plugin provides it (the message says what to install).
    """
    return plugins.registry.get("backend", name)


def probe_backend(spec: Any) -> str | None:
    """Run the backend's availability probe: None when it can run here, else the reason it cannot.

    A probe that raises counts as unavailable (the exception is the reason), so a broken backend plugin
    never takes the CLI down.
    """
    if spec.probe is None:
        return None
    try:
        return resolve(spec.probe, what=f"probe of backend {spec.name!r} ({spec.provider})")()
    except Exception as exc:
        return f"its probe failed: {type(exc).__name__}: {exc}"


def create_engine(name: str, model_dir: str | Path, plugins: PluginSet, **options: Any) -> Any:
    """Build the engine of backend ``name`` for ``model_dir``.

    Args:
        name: the backend name (``transformers``, ``vllm``, ``sglang`` ...).
        model_dir: the checkpoint (or LoRA adapter) directory.
        plugins: the loaded plugins.
        **options: passed to the backend's factory (``adapter``, ``template``, ``dtype`` ...).

    Raises:
        UnknownNameError: no plugin provides the backend.
        BackendUnavailableError: its probe says it cannot run here.
    """
    spec = backend_spec(name, plugins)
    reason = probe_backend(spec)
    if reason:
        raise BackendUnavailableError(f"backend {spec.name!r} ({spec.provider}) cannot run here: {reason}")
    factory = resolve(spec.factory, what=f"engine factory of backend {spec.name!r} ({spec.provider})")
    return factory(model_dir, plugins, **options)
