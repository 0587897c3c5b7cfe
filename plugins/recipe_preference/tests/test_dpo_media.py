"""``dpo`` with images (Qwen3.5): pairs whose prompt holds an image train through the model's vision tower.

- Encoding: the prompt ids hold the processor's expanded image placeholder, the same before both replies.
- On a fixed batch the trainer's loss equals the DPO formula on log-probs computed here, each sequence alone
  with its own pixels (fp32, 1e-5); and the image matters: other pixels give other log-ratios.
- Learning signal: the prompt text is the same for every pair and only the image (red or blue) says which
  reply is preferred (half the held-out pairs each way), so a model that ignores the image scores 50%.
- A text-only model and options that would split an image from its placeholder are refused.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from swiftcore_train import TrainConfig

BETA = 0.3
COLOURS = {"red": (220, 30, 30), "blue": (30, 30, 220)}


def _png(path: Path, rgb: tuple[int, int, int], seed: int) -> str:
    """A 32x32 image of ``rgb`` with a little per-image noise (so held-out images are new ones)."""
    import random

    from PIL import Image

    rng = random.Random(seed)
    image = Image.new("RGB", (32, 32), rgb)
    image.putdata([tuple(max(0, min(255, c + rng.randint(-20, 20))) for c in rgb) for _ in range(32 * 32)])
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    path.write_bytes(buf.getvalue())
    return str(path)


def _rows(tmp_path: Path, n: int, seed: int, both_ways: bool = False) -> list[dict]:
    """ms-swift rows: ``<image>`` + one question; red wants "warm", blue wants "cold"."""
    rows = []
    for i in range(n):
        colour = ("red", "blue")[i % 2]
        image = _png(tmp_path / f"{seed}-{i}.png", COLOURS[colour], seed * 1000 + i)
        good, bad = ("warm", "cold") if colour == "red" else ("cold", "warm")
        rows.append({
            "messages": [{"role": "user", "content": "<image>Warm or cold?"}, {"role": "assistant", "content": good}],
            "rejected_response": bad,
            "images": [image],
        })  # fmt: skip
    return rows


def _cfg(model_dir: str, data: Path, out: Path, **kwargs: Any) -> TrainConfig:
    return TrainConfig(model=model_dir, dataset=(str(data),), output_dir=str(out), plot=False, recipe="dpo", **kwargs)


def _encode(cfg: TrainConfig, plugins: Any) -> tuple[Any, Any, list[dict]]:
    from swiftcore_recipe_preference.common import prepare
    from swiftcore_recipe_preference.dpo import pair_media
    from swiftcore_recipe_preference.encoding import encode_dpo_pairs

    prepared = prepare(cfg, plugins, "dpo")
    media = pair_media(cfg, prepared)
    return prepared, media, encode_dpo_pairs(prepared.train, prepared.template, prepared.tokenizer, cfg, media)


def _logps(model: Any, media: Any, samples: list[dict], key: str, items: list | None = None) -> Any:
    """Sum of the reply's log-probs, each sequence alone with its own pixels (``items``: other media)."""
    import torch

    out = []
    for i, s in enumerate(samples):
        ids = s["prompt_ids"] + s[key]
        row = {
            "input_ids": ids,
            "labels": ids,
            "media_items": media.items[s["media_index"]] if items is None else items[i],
            "mm_token_type_ids": s["prompt_mm_types"] + [0] * len(s[key]),
        }
        assert s["prompt_mm_types"]  # the processor marks the image tokens (M-RoPE reads them)
        batch = media.preparer.collate([row])
        batch.pop("labels")
        with torch.no_grad():
            logits = model(**batch).logits[0, :-1].float()
        token_logps = logits.log_softmax(-1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0]
        out.append(token_logps[len(s["prompt_ids"]) - 1 :].sum())
    return torch.stack(out)


def test_image_pairs_encode_with_the_expanded_placeholder(tiny_model_dir, plugins, write_jsonl, tmp_path: Path):
    cfg = _cfg(str(tiny_model_dir("qwen3_5")), write_jsonl(_rows(tmp_path, 4, 0)), tmp_path / "out", split_ratio=0)
    prepared, media, samples = _encode(cfg, plugins)
    pad = prepared.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert media is not None and len(samples) == 4 and len(media.items) == 4
    for s in samples:
        assert s["prompt_ids"].count(pad) > 1  # one placeholder token per vision embedding
        assert pad not in s["chosen_ids"] + s["rejected_ids"]


