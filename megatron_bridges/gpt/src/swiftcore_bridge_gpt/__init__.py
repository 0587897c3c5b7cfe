"""swiftcore-bridge-gpt: Hugging Face <-> Megatron-core bridges for dense GPT and Qwen3-MoE-style decoders.

The plugin module (:mod:`swiftcore_bridge_gpt.plugin`) imports neither torch nor megatron; the bridge
classes live in :mod:`swiftcore_bridge_gpt.gpt` and are imported when a conversion runs.
"""

__version__ = "0.1.0"
