"""conftest.py puts back what a test leaves in ``os.environ`` that would change the later tests of its worker: the
plugin set and a torch.distributed world's launch variables (on 2026-12-07 a test that ran on into accelerate left
RANK / WORLD_SIZE / LOCAL_RANK / MASTER_PORT in its xdist worker, and 15 later tests there failed as ranks).

The two tests run in this order, in one process (``--dist loadfile`` keeps a module on one worker).
"""

from __future__ import annotations

import os

import pytest

LEFT = {
    "RANK": "1", "WORLD_SIZE": "3", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "29555", "SWIFTCORE_PLUGINS": "qwen3_5",
}  # fmt: skip
BEFORE = {name: os.environ.get(name) for name in LEFT}


def test_a_test_leaves_a_rank_and_a_plugin_set_in_the_environment() -> None:
    if any(value is not None for value in BEFORE.values()):
        pytest.skip(f"the session was started with some of {sorted(LEFT)} set")
    os.environ.update(LEFT)  # as accelerate's state does: no monkeypatch to undo it


def test_the_next_test_finds_them_as_the_session_did() -> None:
    assert {name: os.environ.get(name) for name in LEFT} == BEFORE
