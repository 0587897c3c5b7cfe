"""End to end: `swiftcore train --task ...` trains every head on both tiny backbones, and learns.

- Every task on qwen3_5 and gemma4, with LoRA and full tuning: a couple of steps, a checkpoint that
  loads back and whose outputs moved away from the untrained model's.
- The bundled synthetic retrieval task: an embedding model trained with Matryoshka dims reaches a
  recall@1 far above chance, and keeps most of it at the smallest dim; a reranker improves MRR.
"""

from __future__ import annotations

import json
import time

import pytest
import torch
from swiftcore_heads import HeadTrainConfig as TrainConfig
from swiftcore_heads import (
    embed,
    forward_texts,
    load_head_model,
    make_retrieval_task,
    mean_reciprocal_rank,
    recall_at_1,
    score,
)
from swiftcore_train import run_training

ROWS = {
    "classification": [{"text": f"sample {i} says {'yes' if i % 2 else 'no'}", "label": i % 3} for i in range(4)],
    "embedding": [{"query": f"find {i}", "positive": f"item {i}", "negatives": [f"item {i + 1}"]} for i in range(4)],
    "reranker": [{"query": f"find {i}", "positive": f"item {i}", "negatives": [f"item {i + 1}"]} for i in range(4)],
    "generative_reranker": [
        {"query": f"find {i}", "positive": f"item {i}", "negatives": [f"item {i + 1}"]} for i in range(4)
    ],
}
PROBE = ["find 1", "item 2 is here"]


@pytest.fixture(scope="module")
def plugins():
    import swiftcore

    return swiftcore.load_plugins(env={})


def _outputs(model, tokenizer):
    if model.task == "embedding":
        return embed(model, tokenizer, PROBE)
    if model.task == "classification":
        return forward_texts(model, tokenizer, PROBE)
    return torch.tensor(score(model, tokenizer, [(PROBE[0], PROBE[1])]))


def _untrained(cfg, plugins, tokenizer):
    """The head model the run started from (same seed, so the same new score layer)."""
    from swiftcore_heads import build_head_model, yes_no_token_ids

    from swiftcore.models import resolve_model_spec

    yes_no = yes_no_token_ids(tokenizer, "yes", "no") if cfg.task == "generative_reranker" else None
    torch.manual_seed(cfg.seed)
    cfg = TrainConfig(**{**cfg.__dict__, "tuner": "full"})
    return build_head_model(cfg, resolve_model_spec(cfg.model, plugins), plugins, tokenizer, yes_no).eval()


@pytest.mark.parametrize("tuner", ["lora", "full"])
@pytest.mark.parametrize("name", ["qwen3_5", "gemma4"])
@pytest.mark.parametrize("task", list(ROWS))
def test_train_each_head(tiny_model_dir, plugins, tmp_path, task, name, tuner):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS[task]))
    common = dict(model=str(tiny_model_dir(name)), dataset=(str(data),), task=task, batch_size=2, plot=False)
    common.update(num_labels=3, logging_steps=1, learning_rate=1e-2 if tuner == "lora" else 1e-3, seed=0)
    common.update(save_steps=1000, max_length=64 if task != "generative_reranker" else 512)
    cfg = TrainConfig(**common, output_dir=str(tmp_path / "o"), tuner=tuner, max_steps=2)
    result = run_training(cfg, plugins)
    assert result.global_step == 2 and result.final_loss is not None and result.final_loss == result.final_loss
    model, tokenizer = load_head_model(result.last_checkpoint)
    untrained = _untrained(cfg, plugins, tokenizer)
    assert model.task == task
    assert not torch.allclose(_outputs(model, tokenizer), _outputs(untrained, tokenizer), atol=1e-6)


