"""swiftcore-bridge-glm5: GLM-5 (``glm_moe_dsa``) <-> megatron-core (no torch or megatron import here)."""

SWIFTCORE_API = "1.0"
__version__ = "0.1.0"

__all__ = ["SWIFTCORE_API", "__version__"]
