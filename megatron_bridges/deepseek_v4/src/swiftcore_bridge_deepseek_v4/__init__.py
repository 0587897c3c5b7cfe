"""swiftcore-bridge-deepseek-v4: DeepSeek-V4 <-> Megatron-core.

The plugin module (:mod:`swiftcore_bridge_deepseek_v4.plugin`) and the bridge class
(:mod:`swiftcore_bridge_deepseek_v4.bridge`) import neither torch nor megatron; the megatron-core
modules of the layer spec (:mod:`~swiftcore_bridge_deepseek_v4.spec` and the modules it names) are
imported when a model is built.
"""

__version__ = "0.1.0"