def test_image_dpo_loss_equals_the_formula_and_the_image_matters(tiny_model_dir, plugins, write_jsonl, tmp_path):
    import torch
    import torch.nn.functional as F
    from swiftcore_recipe_preference.dpo import build_dpo_trainer
    from swiftcore_recipe_preference.options import DPOOptions

    cfg = _cfg(str(tiny_model_dir("qwen3_5")), write_jsonl(_rows(tmp_path, 4, 1)), tmp_path / "out", split_ratio=0,
               tuner="lora", batch_size=4)  # fmt: skip
    prepared, media, samples = _encode(cfg, plugins)
    trainer = build_dpo_trainer(cfg, DPOOptions(beta=BETA), plugins, samples, [], prepared, tmp_path, media)
    model = trainer.model.eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.add_(torch.randn(param.shape, generator=gen) * 0.05)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(samples))])
    assert "pixel_values" in batch and batch["image_grid_thw"].shape[0] == 2 * len(samples)  # chosen + rejected rows
    with torch.no_grad():
        got = float(trainer.compute_loss(model, batch))

    def ratios(items: list | None = None) -> Any:
        def margin() -> Any:
            return _logps(model, media, samples, "chosen_ids", items) - _logps(
                model, media, samples, "rejected_ids", items
            )

        policy = margin()
        with model.disable_adapter():
            return policy - margin()

    delta = ratios()
    expected = float(-F.logsigmoid(BETA * delta).mean())
    print(f"image dpo: trainer {got:.8f} formula {expected:.8f} |diff| {abs(got - expected):.2e}")
    assert got == pytest.approx(expected, abs=1e-5)
    swapped = [media.items[s["media_index"] ^ 1] for s in samples]  # red <-> blue
    assert float((ratios(swapped) - delta).abs().max()) > 1e-4


def test_text_only_models_and_splitting_options_refuse_image_pairs(tiny_model_dir, plugins, write_jsonl, tmp_path):
    from swiftcore_data import DataError

    from swiftcore.api import SwiftcoreError

    data = write_jsonl(_rows(tmp_path, 2, 2))
    cfg = _cfg(str(tiny_model_dir("qwen3_5")), data, tmp_path / "out", split_ratio=0, padding_free=True)
    with pytest.raises(SwiftcoreError, match="--padding-free not supported"):
        _encode(cfg, plugins)
    with pytest.raises(DataError, match="need a multimodal model") as info:
        _encode(_cfg(str(tiny_model_dir("deepseek_v4")), data, tmp_path / "o", split_ratio=0), plugins)
    assert str(data) in str(info.value) and info.value.field == "images"


@pytest.mark.slow
def test_image_dpo_learns_what_the_image_says(tiny_model_dir, plugins, write_jsonl, tmp_path: Path) -> None:
    from peft import PeftModel
    from swiftcore_recipe_preference.dpo import run_dpo
    from swiftcore_recipe_preference.options import DPOOptions

    from swiftcore.api.models import load_model, resolve_model_spec

    model_dir = str(tiny_model_dir("qwen3_5"))
    cfg = _cfg(model_dir, write_jsonl(_rows(tmp_path, 32, 3)), tmp_path / "run", split_ratio=0, tuner="lora",
               max_steps=30, batch_size=8, learning_rate=2e-3, lr_scheduler="constant", logging_steps=5,
               save_steps=10_000)  # fmt: skip
    held_cfg = _cfg(model_dir, write_jsonl(_rows(tmp_path, 16, 4), name="held.jsonl"), tmp_path / "h", split_ratio=0)
    _, media, held = _encode(held_cfg, plugins)
    spec = resolve_model_spec(model_dir, plugins)

    def accuracy(model: Any) -> float:
        delta = _logps(model, media, held, "chosen_ids") - _logps(model, media, held, "rejected_ids")
        return float((delta > 0).float().mean())

    before = accuracy(load_model(spec, model_dir, plugins, torch_dtype="float32").eval())
    result = run_dpo(cfg, plugins, DPOOptions(beta=0.1))
    base = load_model(spec, model_dir, plugins, torch_dtype="float32")
    after = accuracy(PeftModel.from_pretrained(base, str(result.last_checkpoint)).eval())
    losses = [r["loss"] for r in map(json.loads, result.log_file.read_text().splitlines()) if "loss" in r]
    print(f"image dpo: loss {losses[0]:.3f} -> {losses[-1]:.3f}; held-out accuracy {before:.1%} -> {after:.1%}")
    assert (result.last_checkpoint / "preprocessor_config.json").is_file() or any(
        result.last_checkpoint.glob("*processor*")
    )
    assert before <= 0.75, f"the untrained model should be near chance, got {before:.1%}"
    assert after >= 0.9, f"held-out pairwise accuracy only {after:.1%}"
