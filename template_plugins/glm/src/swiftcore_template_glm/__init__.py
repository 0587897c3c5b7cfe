"""swiftcore chat templates for the GLM family (no torch import here)."""

SWIFTCORE_API = "1.0"
