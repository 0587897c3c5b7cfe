"""The chat-template engine: render conversations exactly as official templates do, and encode them.

::

    from swiftcore.template import get_template
    tpl = get_template("qwen3_5", plugins)
    enc = tpl.encode(tokenizer, {"messages": [...]})   # input_ids, labels (-100 = no loss), media, text

Importing this package does not import transformers; the ``jinja`` fallback and the tokenizer-based
encoding import what they need when used.
"""

from __future__ import annotations

from swiftcore.template.base import Template
from swiftcore.template.conversation import Conversation, normalize_record
from swiftcore.template.encoding import IGNORE_INDEX, LOSS_POLICIES, TRUNCATIONS, Encoded, Media
from swiftcore.template.errors import SampleTooLongError, TemplateError
from swiftcore.template.jinja import JinjaTemplate, render_official
from swiftcore.template.resolve import get_template, official_chat_template, read_resource, template_spec
from swiftcore.template.segments import Layout, Segment

__all__ = [
    "IGNORE_INDEX",
    "LOSS_POLICIES",
    "TRUNCATIONS",
    "Conversation",
    "Encoded",
    "JinjaTemplate",
    "Layout",
    "Media",
    "SampleTooLongError",
    "Segment",
    "Template",
    "TemplateError",
    "get_template",
    "normalize_record",
    "official_chat_template",
    "read_resource",
    "render_official",
    "template_spec",
]
