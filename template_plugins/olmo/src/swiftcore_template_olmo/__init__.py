"""swiftcore chat templates for the OLMo family (no torch import here)."""

SWIFTCORE_API = "1.0"
