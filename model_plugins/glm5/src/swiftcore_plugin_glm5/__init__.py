"""swiftcore-plugin-glm5: the GLM-5 model spec (no torch import here)."""

SWIFTCORE_API = "1.0"
__version__ = "0.1.0"

__all__ = ["SWIFTCORE_API", "__version__"]
