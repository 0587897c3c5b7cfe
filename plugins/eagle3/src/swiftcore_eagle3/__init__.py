"""swiftcore-plugin-eagle3: ``swiftcore train --recipe eagle3`` trains an Eagle3 draft head (speculators' model, the
format vLLM's ``--speculative-config`` loads) for a frozen target; :func:`speculative_generate` decodes with it on
transformers: greedily token for token as the target alone would, or by speculative sampling distributed as the
target's own sampling.

Importing this package is cheap: torch, transformers and speculators load when a draft is trained or used.
"""

from __future__ import annotations

from swiftcore.api import lazy_exports

__all__ = ["SpeculativeDecoder", "SpeculativeOutput", "load_draft", "speculative_generate", "speculative_steps"]

__getattr__ = lazy_exports(
    __name__,
    {
        "SpeculativeDecoder": "speculative",
        "SpeculativeOutput": "speculative",
        "speculative_steps": "speculative",
        "speculative_generate": "speculative",
        "load_draft": "draft",
    },
)
