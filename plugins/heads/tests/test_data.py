"""Bad rows and bad options fail before training, naming the file, line and field."""

from __future__ import annotations

import json

import pytest
from swiftcore_data import DataError
from swiftcore_heads.data import Example, GroupCollator, parse_rows
from swiftcore_heads.options import HeadTrainConfig as TrainConfig

from swiftcore.errors import SwiftcoreError


def _cfg(**kw):
    cfg = TrainConfig(model="m", dataset=("d.jsonl",), **kw)
    cfg.validate()
    return cfg


def test_listwise_row_without_negatives_names_the_line():
    rows = [
        ("d.jsonl:1", {"query": "q", "positive": "p", "negatives": ["n"]}),
        ("d.jsonl:2", {"query": "q", "positive": "p"}),
    ]
    with pytest.raises(DataError) as err:
        parse_rows(rows, "reranker", _cfg(task="reranker", loss="listwise"))
    assert err.value.where == "d.jsonl:2" and err.value.field == "negatives"
    assert "pointwise" in str(err.value)


def test_label_outside_num_labels():
    rows = [("d.jsonl:1", {"text": "a", "label": 1}), ("d.jsonl:2", {"text": "b", "label": 3})]
    with pytest.raises(DataError) as err:
        parse_rows(
            rows,
            "classification",
            _cfg(task="classification", num_labels=3, problem_type="single_label_classification"),
        )
    assert err.value.where == "d.jsonl:2" and err.value.field == "label" and "--num-labels" in str(err.value)


def test_rows_become_rectangular_groups():
    rows = [
        ("d:1", {"query": "q1", "positive": "p1", "negatives": ["a", "b", "c"]}),
        (
            "d:2",
            {
                "messages": [{"role": "user", "content": "q2"}, {"role": "assistant", "content": "p2"}],
                "negatives": ["x"],
            },
        ),
    ]
    examples = parse_rows(rows, "embedding", _cfg(task="embedding", loss="infonce"))
    assert [e.texts for e in examples] == [["q1", "p1", "a"], ["q2", "p2", "x"]]


def test_collator_puts_queries_first_for_embedding():
    examples = [Example(["q"], ids=[[1], [2, 2], [3, 3, 3]]), Example(["q"], ids=[[4], [5, 5], [6, 6, 6]])]
    batch = GroupCollator("embedding", 0)(examples)
    assert batch["input_ids"][:, 0].tolist() == [1, 4, 2, 3, 5, 6]
    assert batch["n_groups"] == 2 and batch["group_size"] == 3
    packed = GroupCollator("embedding", 0, padding_free=True)(examples)
    assert packed["seq_lens"].tolist() == [1, 1, 2, 3, 2, 3]


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        ({"task": "classification", "num_labels": 0}, "--num-labels"),
        ({"task": "embedding", "mrl_dims": ("8,x",)}, "--mrl-dims"),
        ({"task": "embedding", "mrl_dims": ("8,16",), "mrl_weights": ("1",)}, "--mrl-weights"),
        ({"task": "reranker", "mrl_dims": ("8",)}, "--mrl-dims"),
        ({"task": "embedding", "pooling": "max"}, "--pooling"),
    ],
)
def test_bad_options_are_refused(options, flag):
    with pytest.raises(SwiftcoreError, match=flag):
        TrainConfig(model="m", dataset=("d",), **options).validate()


def test_mrl_dims_parse_comma_separated():
    cfg = _cfg(task="embedding", mrl_dims=("16,32", "64"), mrl_weights=("1,0.5,0.25",))
    assert cfg.mrl_dims == (16, 32, 64) and cfg.mrl_weights == (1.0, 0.5, 0.25)


def _fail_load(*_a, **_k):
    raise AssertionError("the model must not be loaded when the input is bad")


@pytest.mark.parametrize(
    ("task", "row", "options", "match"),
    [
        ("embedding", {"query": "q", "positive": "p"}, {"mrl_dims": ("16,1000",)}, "larger than the hidden size"),
        ("reranker", {"query": "q", "positive": "p"}, {}, "negatives"),
        ("classification", {"text": "t", "label": 5}, {"num_labels": 2}, "label"),
    ],
)
def test_bad_input_fails_before_the_model_loads(
    tiny_model_dir, plugins, monkeypatch, tmp_path, task, row, options, match
):
    from swiftcore_train import run_training

    monkeypatch.setattr("swiftcore.models.load_model", _fail_load)
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps(row) + "\n")
    cfg = TrainConfig(
        model=str(tiny_model_dir("gemma4")), dataset=(str(data),), task=task, output_dir=str(tmp_path / "o"), **options
    )
    with pytest.raises(SwiftcoreError, match=match):
        run_training(cfg, plugins)


def test_cli_refuses_mrl_dims_above_hidden_size(tiny_model_dir, tmp_path):
    from click.testing import CliRunner

    from swiftcore.cli.main import cli

    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"query": "q", "positive": "p", "negatives": ["n"]}) + "\n")
    args = ["train", "--model", str(tiny_model_dir("gemma4")), "--dataset", str(data), "--task", "embedding"]
    args += ["--mrl-dims", "16,4096", "--output-dir", str(tmp_path / "o")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code != 0
    message = str(result.exception) + result.output
    assert "--mrl-dims 4096" in message and "hidden size 64" in message
    assert not (tmp_path / "o").exists()  # refused before anything was written
