"""The contract catches templates that only an independent rendering shows to be wrong: one that drops the
system prompt, one whose trained replies end with no stop token, each as a template plugin and as a model
plugin's default template, and a template that differs from reference renderings.

A GLM-style template (nothing after the last reply) passes: the encoder appends a stop token to a last reply
the rendering ends with none. It fails when its stop word is no special token of the tokenizer (the encoder
has nothing to append), and as a model's default when the generation config stops at another token.

The broken templates declare no official Jinja, so before this the contract compared them with nothing:
it checked that they render and that training and inference agree with each other (the template against
itself), which they do. A correct ChatML template, built the same way, passes every check (no false alarm).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from swiftcore_testing import PluginContract
from swiftcore_testing.rules import ContractViolation
from swiftcore_testing.samples import load_samples

from swiftcore.api import ModelSpec, TemplateSpec, hookimpl

MODULE = "kit_broken_templates"

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
#: ChatML that skips system messages instead of rendering (or refusing) them.
DROPS_SYSTEM = (
    "{% for m in messages %}{% if m.role != 'system' %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
#: GLM style: a turn ends where the next one starts, so the last reply is followed by nothing.
GLM = (
    "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
GLM_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>", "<|observation|>")

#: Reference renderings of the kit's sample ``contract-system-multi``, as ChatML renders it.
REFERENCE = [
    {
        "id": "contract-system-multi",
        "mode": "full",
        "text": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nSay hello.<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nCount to three, please.<|im_end|>\n"
        "<|im_start|>assistant\nOne, two, three.<|im_end|>\n",
    },
    {
        "id": "contract-system-multi",
        "mode": "prompt",
        "text": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nSay hello.<|im_end|>\n"
        "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nCount to three, please.<|im_end|>\n"
        "<|im_start|>assistant\n",
    },
]


def _jinja(source: str, **kwargs: Any) -> Callable[[], Any]:
    def factory() -> Any:
        from swiftcore.api.template import JinjaTemplate

        return JinjaTemplate(chat_template=source, **kwargs)

    return factory


def _tokenizer_writer(chat_template: str, special: tuple[str, ...], eos: str) -> Callable[[Path], None]:
    """A ``tiny_tokenizer``: a local tokenizer carrying the model's own chat template and eos token."""

    def write(out_dir: Path) -> None:
        from swiftcore_testing.templates import build_test_tokenizer

        build_test_tokenizer(special, chat_template=chat_template, eos_token=eos).save_pretrained(str(out_dir))

    return write


def tiny_config(tokenizer: Any = None, **kwargs: Any) -> Any:
    """A two-layer Qwen3 sized to the tiny tokenizer."""
    from transformers import Qwen3Config

    return Qwen3Config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        vocab_size=len(tokenizer) if tokenizer is not None else 1024,
        **kwargs,
    )


def observation_config(tokenizer: Any = None) -> Any:
    """:func:`tiny_config` whose generation stops at ``<|observation|>`` only, a token no reply ends with."""
    return tiny_config(tokenizer, eos_token_id=tokenizer.convert_tokens_to_ids("<|observation|>"))


class TemplatePlugin:
    """The templates: ``kit_chatml`` and ``kit_glm`` (GLM style; correct), ``kit_drops_system`` and
    ``kit_no_stop`` (GLM style, its stop word no special token)."""

    SWIFTCORE_API = "1.0"

    @hookimpl
    def swiftcore_register_templates(self) -> list[TemplateSpec]:
        return [
            TemplateSpec(
                name="kit_chatml", factory=f"{MODULE}:chatml", special_tokens=CHATML_TOKENS, supports=("system",)
            ),
            TemplateSpec(
                name="kit_drops_system",
                factory=f"{MODULE}:drops_system",
                special_tokens=CHATML_TOKENS,
                supports=("system",),
            ),
            TemplateSpec(name="kit_glm", factory=f"{MODULE}:glm", special_tokens=GLM_TOKENS),
            TemplateSpec(name="kit_no_stop", factory=f"{MODULE}:no_stop", special_tokens=GLM_TOKENS),
        ]


