"""swiftcore-bridge-gpt: Hugging Face <-> Megatron-core bridges for dense GPT and Qwen3-MoE-style decoders.

The plugin module (:mod:`swiftcore_bridge_gpt.plugin`) imports neither torch nor megatron; the bridge
classes live in :mod:`swiftcore_bridge_gpt.gpt` and are imported when a conversion runs.
"""

from __future__ import annotations

from swiftcore.api import lazy_exports

__version__ = "0.1.0"

__all__ = [
    "GATE_UP",
    "DeepSeekV3Bridge",
    "GPTBridge",
    "GPTMoEBridge",
]

#: name -> the submodule that defines it, imported on first use (importing the package stays light).
_WHERE = {
    "DeepSeekV3Bridge": "deepseek",
    "GATE_UP": "gpt",
    "GPTBridge": "gpt",
    "GPTMoEBridge": "gpt",
}
__getattr__ = lazy_exports(__name__, _WHERE)
