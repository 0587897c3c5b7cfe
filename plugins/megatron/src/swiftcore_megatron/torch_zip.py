"""Stream tensors into and out of ``torch.save`` files one tensor at a time.

Megatron's "torch" checkpoint format is one ``torch.save`` file per rank. ``torch.save`` needs the
whole state dict in memory and ``torch.load`` reads it all (or memory-maps it, which still leaves
every touched page resident). Converting a model bigger than RAM needs neither:

- :func:`save_streaming` writes the same zip layout ``torch.save`` writes (``data.pkl``,
  ``data/<key>`` records, ``.format_version``, ``.storage_alignment``, ``byteorder``), but produces
  each tensor only when the pickler reaches it, writes its bytes at once and frees them. The file
  loads with plain ``torch.load(..., weights_only=True)``; only the order of records in the zip
  differs (tensor records come before ``data.pkl``; loaders find records by name).
- :class:`LazyTorchFile` unpickles ``data.pkl`` only (tensors become handles) and reads a tensor's
  record when asked. Its unpickler accepts only what a state dict holds (dicts, numbers, strings,
  tensors); anything else is refused rather than executed.

Both use torch's own zip reader/writer (``torch.serialization._open_zipfile_writer``,
``torch._C.PyTorchFileReader``), as ``torch.save``/``torch.load`` do.
"""

from __future__ import annotations

import io
import pickle
import sys
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swiftcore_megatron.errors import CheckpointError

__all__ = ["LazyTensor", "LazyTorchFile", "save_streaming"]

_PROTOCOL = 2  # torch.serialization.DEFAULT_PROTOCOL


class _Deferred:
    """Stands in for a tensor in the object being pickled; produces it when the pickler gets there."""

    def __init__(self, produce: Callable[[], Any]) -> None:
        self.produce = produce

    def __reduce_ex__(self, protocol: Any) -> Any:
        tensor = self.produce()
        return tensor.contiguous().__reduce_ex__(protocol)


def save_streaming(path: str | Path, state: dict[str, Callable[[], Any]], extra: dict[str, Any]) -> int:
    """Write ``{"model": {key: produce()}, **extra}`` as a ``torch.save`` file, one tensor in memory at a time.

    Args:
        path: the file to write.
        state: state-dict key -> zero-argument function returning that tensor, in the order to write.
        extra: other top-level entries (plain Python values, no tensors).

    Returns:
        Bytes of tensor data written.
    """
    import torch
    from torch.serialization import _get_storage_alignment, _open_zipfile_writer

    written = 0
    with _open_zipfile_writer(str(path)) as zip_file:

        class Pickler(pickle.Pickler):
            counter = 0

            def persistent_id(self, obj: Any) -> Any:
                nonlocal written
                if not isinstance(obj, torch.storage.TypedStorage):
                    return None
                storage = obj._untyped_storage
                key = str(Pickler.counter)
                Pickler.counter += 1
                numel = obj._size()
                zip_file.write_record(f"data/{key}", storage, storage.nbytes())
                written += storage.nbytes()
                # The pickler's memo keeps the storage object alive until the end; its bytes are
                # already on disk, so release them now.
                storage.resize_(0)
                return ("storage", getattr(torch, obj._pickle_storage_type()), key, "cpu", numel)

        data = io.BytesIO()
        Pickler(data, protocol=_PROTOCOL).dump({"model": {k: _Deferred(p) for k, p in state.items()}, **extra})
        value = data.getvalue()
        zip_file.write_record("data.pkl", value, len(value))
        zip_file.write_record(".format_version", "1", 1)
        alignment = str(_get_storage_alignment())
        zip_file.write_record(".storage_alignment", alignment, len(alignment))
        zip_file.write_record("byteorder", sys.byteorder, len(sys.byteorder))
    return written


@dataclass(frozen=True)
class _StorageRef:
    key: str
    dtype: Any
    numel: int


@dataclass(frozen=True)
class LazyTensor:
    """A tensor in a :class:`LazyTorchFile`, read from disk by :meth:`LazyTorchFile.load`.

    Attributes:
        storage: which record holds the bytes.
        offset: storage offset in elements.
        size: tensor shape.
        stride: tensor strides.
    """

    storage: _StorageRef
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]

    @property
    def dtype(self) -> Any:
        """The tensor's dtype."""
        return self.storage.dtype


def _rebuild_tensor(storage: _StorageRef, offset: int, size: Any, stride: Any, *_: Any) -> LazyTensor:
    return LazyTensor(storage, int(offset), tuple(size), tuple(stride))


class _Unpickler(pickle.Unpickler):
    """Rebuilds state dicts with :class:`LazyTensor` handles; refuses every other class."""

    _ALLOWED = {("collections", "OrderedDict"): OrderedDict, ("builtins", "set"): set}

    def __init__(self, file: Any, where: str) -> None:
        super().__init__(file)
        self.where = where

    def find_class(self, module: str, name: str) -> Any:
        import torch

        if module == "torch._utils" and name == "_rebuild_tensor_v2":
            return _rebuild_tensor
        if module == "torch" and name.endswith("Storage") and hasattr(torch, name):
            return getattr(torch, name)
        if (module, name) in self._ALLOWED:
            return self._ALLOWED[(module, name)]
        raise CheckpointError(
            f"{self.where}: holds a {module}.{name} object; only state dicts of plain tensors can be read "
            "tensor by tensor (load it with torch.load and re-save the 'model' state dict)"
        )

    def persistent_load(self, saved_id: Any) -> _StorageRef:
        import warnings

        _, storage_type, key, _location, numel = saved_id
        with warnings.catch_warnings():  # legacy typed-storage classes name the dtype, as in torch.load
            warnings.simplefilter("ignore", UserWarning)
            dtype = storage_type.dtype
        return _StorageRef(str(key), dtype, int(numel))


class LazyTorchFile:
    """A ``torch.save`` file whose tensors are read one at a time.

    Attributes:
        obj: the unpickled top-level object, tensors replaced by :class:`LazyTensor` handles.
    """

    def __init__(self, path: str | Path) -> None:
        import torch

        self.path = Path(path)
        try:
            self._zip = torch._C.PyTorchFileReader(str(self.path))
        except RuntimeError as exc:
            raise CheckpointError(f"{self.path}: not a torch.save zip file ({exc})") from exc
        if self._zip.has_record("byteorder") and self._zip.get_record("byteorder").decode() != sys.byteorder:
            raise CheckpointError(f"{self.path}: written on a {self._zip.get_record('byteorder')} machine")
        self.obj = _Unpickler(io.BytesIO(self._zip.get_record("data.pkl")), str(self.path)).load()

    def load(self, handle: LazyTensor) -> Any:
        """Read one tensor's bytes from disk (a fresh tensor that owns its memory)."""
        import torch

        ref = handle.storage
        nbytes = ref.numel * torch._utils._element_size(ref.dtype)
        untyped = self._zip.get_storage_from_record(f"data/{ref.key}", nbytes, torch.UntypedStorage)
        untyped = untyped._typed_storage()._untyped_storage
        out = torch.empty(0, dtype=ref.dtype)
        out.set_(untyped, handle.offset, handle.size, handle.stride)
        return out
