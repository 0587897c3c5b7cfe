"""TinyFamily and build_tiny_family on a stand-in family (a tiny Qwen3), independent of model plugins."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from swiftcore_tiny import VOCAB, TinyFamily, TinyProcessor, TokenId, build_tiny_family
from transformers import Qwen2VLImageProcessorPil, Qwen3Config
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

from swiftcore.errors import SwiftcoreError

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|image_pad|>")
TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def _family(**changes: Any) -> TinyFamily:
    family = TinyFamily(
        config_class=Qwen3Config,
        config={
            "vocab_size": VOCAB,
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "eos_token_id": [TokenId("<|im_end|>"), TokenId("<|endoftext|>")],
            "pad_token_id": TokenId("<|endoftext|>"),
            "rope_parameters": {"rope_type": "default", "rope_theta": 10_000.0},
        },
        special_tokens=SPECIALS,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        named_tokens={"image_token": "<|image_pad|>"},
        style="split_bytelevel",
        split_regex=PRETOKENIZE_REGEX,
        tokenizer_class="Qwen2Tokenizer",
        vocab_size=320,
    )
    return dataclasses.replace(family, **changes)


@pytest.fixture()
def template_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A package holding a chat template, as a template plugin ships its official one."""
    package = tmp_path / "tiny_family_templates"
    (package / "official").mkdir(parents=True)
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "official" / "chat.jinja").write_text(TEMPLATE, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "tiny_family_templates:official/chat.jinja"


def test_the_config_takes_its_vocabulary_and_ids_from_the_tokenizer(tmp_path: Path, template_package: str) -> None:
    config, tokenizer = build_tiny_family(_family(chat_template=template_package), tmp_path)
    assert isinstance(config, Qwen3Config)
    assert config.vocab_size == len(tokenizer)
    assert config.eos_token_id == [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    assert config.pad_token_id == tokenizer.pad_token_id
    assert tokenizer.chat_template == TEMPLATE
    assert tokenizer.image_token == "<|image_pad|>"
    saved = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert saved["tokenizer_class"] == "Qwen2Tokenizer"


def test_without_a_tokenizer_the_config_follows_the_builders_layout(tmp_path: Path) -> None:
    family = _family()
    _, tokenizer = build_tiny_family(family, tmp_path)
    config = family.make_config()
    assert config.vocab_size == family.vocab_size
    # The builder puts the specials first, in order: the layout the tokenizer-less config assumes.
    assert config.eos_token_id == family.make_config(tokenizer).eos_token_id == [2, 0]
    assert config.pad_token_id == 0


def test_each_config_gets_its_own_copy_of_the_values() -> None:
    family = _family()
    first = family.make_config()
    first.rope_parameters["rope_theta"] = 1.0
    assert family.make_config().rope_parameters["rope_theta"] == 10_000.0
    assert family.config["rope_parameters"]["rope_theta"] == 10_000.0


def test_a_processor_described_as_data_is_saved(tmp_path: Path) -> None:
    image_processor = Qwen2VLImageProcessorPil(patch_size=16, image_mean=[0.5] * 3)
    processor = TinyProcessor("Qwen3VLProcessor", {"image_processor": image_processor}, {"image_seq_length": 7})
    _family(processor=processor).write_tokenizer(tmp_path)
    saved = json.loads((tmp_path / "processor_config.json").read_text(encoding="utf-8"))
    assert saved["processor_class"] == "Qwen3VLProcessor" and saved["image_seq_length"] == 7
    assert saved["image_processor"]["patch_size"] == 16 and saved["image_processor"]["image_mean"] == [0.5] * 3


def test_a_processor_that_needs_code_is_a_hook_given_the_tokenizer(tmp_path: Path) -> None:
    calls: list[tuple[Path, Any]] = []
    tokenizer = _family(processor=lambda out, tok: calls.append((out, tok))).write_tokenizer(tmp_path)
    assert calls == [(tmp_path, tokenizer)]


def test_a_token_the_config_names_must_be_a_special_token() -> None:
    with pytest.raises(SwiftcoreError, match=r"family Qwen3Config: config names \['<\|im_ned\|>'\] not in special"):
        _family(config={"eos_token_id": [TokenId("<|im_ned|>")]})


def test_a_chat_template_is_a_package_resource_reference(tmp_path: Path) -> None:
    with pytest.raises(SwiftcoreError, match="not a 'package:path/in/package' reference"):
        _family(chat_template="official/chat.jinja").write_tokenizer(tmp_path)


def test_the_description_is_frozen() -> None:
    values = {"vocab_size": VOCAB}
    family = _family(config=values)
    values["vocab_size"] = 3  # the caller's dict is copied, not shared
    assert family.config["vocab_size"] is VOCAB
    with pytest.raises(dataclasses.FrozenInstanceError):
        family.eos = "<|endoftext|>"  # type: ignore[misc]
    with pytest.raises(TypeError):
        family.config["vocab_size"] = 3  # type: ignore[index]


def test_describing_a_family_stays_light() -> None:
    """A plugin builds its TinyFamily without torch, transformers or tokenizers; only building loads them."""
    code = (
        "import sys; from swiftcore_tiny import VOCAB, TinyFamily, TinyProcessor, TokenId; "
        "TinyFamily(dict, {'vocab_size': VOCAB, 'eos_token_id': TokenId('<e>')}, ('<e>',), '<e>',"
        " processor=TinyProcessor('P', {})); "
        "print(sorted(m for m in ('torch', 'transformers', 'tokenizers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


_WITHOUT_TINY = """
import sys


class _NoTiny:  # as if the model plugins' [tiny] extra were not installed
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "swiftcore_tiny":
            raise ModuleNotFoundError(f"No module named {name!r}")


sys.meta_path.insert(0, _NoTiny())
from swiftcore.api import load_plugins, resolve

specs = [s for s in load_plugins(env={}).registry.all("model") if s.tiny_config]
for spec in specs:
    for ref in (spec.tiny_config, spec.tiny_tokenizer):
        resolve(ref, what=spec.name)
print(len(specs))
"""


def test_installed_model_plugins_tiny_references_resolve_without_swiftcore_tiny() -> None:
    """A plugin builds its TinyFamily on call, so ``plugins --check`` passes where its ``[tiny]`` extra is missing."""
    done = subprocess.run([sys.executable, "-c", _WITHOUT_TINY], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    if int(done.stdout.split()[-1]) == 0:
        pytest.skip("no installed model plugin has a tiny checkpoint")