class ModelPlugin:
    """One model per template, each with a tiny tokenizer carrying the chat template its family ships."""

    SWIFTCORE_API = "1.0"

    @hookimpl
    def swiftcore_register_models(self) -> list[ModelSpec]:
        def model(name: str, template: str, tokenizer: str, config: str = "tiny_config") -> ModelSpec:
            return ModelSpec(
                name=name,
                model_types=(name,),
                model_class="transformers:Qwen3ForCausalLM",
                default_template=template,
                tiny_config=f"{MODULE}:{config}",
                tiny_tokenizer=f"{MODULE}:{tokenizer}",
            )

        return [
            model("kit_chat_ok", "kit_chatml", "chatml_tokenizer"),
            model("kit_chat_drops_system", "kit_drops_system", "chatml_tokenizer"),
            model("kit_chat_glm", "kit_glm", "glm_tokenizer"),
            model("kit_chat_no_stop", "kit_glm", "glm_tokenizer", "observation_config"),
        ]


@pytest.fixture
def plugins(swiftcore_plugins: Any, register_plugin: Callable[..., Any], memory_module: Callable[..., Any]) -> Any:
    """The plugin set holding ``kit_templates`` and ``kit_models``."""
    memory_module(
        MODULE,
        chatml=_jinja(CHATML),
        drops_system=_jinja(DROPS_SYSTEM),
        # GLM's generation config stops at the next turn's start, which ends every reply but the last.
        glm=_jinja(GLM, end_of_turn=("<|user|>",)),
        # The same, its stop word not among the spec's special tokens: the encoder cannot append it.
        no_stop=_jinja(GLM, end_of_turn=("<|endoftext|>",)),
        tiny_config=tiny_config,
        observation_config=observation_config,
        chatml_tokenizer=_tokenizer_writer(CHATML, CHATML_TOKENS, "<|im_end|>"),
        glm_tokenizer=_tokenizer_writer(GLM, GLM_TOKENS, "<|user|>"),
    )
    register_plugin(TemplatePlugin(), "kit_templates")
    register_plugin(ModelPlugin(), "kit_models")
    return swiftcore_plugins


@pytest.fixture
def tiny(plugins: Any, tmp_path: Path) -> Callable[[str], Path]:
    """``tiny(model)``: its ``make_tiny`` checkpoint, made once per test."""
    from swiftcore_tiny import make_tiny

    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = make_tiny(plugins.registry.get("model", name), tmp_path / name, seed=0)
        return made[name]

    return get


@pytest.fixture
def samples() -> list[dict[str, Any]]:
    """The kit's own samples (one has a system prompt)."""
    return load_samples(None)


def _violation(rule: str, test: Callable[..., None], *args: Any) -> str:
    """The message of the :class:`ContractViolation` the contract test ``test(*args)`` raises, naming ``rule``."""
    with pytest.raises(ContractViolation) as caught:
        test(*args)
    message = str(caught.value)
    assert message.startswith(f"contract rule '{rule}' broken"), message
    return message


# ---------------------------------------------------------------------- template plugins


def test_correct_template_passes(plugins: Any, contract_for: Any, samples: list[dict[str, Any]]) -> None:
    contract = contract_for("kit_templates")
    contract.test_template_renders("kit_chatml", plugins, samples)
    contract.test_template_train_serve("kit_chatml", plugins, samples)
    contract.test_template_official("kit_chatml", plugins, samples, REFERENCE)


def test_template_dropping_the_system_prompt_fails_renders(
    plugins: Any, contract_for: Any, samples: list[dict[str, Any]]
) -> None:
    contract = contract_for("kit_templates")
    message = _violation("template-renders", contract.test_template_renders, "kit_drops_system", plugins, samples)
    assert "sample contract-system-multi: the system message 0 ('You are a helpful assistant.') is not in" in message
    assert "the template drops it; a template that cannot render a system prompt must raise TemplateError" in message


def test_template_differing_from_reference_renderings_fails_official(
    plugins: Any, contract_for: Any, samples: list[dict[str, Any]]
) -> None:
    message = _violation(
        "template-official",
        contract_for("kit_templates").test_template_official,
        "kit_drops_system",
        plugins,
        samples,
        REFERENCE,
    )
    assert "sample contract-system-multi (full): differs from the reference rendering from character 12" in message
    assert "expected '<|im_start|>system\\nYou are a helpful" in message, message
    assert "sample contract-system-multi (generation prompt): differs" in message


def test_template_without_a_stop_token_after_the_last_reply_fails_train_serve(
    plugins: Any, contract_for: Any, samples: list[dict[str, Any]]
) -> None:
    message = _violation(
        "template-train-serve",
        contract_for("kit_templates").test_template_train_serve,
        "kit_no_stop",
        plugins,
        samples,
    )
    assert "sample contract-single: a trained reply ends 'The capital of France is Paris.', with none" in message
    assert "stop words ['<|endoftext|>']: a model trained on it never learns to stop" in message, message
    assert "declare it in the template's special_tokens" in message, message


