"""Hook implementations of swiftcore-template-olmo: the ``olmoe`` template."""

from __future__ import annotations

from swiftcore.api import TemplateSpec, hookimpl

SWIFTCORE_API = "1.0"

_PKG = "swiftcore_template_olmo"


@hookimpl
def swiftcore_register_templates() -> list[TemplateSpec]:
    """OLMoE-Instruct's template (reproduces the official Jinja packaged in ``official/``)."""
    return [
        TemplateSpec(
            name="olmoe",
            factory=f"{_PKG}.olmoe:OlmoeTemplate",
            official=f"{_PKG}:official/olmoe.jinja",
            # <|user|>, <|assistant|> and <|system|> are plain text in OLMoE's vocabulary, not added tokens.
            special_tokens=("<|endoftext|>", "<|padding|>"),
            supports=("system",),
            description="OLMoE-Instruct (Tulu style <|user|>/<|assistant|>, <|endoftext|> ends a reply)",
        ),
    ]