def test_retrieval_recall_mrl_and_reranker_mrr(tiny_model_dir, plugins, tmp_path):
    """The acceptance run: a few hundred steps in all, on the bundled synthetic retrieval task (gemma4 tiny).

    The reranker trains 120 steps at learning rate 3e-4. At 1e-3 (the earlier rate) full fine-tuning of the tiny
    model was chaotic: the same run ended at MRR 0.254 -> 0.463 with one torch thread and 0.254 -> 0.286 with two
    (the float sums' order changes the trajectory), so the asserted gain of 0.05 held or failed with the thread
    count. At 3e-4 the gain is 0.245, 0.162 and 0.191 with 1, 2 and 4 threads (AMD EPYC, measured side by side).
    """
    from swiftcore_heads import build_head_model

    from swiftcore.models import resolve_model_spec

    task = make_retrieval_task(seed=0)
    data = str(task.write_train(tmp_path / "retrieval.jsonl"))
    model_dir = str(tiny_model_dir("gemma4"))
    common = dict(model=model_dir, dataset=(data,), tuner="full", batch_size=8, lr_scheduler="constant", plot=False)
    common.update(save_steps=10_000, logging_steps=25, max_length=32, seed=0)
    chance = 1.0 / len(task.documents)
    start = time.perf_counter()

    emb = run_training(
        TrainConfig(**common, task="embedding", output_dir=str(tmp_path / "emb"), max_steps=100,
                    learning_rate=2e-3, mrl_dims=("16,64",)),
        plugins,
    )  # fmt: skip
    model, tokenizer = load_head_model(emb.last_checkpoint)
    recall = recall_at_1(embed(model, tokenizer, task.queries), embed(model, tokenizer, task.documents))
    recall_16 = recall_at_1(
        embed(model, tokenizer, task.queries, dim=16), embed(model, tokenizer, task.documents, dim=16)
    )

    # The reranker sees three hard negatives per query (each shares a word with the positive).
    rr_data = str(make_retrieval_task(seed=0, n_negatives=3).write_train(tmp_path / "retrieval3.jsonl"))
    rr_cfg = TrainConfig(
        **{**common, "dataset": (rr_data,)}, task="reranker", output_dir=str(tmp_path / "rr"), max_steps=120,
        learning_rate=3e-4,
    )  # fmt: skip
    emb_seconds = time.perf_counter() - start
    rr = run_training(rr_cfg, plugins)
    trained, tok = load_head_model(rr.last_checkpoint)
    torch.manual_seed(rr_cfg.seed)
    untrained = build_head_model(rr_cfg, resolve_model_spec(model_dir, plugins), plugins, tok, None).eval()
    mrr_before = mean_reciprocal_rank(lambda pairs: score(untrained, tok, pairs), task.queries, task.documents)
    mrr_after = mean_reciprocal_rank(lambda pairs: score(trained, tok, pairs), task.queries, task.documents)

    print(
        f"[{emb_seconds:.0f}s embedding, {time.perf_counter() - start:.0f}s in all] recall@1 {recall:.2f} "
        f"(dim 16: {recall_16:.2f}, chance {chance:.2f}); MRR {mrr_before:.2f} -> {mrr_after:.2f}"
    )
    assert recall >= 5 * chance
    assert recall_16 >= 0.7 * recall
    assert mrr_after > mrr_before + 0.05


def test_infer_serves_a_trained_output_dir(tiny_model_dir, plugins, tmp_path, monkeypatch):
    """`swiftcore train --task reranker` then `swiftcore infer --model OUTPUT_DIR` (task read from the checkpoint)."""
    from click.testing import CliRunner

    from swiftcore.cli.main import cli

    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS["reranker"]))
    common = dict(model=str(tiny_model_dir("qwen3_5")), dataset=(str(data),), task="reranker", batch_size=2)
    cfg = TrainConfig(**common, plot=False, max_steps=2, save_steps=1000, max_length=64, output_dir=str(tmp_path / "o"))
    result = run_training(cfg, plugins)
    assert json.loads((result.last_checkpoint / "swiftcore_head.json").read_text())["head"] == "reranker"
    monkeypatch.delenv("SWIFTCORE_PLUGINS", raising=False)
    docs = ["item 1", "item 2", "item 3"]
    out = CliRunner().invoke(
        cli, ["infer", "--model", cfg.output_dir, "--query", "find 2", *[a for d in docs for a in ("--doc", d)]]
    )
    assert out.exit_code == 0, out.output
    (row,) = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    model, tokenizer = load_head_model(result.last_checkpoint)
    expected = score(model, tokenizer, [("find 2", d) for d in docs])
    assert [r["index"] for r in row["results"]] == sorted(range(3), key=lambda i: -expected[i])
    assert max(abs(r["score"] - expected[r["index"]]) for r in row["results"]) < 1e-5
