"""``--resume-from-checkpoint`` never runs code a checkpoint's rank file names (it is a pickle)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from swiftcore_train_megatron import checkpoint

from swiftcore.api import SwiftcoreError


class _RunsCode:
    """Unpickling this calls ``os.system``: what a crafted ``model_optim_rng.pt`` would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _crafted_checkpoint(root: Path, marker: Path) -> Path:
    import torch

    mcore = root / "checkpoint-5" / checkpoint.MCORE_SUBDIR
    rank = mcore / "release" / "mp_rank_00" / "model_optim_rng.pt"
    rank.parent.mkdir(parents=True)
    (mcore / "swiftcore_mcore.json").write_text(json.dumps({"tp": 1, "pp": 1, "ep": 1}))
    state = {"model": _RunsCode(marker), "optimizer": {}, "scheduler": {}, "iteration": 5}
    state["rng_state"] = torch.get_rng_state()
    torch.save(state, rank)
    return root / "checkpoint-5"


def test_a_crafted_rank_file_is_refused_without_running_its_code(tmp_path, monkeypatch) -> None:
    marker = tmp_path / "ran"
    ckpt = _crafted_checkpoint(tmp_path / "out", marker)
    rank = next(ckpt.rglob("model_optim_rng.pt"))
    monkeypatch.setattr(checkpoint, "_rank_path", lambda root, ep, pp: rank)  # no process group needed
    with pytest.raises(
        SwiftcoreError, match=r"model_optim_rng\.pt holds more than tensors and plain values \(.*system"
    ):
        checkpoint.load_checkpoint(ckpt, model=None, optimizer=None, scheduler=None, tp=1, ep=1)
    assert not marker.exists(), "the checkpoint's code ran"


def test_a_plain_rank_file_still_loads(tmp_path) -> None:
    import torch

    path = tmp_path / "model_optim_rng.pt"
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "rng_state": torch.get_rng_state(),
        "iteration": 5,
        "checkpoint_version": 3.0,
    }
    torch.save(state, path)
    loaded = checkpoint._load_rank_state(path)
    assert loaded["iteration"] == 5
    assert torch.equal(loaded["model"]["weight"], model.weight)
