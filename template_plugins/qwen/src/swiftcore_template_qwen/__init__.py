"""swiftcore chat templates for the qwen family."""

SWIFTCORE_API = "1.0"
