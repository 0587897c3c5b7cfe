"""Pairs are encoded by the family's swiftcore template: the prompt is token for token SFT's prefix, the replies
are exactly the tokens SFT would train (reply and end-of-turn)."""

from __future__ import annotations

import pytest
from swiftcore_recipe_preference.data import parse_pair
from swiftcore_recipe_preference.encoding import encode_dpo_pairs, encode_rm_pairs
from swiftcore_train import TrainConfig

ROW = {
    "messages": [{"role": "user", "content": "say apple"}, {"role": "assistant", "content": "apple apple"}],
    "rejected_response": "pear",
}


@pytest.mark.parametrize("family", ["qwen3_5", "gemma4"])
def test_pairs_encode_like_sft(family: str, tiny_model_dir, plugins) -> None:
    from swiftcore.api.models import load_tokenizer, resolve_model_spec
    from swiftcore.api.template import get_template

    model_dir = str(tiny_model_dir(family))
    spec = resolve_model_spec(model_dir, plugins)
    template = get_template(spec.default_template, plugins)
    tokenizer = load_tokenizer(model_dir)
    cfg = TrainConfig(model=model_dir, dataset=("x",))
    pair = parse_pair(ROW, "x.jsonl:1")
    [sample] = encode_dpo_pairs([pair], template, tokenizer, cfg)

    sft = template.encode(tokenizer, ROW, loss_policy="last_round")  # what SFT trains on this conversation
    reply = [i for i, label in zip(sft.input_ids, sft.labels, strict=True) if label != -100]
    assert sample["prompt_ids"] == list(sft.input_ids[: len(sample["prompt_ids"])])
    assert sample["chosen_ids"] == reply
    assert tokenizer.decode(sample["chosen_ids"]).startswith("apple apple")
    assert tokenizer.decode(sample["rejected_ids"]).startswith("pear")
    print(family, repr(tokenizer.decode(sample["prompt_ids"])), repr(tokenizer.decode(sample["rejected_ids"])))

    [rm] = encode_rm_pairs([pair], template, tokenizer, cfg)
    assert rm["chosen_ids"] == list(sft.input_ids)  # the whole rendered conversation


def test_too_long_pairs_follow_truncation(tiny_model_dir, plugins) -> None:
    from swiftcore_data import DataError

    from swiftcore.api.models import load_tokenizer, resolve_model_spec
    from swiftcore.api.template import get_template

    model_dir = str(tiny_model_dir("qwen3_5"))
    template = get_template(resolve_model_spec(model_dir, plugins).default_template, plugins)
    tokenizer = load_tokenizer(model_dir)
    pairs = [parse_pair(ROW, "x.jsonl:1"), parse_pair({**ROW, "rejected_response": "pear " * 40}, "x.jsonl:2")]
    with pytest.raises(DataError, match=r"x.jsonl:2: .*longer than --max-length 40"):
        encode_dpo_pairs(pairs, template, tokenizer, TrainConfig(model=model_dir, dataset=("x",), max_length=40))
    kept = encode_dpo_pairs(
        pairs, template, tokenizer, TrainConfig(model=model_dir, dataset=("x",), max_length=40, truncation="drop")
    )
    assert len(kept) == 1
