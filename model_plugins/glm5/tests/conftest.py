"""Tests here never touch the Hugging Face Hub: every checkpoint is built locally."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _hub_offline() -> Iterator[None]:
    """Set ``HF_HUB_OFFLINE=1`` for the session, so a stray Hub lookup fails instead of waiting on the network."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        yield
