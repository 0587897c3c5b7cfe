"""What each Gemma 4 decoder layer is, read from a ``gemma4_text`` config dict (no torch here).

transformers 5.19 (``configuration_gemma4.py``, ``modeling_gemma4.py``) decides per layer:

- the attention type (``layer_types``: ``sliding_attention`` or ``full_attention``) and with it the
  rotary settings (``rope_parameters[type]``) and the sliding window;
- the head size and kv-head count: ``per_layer_config`` overrides (written by ``save_pretrained``;
  a config without it is expanded from ``global_head_dim`` / ``num_global_key_value_heads`` for
  the full-attention layers, as ``Gemma4TextConfig.__post_init__`` does);
- ``attention_k_eq_v``: full-attention layers have no ``v_proj``; values are the raw key projection;
- KV sharing: the last ``num_kv_shared_layers`` layers have no k/v projections and reuse the keys
  and values of the last earlier layer of their type;
- the MLP width (doubled on kv-shared layers with ``use_double_wide_mlp``) and the MoE block.

:func:`layer_facts` turns that into one :class:`LayerFacts` per layer, which the layer spec and the
tensor rules both read, so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from swiftcore_megatron import BridgeError

__all__ = ["FULL", "SLIDING", "LayerFacts", "RopeFacts", "layer_facts", "layer_types", "rope_facts"]

SLIDING, FULL = "sliding_attention", "full_attention"

#: Per-layer overrides this bridge understands (``per_layer_config`` entries).
_OVERRIDABLE = {"head_dim", "num_key_value_heads"}


@dataclass(frozen=True)
class RopeFacts:
    """Rotary settings of one attention type.

    Attributes:
        kind: ``"default"`` (every channel pair rotates) or ``"proportional"`` (the first
            ``partial_rotary_factor`` of the frequencies rotate, the rest are 0, over the whole head).
        theta: the rotary base.
        partial_rotary_factor: rotated fraction (``proportional`` only; ``default`` ignores it, as HF does).
        factor: frequencies are divided by it (``proportional`` only).
    """

    kind: str
    theta: float
    partial_rotary_factor: float = 1.0
    factor: float = 1.0


@dataclass(frozen=True)
class LayerFacts:
    """One decoder layer of a Gemma 4 text model.

    Attributes:
        index: 0-based layer index.
        layer_type: ``"sliding_attention"`` or ``"full_attention"``.
        head_dim: channels per head of this layer.
        num_kv_heads: key/value heads of this layer.
        sliding_window: tokens a query sees (itself included) on sliding layers, else None.
        rope: the rotary settings of this layer's type.
        k_eq_v: values are the (unnormalised) key projection; the layer has no ``v_proj``.
        kv_source: for a kv-shared layer, the layer whose keys/values it reuses; None otherwise.
        stores_kv: whether later kv-shared layers reuse this layer's keys/values.
        ffn_hidden_size: the dense MLP width.
        moe: whether the layer has the MoE block beside the dense MLP.
    """

    index: int
    layer_type: str
    head_dim: int
    num_kv_heads: int
    sliding_window: int | None
    rope: RopeFacts
    k_eq_v: bool
    kv_source: int | None
    stores_kv: bool
    ffn_hidden_size: int
    moe: bool

    @property
    def kv_shared(self) -> bool:
        """Whether this layer reuses an earlier layer's keys/values (and has no k/v weights)."""
        return self.kv_source is not None


def layer_types(config: Mapping[str, Any]) -> list[str]:
    """``layer_types`` of the config (HF's 5:1 sliding/full default when absent; last layer full).

    Raises:
        BridgeError: for a wrong length or an unknown type.
    """
    n = int(config["num_hidden_layers"])
    types = list(config.get("layer_types") or [SLIDING if (i + 1) % 6 else FULL for i in range(n)])
    unknown = sorted({t for t in types if t not in (SLIDING, FULL)})
    if len(types) != n or unknown:
        raise BridgeError(
            f"config.json text_config.layer_types={types!r}: expected {n} entries (num_hidden_layers), "
            f"each {SLIDING!r} or {FULL!r}"
        )
    types[-1] = FULL  # transformers forces it (with a warning) too
    return types


