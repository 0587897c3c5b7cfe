"""The "install this bridge" hints in core name distributions that really convert those model types."""

from __future__ import annotations

import re

import swiftcore
from swiftcore.megatron.resolve import BRIDGE_DISTRIBUTIONS


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_hint_points_at_the_distribution_whose_bridge_claims_the_model_type() -> None:
    plugins = swiftcore.load_plugins()
    claimed = {
        (model_type, _normalise(spec.provider.distribution or ""))
        for spec in plugins.registry.all("bridge")
        for model_type in spec.model_types
    }
    wrong = {
        model_type: dist
        for model_type, dist in BRIDGE_DISTRIBUTIONS.items()
        if (model_type, _normalise(dist)) not in claimed
    }
    assert not wrong, f"BRIDGE_DISTRIBUTIONS hints no installed bridge backs: {wrong}"
    # And every model type an installed first-party bridge converts has a hint.
    assert {model_type for model_type, _ in claimed} <= set(BRIDGE_DISTRIBUTIONS)
