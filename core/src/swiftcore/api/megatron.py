"""Moved: what a Megatron-core bridge is written with is the ``swiftcore-megatron`` distribution now.

Import it from there (``from swiftcore_megatron import MegatronBridge, Rule, COLUMN, ROW, QKV, ...``) and add
``swiftcore-megatron`` to the bridge's dependencies. This module stays for one minor version so that an old
import fails with that instruction rather than with a bare ``ModuleNotFoundError``.
"""

raise ImportError(
    "swiftcore.api.megatron moved to the swiftcore-megatron distribution (plugin API 1.2): "
    "use `from swiftcore_megatron import MegatronBridge, ...` and depend on swiftcore-megatron"
)