def rope_facts(config: Mapping[str, Any], layer_type: str) -> RopeFacts:
    """The rotary settings of ``layer_type`` (``rope_parameters[layer_type]``).

    Raises:
        BridgeError: for a rope type other than ``default`` and ``proportional``.
    """
    params = config.get("rope_parameters") or {
        SLIDING: {"rope_type": "default", "rope_theta": 10_000.0},
        FULL: {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1_000_000.0},
    }
    mine = params.get(layer_type)
    if not isinstance(mine, Mapping):
        raise BridgeError(f"config.json text_config.rope_parameters has no entry for {layer_type!r}")
    kind = mine.get("rope_type", "default")
    if kind not in ("default", "proportional"):
        raise BridgeError(
            f"config.json text_config.rope_parameters[{layer_type!r}].rope_type={kind!r} is not supported by the "
            "gemma4 bridge (only 'default' and 'proportional')"
        )
    return RopeFacts(
        kind=kind,
        theta=float(mine["rope_theta"]),
        partial_rotary_factor=float(mine.get("partial_rotary_factor", 1.0)),
        factor=float(mine.get("factor", 1.0)) if kind == "proportional" else 1.0,
    )


def _overrides(config: Mapping[str, Any], types: list[str]) -> dict[int, dict[str, Any]]:
    """Per-layer overrides: ``per_layer_config`` as saved, or derived as ``Gemma4TextConfig`` does."""
    if "per_layer_config" in config and config["per_layer_config"] is not None:
        raw = config["per_layer_config"]
        out = {int(k): dict(v) for k, v in raw.items()}
    else:
        full: dict[str, Any] = {"head_dim": int(config.get("global_head_dim") or 512)}
        if config.get("attention_k_eq_v", False) and config.get("num_global_key_value_heads") is not None:
            full["num_key_value_heads"] = int(config["num_global_key_value_heads"])
        out = {i: dict(full) for i, t in enumerate(types) if t == FULL}
    for i, values in out.items():
        unknown = sorted(set(values) - _OVERRIDABLE)
        if unknown:
            raise BridgeError(
                f"config.json text_config.per_layer_config[{i}] overrides {unknown}; the gemma4 bridge maps "
                f"per-layer {sorted(_OVERRIDABLE)} only"
            )
    return out


def layer_facts(config: Mapping[str, Any]) -> list[LayerFacts]:
    """One :class:`LayerFacts` per decoder layer of the ``gemma4_text`` config dict ``config``.

    Raises:
        BridgeError: for settings transformers itself would reject or this bridge cannot map
            (a kv-shared layer with no earlier layer of its type, unknown overrides, rope types).
    """
    types = layer_types(config)
    n = len(types)
    overrides = _overrides(config, types)
    shared = int(config.get("num_kv_shared_layers") or 0)
    first_shared = n - shared
    # The last non-shared layer of each type is the one whose keys/values the shared layers reuse.
    sources = {t: max((i for i in range(first_shared) if types[i] == t), default=None) for t in set(types)}
    rope = {t: rope_facts(config, t) for t in set(types)}
    width = int(config["intermediate_size"])
    double = bool(config.get("use_double_wide_mlp", False))
    facts = []
    for i, kind in enumerate(types):
        is_shared = i >= first_shared
        if is_shared and sources[kind] is None:
            raise BridgeError(
                f"config.json text_config: layer {i} ({kind}) shares keys/values (num_kv_shared_layers={shared}) "
                f"but no earlier layer is {kind}; transformers cannot build this model either"
            )
        # transformers' MLP counts a layer as kv-shared only when some layer is not (first index > 0).
        wide = double and i >= first_shared > 0
        facts.append(LayerFacts(
            index=i,
            layer_type=kind,
            head_dim=int(overrides.get(i, {}).get("head_dim", config.get("head_dim", 256))),
            num_kv_heads=int(overrides.get(i, {}).get("num_key_value_heads", config["num_key_value_heads"])),
            sliding_window=int(config.get("sliding_window") or 512) if kind == SLIDING else None,
            rope=rope[kind],
            k_eq_v=bool(config.get("attention_k_eq_v", False)) and kind != SLIDING,
            kv_source=sources[kind] if is_shared else None,
            stores_kv=shared > 0 and not is_shared and sources[kind] == i,
            ffn_hidden_size=width * (2 if wide else 1),
            moe=bool(config.get("enable_moe_block", False)),
        ))
    return facts
