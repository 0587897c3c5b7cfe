"""Saved heads load in their ecosystems (sentence-transformers, transformers) and give the same outputs."""

from __future__ import annotations

import json

import pytest
import torch
from swiftcore_heads import HEAD_FILE
from swiftcore_heads.api import classify, embed, load_head_model, score
from swiftcore_heads.model import HeadModel, extract_decoder, output_head
from swiftcore_heads.save import save_head_model

TEXTS = ["hello world", "a much longer text with many more words in it than the others", "x", "yes or no"]
PAIRS = [("find red fox", "the red fox lives here"), ("find red fox", "the blue owl lives here")]


def _head(backbone, name, task, **kw):
    import copy

    model, spec, tokenizer, _ = backbone(name)
    model = copy.deepcopy(model)  # the session's backbone stays untouched
    torch.manual_seed(0)
    if task == "generative_reranker":
        head, tied = output_head(model)
        kw.update(lm_head=None if tied else head, yes_no_ids=(11, 12))
    return HeadModel(extract_decoder(model, spec), task, **kw).eval(), tokenizer


@pytest.mark.parametrize("name", ["qwen3_5", "gemma4"])
@pytest.mark.parametrize("pooling", ["last", "mean"])
def test_sentence_transformers_gives_the_same_vectors(backbone, tmp_path, name, pooling):
    import sentence_transformers

    head, tokenizer = _head(backbone, name, "embedding", pooling=pooling)
    out = save_head_model(head, tokenizer, tmp_path, {"pooling": pooling, "normalize": True, "max_length": 64})
    model, tok = load_head_model(out)
    mine = embed(model, tok, TEXTS)
    theirs = torch.tensor(sentence_transformers.SentenceTransformer(str(out), device="cpu").encode(TEXTS))
    assert mine.shape == (len(TEXTS), head.config.hidden_size)
    assert (mine - theirs).abs().max().item() < 1e-5
    # The reloaded model gives what the in-memory one gave.
    assert (embed(head, tokenizer, TEXTS, max_length=64) - mine).abs().max().item() < 1e-5


def test_classifier_loads_with_auto_model_for_sequence_classification(backbone, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    head, tokenizer = _head(backbone, "qwen3_5", "classification", num_labels=3)
    info = {"pooling": "last", "num_labels": 3, "problem_type": "single_label_classification", "max_length": 64}
    out = save_head_model(head, tokenizer, tmp_path, info)
    assert json.loads((out / HEAD_FILE).read_text())["format"] == "transformers-sequence-classification"
    auto = AutoModelForSequenceClassification.from_pretrained(out).eval()
    tok = AutoTokenizer.from_pretrained(out)
    batch = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        theirs = auto(**batch).logits
    mine = classify(head, tokenizer, TEXTS)
    assert theirs.shape == (len(TEXTS), 3)
    assert (mine - theirs).abs().max().item() < 1e-5
    reloaded, tok2 = load_head_model(out)
    assert (classify(reloaded, tok2, TEXTS) - mine).abs().max().item() < 1e-5


def test_classifier_without_transformers_class_round_trips(backbone, tmp_path):
    head, tokenizer = _head(backbone, "gemma4", "reranker")
    out = save_head_model(head, tokenizer, tmp_path, {"pooling": "last", "max_length": 64})
    assert json.loads((out / HEAD_FILE).read_text())["format"] == "swiftcore-score"
    reloaded, tok = load_head_model(out)
    assert score(reloaded, tok, PAIRS) == pytest.approx(score(head, tokenizer, PAIRS), abs=1e-5)


@pytest.mark.parametrize("name", ["qwen3_5", "gemma4"])
def test_generative_reranker_is_yes_minus_no_of_the_causal_lm(backbone, tmp_path, name):
    from swiftcore_heads.data import generative_prompt
    from transformers import AutoModelForCausalLM

    head, tokenizer = _head(backbone, name, "generative_reranker")
    out = save_head_model(head, tokenizer, tmp_path, {"yes_no_ids": [11, 12], "max_length": 512})
    lm = AutoModelForCausalLM.from_pretrained(out).eval()
    prompt = generative_prompt(tokenizer, *PAIRS[0])
    ids = tokenizer(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        logits = lm(ids).logits[0, -1]
    expected = (logits[11] - logits[12]).item()
    reloaded, tok = load_head_model(out)
    assert score(reloaded, tok, PAIRS[:1])[0] == pytest.approx(expected, abs=1e-4)
    assert score(head, tokenizer, PAIRS[:1])[0] == pytest.approx(expected, abs=1e-4)
