"""swiftcore chat templates for the deepseek family."""

SWIFTCORE_API = "1.0"