def test_glm_style_template_passes_train_serve_its_last_reply_closed_by_the_encoder(
    plugins: Any, contract_for: Any, samples: list[dict[str, Any]]
) -> None:
    """Nothing follows GLM's last reply; training appends the stop word, the rendering stays as it is."""
    from swiftcore_testing.templates import build_test_tokenizer, loss_runs

    from swiftcore.api.template import get_template

    contract_for("kit_templates").test_template_train_serve("kit_glm", plugins, samples)
    template = get_template("kit_glm", plugins)
    tokenizer = build_test_tokenizer(GLM_TOKENS, ["The capital of France is Paris."])
    record = next(r for r in samples if r["id"] == "contract-single")
    assert template.render(record).endswith("<|assistant|>\nThe capital of France is Paris.")
    encoded = template.encode(tokenizer, record)
    assert loss_runs(encoded.input_ids, encoded.labels, tokenizer) == ["The capital of France is Paris.<|user|>"]


def test_reference_renderings_give_a_template_without_official_jinja_its_test(tmp_path: Path) -> None:
    """A contract with reference renderings compares each template they are for (here DeepSeek-V4, whose
    official format is a Python script, not Jinja, so it had no such test)."""
    rows = tmp_path / "expected.jsonl"
    rows.write_text('{"id": "contract-single", "mode": "full", "text": "x", "template": "deepseek_v4"}\n')

    class WithReference(PluginContract):
        plugin = "template_deepseek"
        renderings = str(rows)

    class Without(PluginContract):
        plugin = "template_deepseek"

    if WithReference.test_template_renders is None:
        pytest.skip("needs swiftcore-template-deepseek installed")
    assert [m.args for m in WithReference.test_template_official.pytestmark] == [("name", ["deepseek_v4"])]
    assert Without.test_template_official is None


# ---------------------------------------------------------------------- model plugins


def test_correct_model_template_passes(
    plugins: Any, contract_for: Any, tiny: Callable[[str], Path], samples: list[dict[str, Any]]
) -> None:
    contract = contract_for("kit_models")
    contract.test_model_template_renders("kit_chat_ok", plugins, tiny, samples)
    contract.test_model_template_official("kit_chat_ok", plugins, tiny, samples, REFERENCE)
    contract.test_model_template_train_serve("kit_chat_ok", plugins, tiny, samples)


def test_model_template_dropping_the_system_prompt_differs_from_the_tokenizers_chat_template(
    plugins: Any, contract_for: Any, tiny: Callable[[str], Path], samples: list[dict[str, Any]]
) -> None:
    contract = contract_for("kit_models")
    message = _violation(
        "model-template-official",
        contract.test_model_template_official,
        "kit_chat_drops_system",
        plugins,
        tiny,
        samples,
        [],
    )
    assert "sample contract-system-multi (full): differs from the tokenizer's own chat template from character 12" in (
        message
    ), message
    assert "expected '<|im_start|>system\\nYou are a helpful assistant." in message
    message = _violation(
        "model-template-renders",
        contract.test_model_template_renders,
        "kit_chat_drops_system",
        plugins,
        tiny,
        samples,
    )
    assert "the system message 0 ('You are a helpful assistant.') is not in the rendering" in message


def test_model_template_without_a_stop_token_fails_train_serve(
    plugins: Any, contract_for: Any, tiny: Callable[[str], Path], samples: list[dict[str, Any]]
) -> None:
    message = _violation(
        "model-template-train-serve",
        contract_for("kit_models").test_model_template_train_serve,
        "kit_chat_no_stop",
        plugins,
        tiny,
        samples,
    )
    assert "sample contract-single: a trained reply ends " in message, message
    assert "not with a token the generation config stops at (['<|observation|>']): a model trained on it never" in (
        message
    ), message


def test_glm_style_model_template_passes_train_serve(
    plugins: Any, contract_for: Any, tiny: Callable[[str], Path], samples: list[dict[str, Any]]
) -> None:
    """The tokenizer's eos (``<|user|>``, what the generation config stops at) closes the last reply."""
    contract_for("kit_models").test_model_template_train_serve("kit_chat_glm", plugins, tiny, samples)
