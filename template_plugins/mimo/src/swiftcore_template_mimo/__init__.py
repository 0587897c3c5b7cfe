"""swiftcore-template-mimo: Xiaomi MiMo chat templates (no torch import here)."""

SWIFTCORE_API = "1.0"
__version__ = "0.1.0"

__all__ = ["SWIFTCORE_API", "__version__"]
