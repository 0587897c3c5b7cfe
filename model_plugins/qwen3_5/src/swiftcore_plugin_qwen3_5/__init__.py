"""swiftcore-plugin-qwen3_5: Qwen3.5 dense and MoE model specs (no torch import here)."""

SWIFTCORE_API = "1.0"
__version__ = "0.1.0"

__all__ = ["SWIFTCORE_API", "__version__"]
