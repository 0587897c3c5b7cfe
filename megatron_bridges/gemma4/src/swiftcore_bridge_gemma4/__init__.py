"""swiftcore-bridge-gemma4: Gemma 4's text decoder <-> Megatron-core; vision and audio towers are carried through.

The plugin module (:mod:`swiftcore_bridge_gemma4.plugin`) imports neither torch nor megatron; the
bridge class lives in :mod:`swiftcore_bridge_gemma4.bridge` (rules and config facts, no torch at
import) and the megatron-core modules in :mod:`~swiftcore_bridge_gemma4.norm`,
:mod:`~swiftcore_bridge_gemma4.attention`, :mod:`~swiftcore_bridge_gemma4.moe`,
:mod:`~swiftcore_bridge_gemma4.layer` and :mod:`~swiftcore_bridge_gemma4.model`, imported when a
model is built.
"""

__version__ = "0.1.0"
