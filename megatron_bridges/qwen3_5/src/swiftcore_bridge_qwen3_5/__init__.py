"""swiftcore-bridge-qwen3_5: Qwen3.5's language model <-> Megatron-core; the vision tower is carried through.

The plugin module (:mod:`swiftcore_bridge_qwen3_5.plugin`) imports neither torch nor megatron; the
bridge class lives in :mod:`swiftcore_bridge_qwen3_5.bridge` and is imported when a conversion runs.
"""

__version__ = "0.1.0"
