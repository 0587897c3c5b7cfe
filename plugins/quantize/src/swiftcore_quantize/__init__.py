"""swiftcore-plugin-quantize: ``swiftcore export --to-hf OUT --quantize SCHEME`` with llm-compressor.

Importing this package is cheap: torch, transformers and llm-compressor load when an export runs.
"""

from __future__ import annotations

from swiftcore.api import lazy_exports

__all__ = ["SCHEMES", "default_ignore", "get_scheme", "quantize_checkpoint"]

__getattr__ = lazy_exports(
    __name__,
    {
        "SCHEMES": "schemes",
        "get_scheme": "schemes",
        "default_ignore": "export",
        "quantize_checkpoint": "export",
    },
)
