"""Building blocks of chat templates: the :class:`Template` base class, segments, pieces and reply parsing.

See ``docs/writing-a-plugin.md`` ("A new template") for how they fit together.
"""

from __future__ import annotations

from swiftcore.template import (
    JinjaTemplate,
    SampleTooLongError,
    Segment,
    Template,
    TemplateError,
    get_template,
    official_chat_template,
    read_resource,
    render_official,
)
from swiftcore.template.conversation import Conversation, generation_record, media_type, normalize_record, tojson
from swiftcore.template.parsing import json_or_text, split_reasoning, tool_call
from swiftcore.template.pieces import media, prompt, strip_pieces, text_of
from swiftcore.template.sample import ENCODE_CHUNK, MediaExpander, SampleEncoder, media_tags_to_parts

__all__ = [
    "ENCODE_CHUNK",
    "Conversation",
    "JinjaTemplate",
    "MediaExpander",
    "Segment",
    "SampleEncoder",
    "SampleTooLongError",
    "Template",
    "TemplateError",
    "generation_record",
    "get_template",
    "json_or_text",
    "media",
    "media_tags_to_parts",
    "media_type",
    "normalize_record",
    "official_chat_template",
    "prompt",
    "read_resource",
    "render_official",
    "split_reasoning",
    "strip_pieces",
    "text_of",
    "tojson",
    "tool_call",
]
