"""Test helpers for multi-token-prediction (MTP) layers: a reference built from transformers' modules, megatron's
MTP logits at TP 1, and a tiny release-style checkpoint with an MTP layer.

transformers has no head for DeepSeek-V3-style MTP layers (GLM-5's, MiMo-V2's): it drops them on load. The
reference follows the definition megatron trains with (:mod:`swiftcore_megatron.mtp`)::

    logits_t = lm_head(final_norm(layer(eh_proj(cat[enorm(embed(x_{t+1})), hnorm(h_t)]))))

with ``h_t`` the main transformers model's last hidden state (after its final norm) and ``x_{t+1}`` the tokens
rolled left by one, the last position filled with token 0 (as megatron does). Only the MTP layer itself differs per
family: the caller gives it as a one-layer transformers model (``one_layer``), built with :func:`one_layer_state`
and :func:`load_one_layer`. Its keywords make the negative controls that show the reference tells the plausible
mistakes apart.

Importing this module imports neither torch nor transformers.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

__all__ = [
    "PER_LAYER_LISTS",
    "SHARED_COPIES",
    "load_one_layer",
    "mcore_mtp_logits",
    "mtp_reference_logits",
    "one_layer_state",
    "with_mtp_layer",
]

#: The tensors every DeepSeek-V3-style MTP layer has beside its transformer layer (names after its prefix).
_GLUE = ("enorm.", "hnorm.", "eh_proj.")

#: The release layout's copies of the main model's embedding and head in the MTP layer (GLM-5's, DeepSeek-V3's):
#: MTP-layer tensor name -> the main model's tensor it equals.
SHARED_COPIES: Mapping[str, str] = {
    "embed_tokens.weight": "model.embed_tokens.weight",
    "shared_head.head.weight": "lm_head.weight",
}

#: config.json's per-layer lists that :func:`with_mtp_layer`'s twin extends by one entry (those present).
PER_LAYER_LISTS = ("layer_types", "mlp_layer_types", "indexer_types")


def one_layer_state(
    tensors: Mapping[str, Any],
    prefix: str,
    *,
    final_norm: str,
    drop: tuple[str, ...] = (),
    renames: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The state dict of a one-layer causal LM that is the MTP layer at ``prefix``.

    Layer 0 holds the MTP layer's tensors but its glue (``enorm``, ``hnorm``, ``eh_proj``, the final norm and the
    names starting with one of ``drop``), each name after ``prefix`` with every ``old -> new`` of ``renames``
    replaced; the final norm is ``prefix + final_norm``; the embedding and the head are the main model's.

    Args:
        tensors: the checkpoint's tensors, the main model's and the MTP layer's.
        prefix: the MTP layer's names' prefix (``"model.layers.3."``, ``"model.mtp.layers.0."``).
        final_norm: the MTP layer's final norm module, after ``prefix`` (``"shared_head.norm"``).
        drop: further name prefixes (after ``prefix``) that are not the transformer layer's.
        renames: substrings of the MTP layer's names to replace with transformers' decoder-layer names.
    """
    skip = (*_GLUE, final_norm + ".", *drop)
    state = {}
    for key, tensor in tensors.items():
        rest = key[len(prefix) :]
        if key.startswith(prefix) and not rest.startswith(skip):
            state["model.layers.0." + _renamed(rest, renames)] = tensor
    state.update(
        {
            "model.norm.weight": tensors[prefix + final_norm + ".weight"],
            "model.embed_tokens.weight": tensors["model.embed_tokens.weight"],
            "lm_head.weight": tensors["lm_head.weight"],
        }
    )
    return state


def _renamed(name: str, renames: Mapping[str, str] | None) -> str:
    """``name`` with every ``old -> new`` of ``renames`` replaced, in order."""
    for old, new in (renames or {}).items():
        name = name.replace(old, new)
    return name


