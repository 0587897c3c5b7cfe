"""A perturbed copy of a tiny HF checkpoint, so that a parity check can tell every tensor apart.

Tiny random checkpoints keep what the model's ``__init__`` sets to a constant: norm weights are all
ones (or zeros for zero-centred norms), biases zeros, layer scalars ones. On such a checkpoint a bridge
that maps ``input_layernorm`` to ``post_attention_layernorm``'s place, or ``q_norm`` to ``k_norm``'s,
gives exactly transformers' logits. :func:`perturb_checkpoint` adds seeded noise to every floating tensor
and moves every rope base off its default, so that such a bridge (or one that ignores ``rope_theta``)
shows in the logits.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

__all__ = ["CONSTANT_NOISE", "RANDOM_NOISE", "ROPE_FACTOR", "constant_tensors", "perturb_checkpoint"]

#: Noise on a constant tensor, times ``max(|value|, 1)``: norms and biases must differ from each other.
CONSTANT_NOISE = 0.1
#: Noise on a random tensor, times its standard deviation: small, it keeps the model's scale.
RANDOM_NOISE = 0.1
#: Every ``*rope_theta`` in config.json is multiplied by this: a default base (10000) becomes one no
#: bridge would hard-code, and the positions of a short parity sequence already show the difference.
ROPE_FACTOR = 1.7


def _seed(seed: int, key: str) -> int:
    """A generator seed from ``seed`` and a text key (stable across runs and platforms)."""
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _is_constant(tensor: Any) -> bool:
    flat = tensor.reshape(-1)
    return bool((flat == flat[0]).all())


def _perturbed(name: str, tensor: Any, seed: int) -> Any:
    """``tensor`` plus seeded noise; integer and non-finite tensors come back unchanged."""
    import torch

    if not tensor.is_floating_point() or tensor.numel() == 0 or not bool(torch.isfinite(tensor).all()):
        return tensor  # indices, counters and clamp bounds (+-inf) have no "nearby" value
    value = tensor.detach().to(torch.float32)
    if _is_constant(value):
        # Keyed by name: two all-ones norms must get different noise.
        scale = CONSTANT_NOISE * max(abs(float(value.reshape(-1)[0])), 1.0)
        key = name
    else:
        # Keyed by content: tensors saved tied (equal) stay equal, as the model's tying expects.
        scale = RANDOM_NOISE * float(value.std())
        key = hashlib.sha256(value.numpy().tobytes()).hexdigest()
    generator = torch.Generator().manual_seed(_seed(seed, key))
    noise = torch.randn(value.shape, generator=generator) * scale
    return (value + noise).to(tensor.dtype)


def _move_rope(config: Any) -> Any:
    """``config`` with every numeric ``*rope_theta`` value (nested ones included) times :data:`ROPE_FACTOR`."""
    if isinstance(config, dict):
        return {
            key: value * ROPE_FACTOR
            if key.endswith("rope_theta") and isinstance(value, (int, float)) and not isinstance(value, bool)
            else _move_rope(value)
            for key, value in config.items()
        }
    if isinstance(config, list):
        return [_move_rope(item) for item in config]
    return config


def constant_tensors(hf_dir: str | Path) -> list[str]:
    """Names of the finite floating tensors of ``hf_dir`` that hold one value throughout (norm weights,
    biases, scalars as initialised: what hides a swapped or dropped mapping)."""
    import torch
    from safetensors.torch import load_file

    names = []
    for path in sorted(Path(hf_dir).glob("*.safetensors")):
        for name, tensor in load_file(path).items():
            if tensor.is_floating_point() and tensor.numel() and bool(torch.isfinite(tensor).all()):
                if _is_constant(tensor):
                    names.append(name)
    return sorted(names)


def perturb_checkpoint(
    hf_dir: str | Path, out_dir: str | Path, *, seed: int = 0, weights: bool = True, rope: bool = True
) -> Path:
    """Copy the HF checkpoint ``hf_dir`` to ``out_dir`` with every tensor and rope base perturbed.

    Deterministic: the same checkpoint and ``seed`` give the same bytes. A constant tensor (norm
    weight, bias, scalar) gets noise of :data:`CONSTANT_NOISE` times ``max(|value|, 1)``, keyed by its
    name; a random one gets :data:`RANDOM_NOISE` times its standard deviation, keyed by its content (so
    tied copies stay equal). Integer and non-finite tensors are copied as they are; so is every file
    that is not a ``*.safetensors`` shard or ``config.json``.

    Args:
        hf_dir: a ``save_pretrained`` directory (safetensors shards).
        out_dir: where the copy goes (created; an existing one is replaced).
        seed: the noise seed.
        weights: perturb the tensors.
        rope: multiply every ``*rope_theta`` in ``config.json`` by :data:`ROPE_FACTOR`.

    Returns:
        ``out_dir`` as a :class:`~pathlib.Path`.
    """
    from safetensors import safe_open
    from safetensors.torch import save_file

    src, out = Path(hf_dir), Path(out_dir)
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(src, out)
    if weights:
        for path in sorted(out.glob("*.safetensors")):
            with safe_open(str(path), framework="pt") as handle:
                metadata = handle.metadata()
                tensors = {name: _perturbed(name, handle.get_tensor(name), seed) for name in handle.keys()}
            save_file(tensors, str(path), metadata=metadata)
    config_path = out / "config.json"
    if rope and config_path.is_file():
        config = json.loads(config_path.read_text(encoding="utf-8"))
        config_path.write_text(json.dumps(_move_rope(config), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return out
