"""swiftcore-plugin-qwen3-omni: Qwen3-Omni's model spec, template, talker training and speech out (no torch here)."""

SWIFTCORE_API = "1.0"
__version__ = "0.1.0"

__all__ = ["SWIFTCORE_API", "__version__"]