def load_one_layer(model_class: Any, config: Mapping[str, Any], state: Mapping[str, Any]) -> Any:
    """``model_class`` (a transformers causal LM) of ``config`` holding ``state``, float32, in eval mode.

    It is saved and loaded (not built and filled), so that transformers lays the weights out as it loads them
    (fusing the experts, for one).
    """
    import torch
    from safetensors.torch import save_file

    with tempfile.TemporaryDirectory() as tmp:
        model_class.config_class(**config).save_pretrained(tmp)
        save_file(dict(state), Path(tmp) / "model.safetensors", metadata={"format": "pt"})
        return model_class.from_pretrained(tmp, dtype=torch.float32).eval()


def mtp_reference_logits(
    hf_dir: Path,
    tokens: Any,
    one_layer: Callable[[dict[str, Any], dict[str, Any], str], Any],
    *,
    prefix: str | None = None,
    concat: str = "eh",
    pre_norm: bool = False,
    mask_first: bool = False,
) -> Any:
    """The MTP layer's float32 logits ``[batch, seq, vocab]`` from transformers' modules (see the module docstring).

    Args:
        hf_dir: the checkpoint (one ``model.safetensors``) with its MTP layer.
        tokens: token ids ``[batch, seq]``.
        one_layer: ``one_layer(config, tensors, prefix)``: the MTP layer as a one-layer transformers causal LM
            (config.json's dict, every tensor of the checkpoint, ``prefix``); the main model loads with its class.
        prefix: the MTP layer's names' prefix (default ``model.layers.{N}.``, as GLM-5's release has it).
        concat: ``"eh"`` (embedding first, as megatron does); ``"he"`` swaps them (a negative control).
        pre_norm: feed the main model's hidden state before its final norm (a negative control).
        mask_first: zero position 0's embedding, as vLLM's proposer does (a negative control).
    """
    import torch
    from safetensors.torch import load_file

    config = json.loads((hf_dir / "config.json").read_text())
    tensors = load_file(hf_dir / "model.safetensors")
    prefix = prefix or f"model.layers.{config['num_hidden_layers']}."
    layer = one_layer(config, tensors, prefix)
    main = type(layer).from_pretrained(hf_dir, dtype=torch.float32).eval()
    norm_class, eps = type(main.model.norm), float(config["rms_norm_eps"])
    enorm, hnorm = norm_class(config["hidden_size"], eps=eps), norm_class(config["hidden_size"], eps=eps)
    enorm.weight.data, hnorm.weight.data = tensors[prefix + "enorm.weight"], tensors[prefix + "hnorm.weight"]
    with torch.no_grad():
        hidden = _before_final_norm(main, tokens) if pre_norm else main.model(input_ids=tokens).last_hidden_state
        following = torch.roll(tokens, -1, dims=1)
        following[:, -1] = 0  # megatron fills the last position with token 0
        embedded = main.model.embed_tokens(following)
        if mask_first:
            embedded[:, 0] = 0
        e, h = enorm(embedded), hnorm(hidden)
        joined = torch.cat([e, h] if concat == "eh" else [h, e], dim=-1)
        return layer(inputs_embeds=joined @ tensors[prefix + "eh_proj.weight"].T).logits.float()


def _before_final_norm(main: Any, tokens: Any) -> Any:
    """The main model's last hidden state before its final norm (the final norm replaced by identity)."""
    import torch

    norm = main.model.norm
    main.model.norm = torch.nn.Identity()
    try:
        return main.model(input_ids=tokens).last_hidden_state
    finally:
        main.model.norm = norm


def mcore_mtp_logits(bridge: Any, mcore_dir: Path, tokens: Any) -> tuple[Any, list[Any]]:
    """Megatron's float32 main and MTP logits of the converted checkpoint ``mcore_dir`` at TP 1, in this process.

    Returns:
        ``(main, [one tensor per MTP depth])``, as :func:`swiftcore_megatron.mtp.mtp_logits` gives them.
    """
    import torch

    from swiftcore_megatron.convert import load_mcore_state
    from swiftcore_megatron.mtp import mtp_logits
    from swiftcore_megatron.runtime import init_model_parallel, load_into_model

    init_model_parallel(1, 1)
    model = bridge.build_model(params_dtype=torch.float32)
    state = load_mcore_state(mcore_dir, bridge)
    load_into_model(model, {k: v.float() if v.is_floating_point() else v for k, v in state.items()})
    return mtp_logits(model, tokens)


