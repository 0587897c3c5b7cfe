"""Save a trained head model in the format its ecosystem loads, and load any such checkpoint back.

- embedding: the decoder (``AutoModel`` loads it) plus the sentence-transformers files (``modules.json``,
  ``1_Pooling/config.json``, ``2_Normalize``, ``sentence_bert_config.json``,
  ``config_sentence_transformers.json``), so ``SentenceTransformer(dir)`` gives the same vectors.
- classification / reranker: transformers' ``*ForSequenceClassification`` for the family when it has one
  (``AutoModelForSequenceClassification`` loads it); otherwise the decoder plus ``score.safetensors``.
- generative_reranker: the text-only ``*ForCausalLM`` (any backend serves it as a causal LM).

Every checkpoint also carries ``swiftcore_head.json`` (task, pooling, labels, format) for :func:`load_head_model`.
LoRA adapters are merged into a copy of the decoder first: the saved model needs no peft.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import torch

from swiftcore_heads import HEAD_FILE
from swiftcore_heads.errors import HeadCheckpointError
from swiftcore_heads.model import HeadModel

__all__ = ["save_head_model", "load_head_model", "FORMATS"]

FORMATS = ("sentence-transformers", "transformers-sequence-classification", "swiftcore-score", "transformers-causal-lm")
_SCORE_FILE = "score.safetensors"


def _merged_decoder(model: HeadModel) -> Any:
    peft_model = getattr(model, "_peft", None)
    if peft_model is None:
        return model.decoder
    return copy.deepcopy(peft_model).merge_and_unload()


def _with_class(cls: Any, config: Any, decoder: Any, extra: dict[str, Any]) -> Any:
    """An instance of ``cls`` sharing ``decoder``'s tensors, built without a random init (meta device)."""
    with torch.device("meta"):
        model = cls(config)
    base = getattr(model, model.base_model_prefix)
    base.load_state_dict(decoder.state_dict(), strict=True, assign=True)
    for name, tensor in extra.items():
        owner, _, attr = name.rpartition(".")
        setattr(model.get_submodule(owner) if owner else model, attr, torch.nn.Parameter(tensor.detach().clone()))
    # Non-persistent buffers (rotary frequencies) are not in the state dict: take the decoder's own.
    for name, buf in list(base.named_buffers()):
        if buf.is_meta:
            owner, _, attr = name.rpartition(".")
            (base.get_submodule(owner) if owner else base)._buffers[attr] = decoder.get_buffer(name)
    return model


def save_head_model(model: HeadModel, tokenizer: Any, out_dir: str | Path, info: dict[str, Any]) -> Path:
    """Write ``model`` to ``out_dir`` in its ecosystem format (see the module docstring).

    Args:
        model: the trained :class:`HeadModel`.
        tokenizer: its tokenizer (saved alongside; None saves the weights only).
        out_dir: the directory (created).
        info: head settings recorded in ``swiftcore_head.json`` (pooling, normalize, labels, tokens ...).

    Returns:
        ``out_dir``.
    """
    from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    decoder = _merged_decoder(model)
    config = copy.deepcopy(decoder.config)
    if tokenizer is not None and tokenizer.pad_token_id is not None:
        config.pad_token_id = tokenizer.pad_token_id
    task = model.task
    if task == "embedding":
        fmt = "sentence-transformers"
        decoder.save_pretrained(out)
        _write_sentence_transformers(out, info, decoder.config.hidden_size)
    elif task in ("classification", "reranker"):
        config.num_labels = model.num_labels
        config.problem_type = info.get("problem_type")
        if info.get("id2label"):
            config.id2label = {int(k): v for k, v in info["id2label"].items()}
            config.label2id = {v: int(k) for k, v in info["id2label"].items()}
        cls = MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING.get(type(config), None)
        if cls is not None:
            fmt = "transformers-sequence-classification"
            config.architectures = [cls.__name__]
            _with_class(cls, config, decoder, {"score.weight": model.score.weight}).save_pretrained(out)
        else:
            fmt = "swiftcore-score"
            decoder.config.num_labels = model.num_labels
            decoder.save_pretrained(out)
            from safetensors.torch import save_file

            save_file({"weight": model.score.weight.detach().contiguous()}, str(out / _SCORE_FILE))
    else:
        fmt = "transformers-causal-lm"
        cls = MODEL_FOR_CAUSAL_LM_MAPPING.get(type(config), None)
        if cls is None:
            raise HeadCheckpointError(f"transformers has no causal-LM class for {type(config).__name__}; cannot save")
        config.architectures = [cls.__name__]
        tied = model.lm_head is None
        config.tie_word_embeddings = tied
        extra = {} if tied else {"lm_head.weight": model.lm_head.weight}
        lm = _with_class(cls, config, decoder, extra)
        if tied:
            lm.tie_weights()
        lm.save_pretrained(out)
    if tokenizer is not None:
        tok = copy.deepcopy(tokenizer)
        tok.padding_side = "right"  # exact for a causal model: no real token ever attends to padding
        tok.save_pretrained(out)
    (out / HEAD_FILE).write_text(json.dumps({**info, "task": task, "format": fmt}, indent=2), encoding="utf-8")
    return out


