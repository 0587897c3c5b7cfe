"""swiftcore-bridge-mimo-v2: MiMo-V2-Flash <-> Megatron-core (no torch or megatron import here).

:mod:`~swiftcore_bridge_mimo_v2.bridge` holds the bridge (config facts and tensor rules) and
:mod:`~swiftcore_bridge_mimo_v2.attention` the megatron-core attention module, imported when a model is built.
"""

SWIFTCORE_API = "1.0"
__version__ = "0.1.0"

__all__ = ["SWIFTCORE_API", "__version__"]