def with_mtp_layer(
    base: Path,
    out: Path,
    model_class: Any,
    *,
    seed: int,
    layer_kinds: Mapping[str, str] | None = None,
    prefix: str | None = None,
    renames: Mapping[str, str] | None = None,
    final_norm: str = "shared_head.norm",
    copies: Mapping[str, str] = SHARED_COPIES,
    eh_proj_std: float = 0.02,
    generator: Any = None,
    edit: Callable[[dict[str, Any]], None] | None = None,
) -> Path:
    """Copy the tiny checkpoint ``base`` (one ``model.safetensors``) to ``out`` with a release-style MTP layer.

    The layer is the last layer of a random twin of ``base`` with one more layer (``model_class``, built after
    ``torch.manual_seed(seed)``), its names moved from ``model.layers.{N}.`` to ``prefix`` with every
    ``old -> new`` of ``renames`` replaced. The glue is added: ``enorm``, ``hnorm`` and ``final_norm`` at 1,
    ``eh_proj`` random (std ``eh_proj_std``, drawn from ``generator``, else torch's global one), and ``copies`` of
    the main model's tensors. config.json gets ``num_nextn_predict_layers: 1``.

    Args:
        base: the checkpoint without MTP layers.
        out: where the copy goes (must not exist).
        model_class: the transformers causal LM class of ``base``.
        seed: torch's seed for the twin.
        layer_kinds: the twin's extra entry of config.json's per-layer lists (:data:`PER_LAYER_LISTS`); a list
            not named gets its last entry again.
        prefix: the MTP layer's names' prefix (default ``model.layers.{N}.``, as GLM-5's release has it).
        renames: substrings to replace in the twin layer's names (after the prefix).
        final_norm: the MTP layer's final norm module, after ``prefix``.
        copies: MTP-layer tensor name -> the main model's tensor it is a copy of (default :data:`SHARED_COPIES`).
        eh_proj_std: the standard deviation of ``eh_proj``'s entries.
        generator: the ``torch.Generator`` that draws ``eh_proj``.
        edit: called with the MTP layer's tensors (full names, in place) before they are saved, to randomise them.
    """
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(base, out)
    config = json.loads((base / "config.json").read_text())
    n, hidden = config["num_hidden_layers"], config["hidden_size"]
    twin = {k: v for k, v in config.items() if k not in ("architectures", "transformers_version")}
    twin["num_hidden_layers"] = n + 1
    kinds = layer_kinds or {}
    for key in PER_LAYER_LISTS:
        if key in kinds:
            twin[key] = [*twin[key], kinds[key]]
        elif isinstance(twin.get(key), list):
            twin[key] = [*twin[key], twin[key][-1]]
    torch.manual_seed(seed)
    model_class(model_class.config_class(**twin)).save_pretrained(out / "twin")
    layer, mtp = f"model.layers.{n}.", prefix or f"model.layers.{n}."
    twin_tensors = load_file(out / "twin" / "model.safetensors")
    tensors = {mtp + _renamed(k[len(layer) :], renames): v for k, v in twin_tensors.items() if k.startswith(layer)}
    shutil.rmtree(out / "twin")
    main = load_file(out / "model.safetensors")
    tensors.update({mtp + name + ".weight": torch.ones(hidden) for name in ("enorm", "hnorm", final_norm)})
    tensors[mtp + "eh_proj.weight"] = torch.randn(hidden, 2 * hidden, generator=generator) * eh_proj_std
    tensors.update({mtp + name: main[source].clone() for name, source in copies.items()})
    if edit is not None:
        edit(tensors)
    save_file({**main, **tensors}, out / "model.safetensors", metadata={"format": "pt"})
    config["num_nextn_predict_layers"] = 1
    (out / "config.json").write_text(json.dumps(config, indent=2))
    return out