def _write_sentence_transformers(out: Path, info: dict[str, Any], hidden: int) -> None:
    import importlib.metadata

    pooling = info.get("pooling", "last")
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if info.get("normalize", True):
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"})
        (out / "2_Normalize").mkdir(exist_ok=True)
    (out / "modules.json").write_text(json.dumps(modules, indent=2), encoding="utf-8")
    (out / "1_Pooling").mkdir(exist_ok=True)
    pool_cfg = {
        "word_embedding_dimension": hidden,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": pooling == "mean",
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": pooling == "last",
        "include_prompt": True,
    }
    (out / "1_Pooling" / "config.json").write_text(json.dumps(pool_cfg, indent=2), encoding="utf-8")
    (out / "sentence_bert_config.json").write_text(
        json.dumps({"max_seq_length": info.get("max_length", 512), "do_lower_case": False}, indent=2), encoding="utf-8"
    )
    try:
        st_version = importlib.metadata.version("sentence-transformers")
    except importlib.metadata.PackageNotFoundError:
        st_version = "5.0.0"
    st_cfg = {
        "__version__": {"sentence_transformers": st_version},
        "prompts": {},
        "default_prompt_name": None,
        "similarity_fn_name": "cosine",
    }
    (out / "config_sentence_transformers.json").write_text(json.dumps(st_cfg, indent=2), encoding="utf-8")


def read_head_info(checkpoint_dir: str | Path) -> dict[str, Any]:
    """The ``swiftcore_head.json`` of a head checkpoint.

    Raises:
        HeadCheckpointError: the directory has none (not a head checkpoint).
    """
    path = Path(checkpoint_dir) / HEAD_FILE
    if not path.is_file():
        raise HeadCheckpointError(
            f"{checkpoint_dir}: no {HEAD_FILE}; this is not a head checkpoint written by `swiftcore train --task ...`"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def load_head_model(checkpoint_dir: str | Path, torch_dtype: Any = torch.float32) -> tuple[HeadModel, Any]:
    """Load a head checkpoint written by :func:`save_head_model`.

    Args:
        checkpoint_dir: the directory (``output_dir/checkpoint-N``).
        torch_dtype: the dtype to load in.

    Returns:
        ``(model, tokenizer)``; ``model.head_info`` is the checkpoint's ``swiftcore_head.json``; the
        tokenizer is None when the checkpoint has none.
    """
    from transformers import AutoModel, AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    info = read_head_info(checkpoint_dir)
    path = str(checkpoint_dir)
    fmt, task = info["format"], info["task"]
    pooling = info.get("pooling", "last")
    if fmt == "sentence-transformers":
        model = HeadModel(AutoModel.from_pretrained(path, dtype=torch_dtype), task, pooling=pooling)
    elif fmt == "transformers-sequence-classification":
        seq = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch_dtype)
        model = HeadModel(getattr(seq, seq.base_model_prefix), task, pooling=pooling, num_labels=seq.config.num_labels)
        model.score = seq.score
    elif fmt == "swiftcore-score":
        from safetensors.torch import load_file

        decoder = AutoModel.from_pretrained(path, dtype=torch_dtype)
        weight = load_file(str(Path(path) / _SCORE_FILE))["weight"]
        model = HeadModel(decoder, task, pooling=pooling, num_labels=weight.shape[0])
        model.score.weight.data.copy_(weight.to(model.score.weight.dtype))
    elif fmt == "transformers-causal-lm":
        lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
        head, tied = lm.get_output_embeddings(), bool(lm.config.get_text_config().tie_word_embeddings)
        model = HeadModel(
            lm.get_decoder(),
            task,
            lm_head=None if tied else head,
            yes_no_ids=tuple(info["yes_no_ids"]),
            logit_softcap=getattr(lm.config.get_text_config(), "final_logit_softcapping", None),
        )
    else:
        raise HeadCheckpointError(f"{checkpoint_dir}: unknown head format {fmt!r} in {HEAD_FILE}; expected {FORMATS}")
    model.head_info = info
    model.eval()
    # A head saved without a tokenizer (save_pretrained on a bare module) still loads: the caller brings one.
    has_tokenizer = (Path(path) / "tokenizer_config.json").is_file()
    return model, AutoTokenizer.from_pretrained(path) if has_tokenizer else None
