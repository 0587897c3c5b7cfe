"""swiftcore chat templates for the gemma family."""

SWIFTCORE_API = "1.0"
