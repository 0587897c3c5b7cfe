"""swiftcore chat templates for the qwen family."""

from __future__ import annotations

from swiftcore.api import lazy_exports

SWIFTCORE_API = "1.5"  # written against plugin API 1.5: the package face uses swiftcore.api.lazy_exports

__all__ = [
    "Qwen35Template",
]

#: name -> the submodule that defines it, imported on first use (importing the package stays light).
_WHERE = {
    "Qwen35Template": "qwen3_5",
}
__getattr__ = lazy_exports(__name__, _WHERE)
