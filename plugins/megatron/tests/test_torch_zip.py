"""Streamed torch.save files: loadable by torch.load, readable tensor by tensor, nothing else unpickled."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import torch
from swiftcore_megatron import CheckpointError
from swiftcore_megatron.torch_zip import LazyTorchFile, save_streaming


def _tensors() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {
        "w": torch.randn(6, 4, generator=gen),
        "b16": torch.randn(5, generator=gen).to(torch.bfloat16),
        "transposed": torch.randn(3, 7, generator=gen).t(),  # non-contiguous: written contiguous
        "ints": torch.arange(9, dtype=torch.int64).reshape(3, 3),
    }


@pytest.mark.parametrize("mmap", [False, True])
def test_streamed_file_loads_with_torch_load(tmp_path: Path, mmap: bool) -> None:
    tensors = _tensors()
    produced: list[str] = []

    def producer(key: str):  # type: ignore[no-untyped-def]
        def make() -> torch.Tensor:
            produced.append(key)
            return tensors[key].clone()

        return make

    written = save_streaming(tmp_path / "f.pt", {k: producer(k) for k in tensors}, {"iteration": 0, "v": 3.0})
    assert produced == list(tensors)  # each produced once, in order
    assert written == sum(t.numel() * t.element_size() for t in tensors.values())
    loaded = torch.load(tmp_path / "f.pt", weights_only=True, mmap=mmap)
    assert loaded["iteration"] == 0 and loaded["v"] == 3.0
    assert list(loaded["model"]) == list(tensors)
    for key, tensor in tensors.items():
        assert loaded["model"][key].dtype == tensor.dtype
        assert torch.equal(loaded["model"][key], tensor)


def test_lazy_reader_reads_torch_save_files_one_tensor_at_a_time(tmp_path: Path) -> None:
    tensors = _tensors()
    torch.save({"model": {**tensors, "x._extra_state": None}, "checkpoint_version": 3.0}, tmp_path / "f.pt")
    lazy = LazyTorchFile(tmp_path / "f.pt")
    state = lazy.obj["model"]
    assert state["x._extra_state"] is None
    assert state["w"].size == (6, 4) and state["w"].dtype == torch.float32
    for key, tensor in tensors.items():
        assert torch.equal(lazy.load(state[key]), tensor)


def test_lazy_reader_refuses_arbitrary_objects(tmp_path: Path) -> None:
    torch.save({"model": {}, "args": argparse.Namespace(lr=1.0)}, tmp_path / "f.pt")
    with pytest.raises(CheckpointError, match="holds a argparse.Namespace object"):
        LazyTorchFile(tmp_path / "f.pt")


def test_lazy_reader_refuses_a_file_that_is_not_a_torch_zip(tmp_path: Path) -> None:
    (tmp_path / "f.pt").write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="not a torch.save zip file"):
        LazyTorchFile(tmp_path / "f.pt")
