"""LoRA, with the tuner's defaults, memorises a small set on every family's `make-tiny` checkpoint (issue 27).

README's typical run is LoRA on a tiny model, and LoRA leaves the final norm and the output head frozen. A
tiny checkpoint whose frozen head cannot make its logits peak keeps the loss near log(vocab) however long
LoRA trains (it stalled at ~5 of ~6.2 with the old init), even when the argmax is already right; so the
test asserts a low loss, not only the argmax.

Learning is checked on the trained token ids, not through the inference engine's parsed reply: the final
training loss, and a teacher-forced pass of the trained adapter (plain peft) over the very samples the
trainer saw, whose argmax must hit every answer token. A 100% teacher-forced argmax is the same as greedy
generation reproducing each answer token by token from its prompt.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

FAMILIES = ["qwen3_5", "gemma4", "deepseek_v4", "qwen3_asr", "mimo_v2_flash", "olmoe", "glm5"]

# Four short, made-up facts: nothing a random model could guess, a few tokens per answer.
FACTS = [
    ("What is the capital of Zorbia?", "Plimsk."),
    ("Who painted the Blue Moth?", "Anna Verro."),
    ("How many legs has a quib?", "Seven."),
    ("What colour is a tarn fruit?", "Deep violet."),
]

# A modest budget: 20 steps of the 4 facts in one batch, at a learning rate suited to a tiny model
# (the tuner's rank, alpha, dropout and target modules stay at their defaults).
STEPS = 20
LEARNING_RATE = 5e-3


def _records(family: str) -> list[dict]:
    """The facts as chat records; Qwen3-ASR's template renders no user text, so it asks in the system turn."""
    records = []
    for question, answer in FACTS:
        prompt = [{"role": "system", "content": question}] if family == "qwen3_asr" else []
        prompt.append({"role": "user", "content": question})
        records.append({"messages": [*prompt, {"role": "assistant", "content": answer}]})
    return records


@pytest.fixture(scope="module")
def plugins():
    import swiftcore

    return swiftcore.load_plugins(env={})


@pytest.mark.parametrize("family", FAMILIES)
def test_lora_memorises_four_facts(family: str, tiny_model_dir, plugins, one_thread, tmp_path: Path) -> None:
    import torch
    from peft import PeftModel
    from swiftcore_train import TrainConfig, encode_records, run_training

    from swiftcore.models import load_model, load_tokenizer, resolve_model_spec
    from swiftcore.template import get_template

    model_dir = str(tiny_model_dir(family))
    records = _records(family)
    data = tmp_path / "facts.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    cfg = TrainConfig(
        model=model_dir,
        dataset=(str(data),),
        output_dir=str(tmp_path / "run"),
        tuner="lora",
        max_steps=STEPS,
        batch_size=len(records),
        learning_rate=LEARNING_RATE,
        logging_steps=1,
        save_steps=10_000,
        plot=False,
    )
    result = run_training(cfg, plugins)
    rows = [json.loads(line) for line in result.log_file.read_text().splitlines()]
    losses = [row["loss"] for row in rows if "loss" in row]
    assert len(losses) == STEPS
    first, last = losses[0], losses[-1]
    assert first > 4.0, f"{family}: the untrained tiny model should be near chance, got loss {first:.3f}"
    assert last < 1.0 and last < first / 5, f"{family}: LoRA did not memorise: loss {first:.3f} -> {last:.3f}"

    # The trained adapter on its base, loaded with plain peft, over the samples exactly as the trainer saw them.
    spec = resolve_model_spec(model_dir, plugins)
    tokenizer = load_tokenizer(model_dir)
    samples = encode_records(records, get_template(spec.default_template, plugins), tokenizer, cfg)
    base = load_model(spec, model_dir, plugins, torch_dtype="float32")
    model = PeftModel.from_pretrained(base, str(result.last_checkpoint)).eval()
    hits = total = 0
    nll = 0.0
    for sample in samples:
        input_ids = torch.tensor([sample["input_ids"]])
        with torch.no_grad():
            logits = model(input_ids=input_ids).logits[0, :-1]
        targets = torch.tensor(sample["labels"][1:])  # position i predicts token i + 1
        answer = targets != -100
        hits += int((logits[answer].argmax(-1) == targets[answer]).sum())
        total += int(answer.sum())
        nll += float(torch.nn.functional.cross_entropy(logits[answer], targets[answer], reduction="sum"))
    print(f"{family}: train loss {first:.3f} -> {last:.3f}; answer tokens {hits}/{total}, nll {nll / total:.4f}")
    assert total >= len(records) * 3, f"{family}: too few answer tokens ({total}) carry loss"
    assert hits == total, f"{family}: teacher-forced argmax hit {hits}/{total} answer tokens"
    assert nll / total < 1.0, f"{family}: teacher-forced answer loss {nll / total:.3f} is not low"


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_head_can_peak(family: str, tiny_model_dir, plugins) -> None:
    """The saved checkpoint's frozen head reaches log(vocab) + TINY_LOGIT_MARGIN, whichever way its final norm
    stores the gain (Qwen3.5's and Gemma's as 1 + w, the others as w), read back through plain loading."""
    import math

    import torch
    from swiftcore_tiny import TINY_LOGIT_MARGIN

    from swiftcore.models import load_model, resolve_model_spec

    model_dir = str(tiny_model_dir(family))
    model = load_model(resolve_model_spec(model_dir, plugins), model_dir, plugins, torch_dtype="float32")
    head = model.get_output_embeddings().weight
    probe = torch.randn(1, head.shape[-1], generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # the largest logit a normalised hidden state can give a head row, on average
        reach = float(model.get_decoder().norm(probe).norm() * head.norm(dim=-1).mean())
    assert reach == pytest.approx(math.log(head.shape[0]) + TINY_LOGIT_MARGIN, rel=1e-3)
