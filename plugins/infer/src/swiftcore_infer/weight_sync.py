"""Weight sync: how an online-RL trainer pushes its policy into a serving engine, in place.

Two ways in, both checked here once for every backend so their refusals read the same:

- :meth:`WeightSyncMixin.update_weights`: base-model tensors (a full sync; an RL trainer sends its state dict in
  buckets, one call per bucket), from a directory of ``*.safetensors`` files or names -> tensors;
- :meth:`WeightSyncMixin.update_adapter`: the tensors of one loaded LoRA adapter (a LoRA-only sync; the base
  weights stay as they are).

A backend implements the primitives :meth:`WeightSyncMixin._update_weights` and
:meth:`WeightSyncMixin._update_adapter`; the defaults refuse. :class:`~swiftcore_infer.engine.Engine` inherits
this mixin rather than holding a collaborator, so a backend keeps overriding ``_update_weights`` (or
``update_weights`` itself, calling ``super()``) on its ``Engine`` subclass exactly as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

from swiftcore_infer.errors import InvalidRequestError, UnsupportedError

__all__ = ["WeightSyncMixin", "read_safetensors_dir"]


class WeightSyncMixin:
    """The weight-sync half of :class:`~swiftcore_infer.engine.Engine` (see the module docstring).

    It reads three attributes the engine provides: ``backend`` (the name errors give), ``capabilities`` (the
    ``update_weights`` and ``lora`` capabilities gate the two calls) and ``adapters`` (the loaded adapters'
    names, the only ones :meth:`update_adapter` may change).
    """

    # Declared, not set: the engine (and a backend, per class or per instance) provides them.
    backend: ClassVar[str]
    capabilities: ClassVar[frozenset[str]]
    adapters: dict[str, Path]

    def update_weights(self, weights: str | Path | Mapping[str, Any] | Iterable[tuple[str, Any]]) -> int:
        """Replace base-model weights in place (RL-style weight sync) and return how many tensors changed.

        Args:
            weights: a directory of ``*.safetensors`` files, or Hugging Face names -> tensors
                (a mapping or ``(name, tensor)`` pairs).

        Raises:
            UnsupportedError: the backend cannot update weights.
            InvalidRequestError: there are no tensors, or (from the backend) a name or shape is not the model's.
        """
        if "update_weights" not in self.capabilities:
            raise UnsupportedError(f"backend {self.backend!r} cannot update weights")
        if isinstance(weights, (str, Path)):
            named = list(read_safetensors_dir(Path(weights)))
        elif isinstance(weights, Mapping):
            named = list(weights.items())
        else:
            named = list(weights)
        if not named:
            raise InvalidRequestError("update_weights got no tensors")
        self._update_weights(named)
        return len(named)

    def update_adapter(self, name: str, tensors: Mapping[str, Any]) -> int:
        """Replace the tensors of the loaded LoRA adapter ``name`` in place (LoRA-only weight sync for online RL)
        and return how many tensors changed; the base weights stay as they are.

        This is the weight-sync interface a trainer pushes a LoRA policy through: only the adapter's tensors
        move. A backend implements :meth:`_update_adapter` (the transformers backend copies them into its peft
        model; a vLLM backend would implement it with vLLM's LoRA reload, as :meth:`update_weights` would with
        its native weight update).

        Args:
            name: an adapter loaded with ``load_adapter`` (its rank and targets fix the tensors' shapes).
            tensors: peft's state-dict names (``get_peft_model_state_dict``: no adapter name in them) -> tensors.

        Raises:
            UnsupportedError: the backend has no LoRA support, or cannot update an adapter in place.
            InvalidRequestError: ``name`` is not a loaded adapter, ``tensors`` is empty, or a name or shape is not
                the adapter's.
        """
        if "lora" not in self.capabilities:
            raise UnsupportedError(f"backend {self.backend!r} does not support LoRA adapters")
        if name not in self.adapters:
            raise InvalidRequestError(f"update_adapter: no adapter {name!r} is loaded (load it with load_adapter)")
        if not tensors:
            raise InvalidRequestError("update_adapter got no tensors")
        self._update_adapter(name, dict(tensors))
        return len(tensors)

    # ------------------------------------------------------------------ backend primitives

    def _update_weights(self, named: list[tuple[str, Any]]) -> None:
        """Copy ``(name, tensor)`` pairs into the base model (checked non-empty); default: refuse."""
        raise UnsupportedError(f"backend {self.backend!r} cannot update weights")

    def _update_adapter(self, name: str, tensors: dict[str, Any]) -> None:
        """Copy peft state-dict tensors into the loaded adapter ``name`` (checked); default: refuse."""
        raise UnsupportedError(f"backend {self.backend!r} cannot update a LoRA adapter in place")


def read_safetensors_dir(directory: Path) -> Iterator[tuple[str, Any]]:
    """``(name, tensor)`` of every ``*.safetensors`` file in ``directory``, file by file in name order.

    Raises:
        InvalidRequestError: the directory holds no ``*.safetensors`` file.
    """
    # Imported here: safetensors.torch imports torch, and importing this module must not.
    from safetensors.torch import load_file

    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise InvalidRequestError(f"{directory}: no *.safetensors files to load weights from")
    for file in files:
        yield from load_file(str(file)).items()
