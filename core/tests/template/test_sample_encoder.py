"""One sample path: the prompt an engine sends is the prompt part of the sample training makes, token for token."""

from __future__ import annotations

from typing import Any

import pytest
from swiftcore_testing.templates import build_test_tokenizer

from swiftcore.errors import SwiftcoreError
from swiftcore.template import JinjaTemplate
from swiftcore.template.sample import SampleEncoder, media_tags_to_parts

# ChatML whose generation prompt depends on enable_thinking (as Qwen's does): the chat defaults change tokens.
THINKING = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}{% generation %}"
    "{{ m.content }}<|im_end|>{% endgeneration %}{% else %}{{ m.content }}<|im_end|>{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
CHAT = [{"role": "user", "content": "Is 12 even?"}, {"role": "assistant", "content": "even"}]


@pytest.fixture(scope="module")
def tok() -> Any:
    return build_test_tokenizer(
        ("<|im_start|>", "<|im_end|>", "<think>", "</think>"),
        ["Is 12 even? even odd user assistant"],
        chat_template=THINKING,
        eos_token="<|im_end|>",
    )


def _train_ids(encoder: SampleEncoder, record: dict) -> list[int]:
    (sample,) = encoder.train_samples([record], loss_policy="last_round", max_length=256, truncation="error")
    return sample["input_ids"]


@pytest.mark.parametrize("defaults", [{}, {"enable_thinking": True}])
def test_the_prompt_is_the_prompt_part_of_the_training_sample(tok: Any, defaults: dict) -> None:
    encoder = SampleEncoder(JinjaTemplate(), tok, chat_defaults=defaults)
    prompt, media = encoder.prompt({"messages": CHAT[:1]})
    assert media is None
    trained = _train_ids(encoder, {"messages": CHAT})
    assert trained[: len(prompt)] == prompt
    reply = tok.decode(trained[len(prompt) :])
    assert reply.rstrip("\n") == "even<|im_end|>"  # what follows the prompt is the reply alone


def test_the_chat_defaults_reach_the_template(tok: Any) -> None:
    """``enable_thinking=False`` (a checkpoint trained without reasoning) changes this template's generation
    prompt; the record's own setting wins over the default."""
    off = SampleEncoder(JinjaTemplate(), tok, chat_defaults={"enable_thinking": False})
    assert "<think>" in tok.decode(off.prompt({"messages": CHAT[:1]})[0])
    asked_on = {"messages": CHAT[:1], "chat_template_kwargs": {"enable_thinking": True}}
    assert "<think>" not in tok.decode(off.prompt(asked_on)[0])
    assert "<think>" not in tok.decode(SampleEncoder(JinjaTemplate(), tok).prompt({"messages": CHAT[:1]})[0])


def test_chat_defaults_yield_to_the_record_and_leave_it_untouched() -> None:
    encoder = SampleEncoder(template=None, tokenizer=None, chat_defaults={"enable_thinking": False, "x": 1})
    record = {"messages": CHAT, "chat_template_kwargs": {"enable_thinking": True}}
    prepared = encoder.prepare(record)
    assert prepared["chat_template_kwargs"] == {"enable_thinking": True, "x": 1}
    assert record["chat_template_kwargs"] == {"enable_thinking": True}
    assert encoder.prepare(CHAT) is CHAT  # a bare message list goes to the template as it is


def test_media_tags_become_parts_only_for_a_model_that_takes_media() -> None:
    record = {"messages": [{"role": "user", "content": "<image>What is it?"}], "images": ["cat.png"]}
    assert media_tags_to_parts(record)["messages"][0]["content"] == [
        {"type": "image"},
        {"type": "text", "text": "What is it?"},
    ]
    assert SampleEncoder(None, None).prepare(record) is record  # text only: the template names the tag's problem


def test_a_bad_record_is_named_and_an_empty_result_refused(tok: Any) -> None:
    encoder = SampleEncoder(JinjaTemplate(), tok)
    bad = {"messages": [{"content": "no role"}], "_source": "data.jsonl:7"}
    with pytest.raises(SwiftcoreError, match="data.jsonl:7"):
        encoder.train_samples([{"messages": CHAT}, bad], loss_policy="last_round", max_length=64, truncation="error")
    prompt_only = {"messages": CHAT[:1]}  # no reply: no token carries loss
    with pytest.raises(SwiftcoreError, match="no sample left"):
        encoder.train_samples([prompt_only], loss_policy="last_round", max_length=64, truncation="error")


# GLM style: a turn ends where the next one starts, so nothing follows the last reply.
GLM = (
    "{% for m in messages %}<|{{ m.role }}|>\n{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
GLM_CHAT = [*CHAT, {"role": "user", "content": "And 7?"}, {"role": "assistant", "content": "odd"}]


@pytest.fixture(scope="module")
def glm_tok() -> Any:
    return build_test_tokenizer(
        ("<|system|>", "<|user|>", "<|assistant|>", "<|endoftext|>"),
        ["Is 12 even? even odd And 7?"],
        chat_template=GLM,
        eos_token="<|endoftext|>",
    )


def test_a_last_reply_the_rendering_ends_with_nothing_is_trained_with_a_stop_token(glm_tok: Any) -> None:
    """The encoder appends the tokenizer's eos to GLM's last reply: the model learns to stop. The prompt is
    still token for token the inference prompt, and the rendering itself is unchanged."""
    from swiftcore_testing.templates import loss_runs

    encoder = SampleEncoder(JinjaTemplate(), glm_tok)
    record = {"messages": GLM_CHAT}
    assert JinjaTemplate.from_tokenizer(glm_tok).render(record).endswith("<|assistant|>\nodd")
    (sample,) = encoder.train_samples([record], loss_policy="last_round", max_length=256, truncation="error")
    eos = glm_tok.eos_token_id
    assert sample["input_ids"][-1] == eos and sample["labels"][-1] == eos
    assert loss_runs(sample["input_ids"], sample["labels"], glm_tok) == ["odd<|endoftext|>"]
    prompt, _ = encoder.prompt({"messages": GLM_CHAT[:3]})
    assert sample["input_ids"][: len(prompt)] == prompt
    assert sample["input_ids"][len(prompt) :] == glm_tok("odd<|endoftext|>", add_special_tokens=False)["input_ids"]


def test_a_rendering_that_ends_its_reply_with_a_stop_token_is_encoded_as_rendered(tok: Any) -> None:
    """ChatML ends every reply with ``<|im_end|>``: nothing is appended, the ids are the rendering's."""
    template = JinjaTemplate.from_tokenizer(tok)
    for policy in ("all_assistant", "last_round", "all"):
        encoded = template.encode(tok, {"messages": CHAT}, loss_policy=policy)
        assert encoded.text == template.render({"messages": CHAT})
        assert encoded.input_ids == tok(encoded.text, add_special_tokens=False)["input_ids"]


def test_a_glm_history_reply_is_trained_alone_not_with_the_turns_after_it(glm_tok: Any) -> None:
    """With the tokenizer's own GLM template no default end-of-turn token follows a past reply: it ends where
    its own rendering does (before used to run to the end of the text, training the user turns after it)."""
    from swiftcore_testing.templates import loss_runs

    encoded = JinjaTemplate().encode(glm_tok, {"messages": GLM_CHAT}, loss_policy="all_assistant")
    assert loss_runs(encoded.input_ids, encoded.labels, glm_tok) == ["even", "odd<|endoftext|>"]
