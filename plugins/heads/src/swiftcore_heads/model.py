"""``HeadModel``: any backbone's decoder (its ``parts.language_model``) plus a task head.

One implementation for every model family: the decoder is the text model transformers builds for the
family (``Qwen3_5TextModel``, ``Gemma4TextModel``, ...), called with ``input_ids`` and either an
``attention_mask`` (padded batch, left or right) or ``seq_lens`` (packed, padding-free batch).

- ``classification`` / ``reranker``: ``score = Linear(hidden, num_labels, bias=False)`` on the pooled
  token; the same layout as transformers' ``*ForSequenceClassification`` so it saves into that format.
- ``embedding``: the pooled hidden state (normalised by the caller, after Matryoshka truncation).
- ``generative_reranker``: ``logit("yes") - logit("no")`` at the last token, computed from the two rows
  of the model's own ``lm_head`` (the input embedding when they are tied); no new parameters.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from swiftcore_heads.pooling import pool, position_ids_from_mask

__all__ = ["HeadModel", "extract_decoder", "output_head"]

_PACKED_KWARGS = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")


def extract_decoder(model: Any, spec: Any) -> Any:
    """The decoder (text model) of a loaded model, found at ``spec.parts.language_model``.

    Falls back to ``model.get_decoder()`` for specs that name no language model part.
    """
    for prefix in spec.parts.language_model:
        try:
            return model.get_submodule(prefix)
        except AttributeError:
            continue
    return model.get_decoder()


def output_head(model: Any) -> tuple[Any, bool]:
    """``(lm_head module, tied)``: the output projection and whether it shares the input embedding's weight."""
    head = model.get_output_embeddings()
    tied = head.weight is model.get_input_embeddings().weight
    return head, tied


class HeadModel(nn.Module):
    """A decoder and a task head; ``forward`` returns pooled embeddings or scores, ``[N, D]``.

    Args:
        decoder: the backbone's text model (returns ``last_hidden_state``).
        task: ``classification``, ``embedding``, ``reranker`` or ``generative_reranker``.
        pooling: ``last`` or ``mean``.
        num_labels: output width of the score layer (classification / reranker).
        lm_head: the causal LM's output layer (generative reranker); None when tied to the input embedding.
        yes_no_ids: token ids of the positive and negative answers (generative reranker).
        logit_softcap: the family's final logit soft-capping (Gemma), applied to the two logits.
    """

    def __init__(
        self,
        decoder: Any,
        task: str,
        *,
        pooling: str = "last",
        num_labels: int = 1,
        lm_head: Any = None,
        yes_no_ids: tuple[int, int] | None = None,
        logit_softcap: float | None = None,
    ) -> None:
        super().__init__()
        self.decoder = decoder
        self.task = task
        self.pooling = pooling
        self.num_labels = num_labels
        self.logit_softcap = logit_softcap
        hidden = decoder.config.hidden_size
        self.score = None
        if task in ("classification", "reranker"):
            self.score = nn.Linear(hidden, num_labels, bias=False)
            std = getattr(decoder.config, "initializer_range", 0.02)
            nn.init.normal_(self.score.weight, std=std)
            self.score.to(dtype=next(decoder.parameters()).dtype)
        if task == "generative_reranker":
            if yes_no_ids is None:
                raise ValueError("generative_reranker needs yes_no_ids")
            # Registered only when untied: a tied head *is* the embedding, already in the decoder.
            self.lm_head = lm_head
            self.register_buffer("yes_no_ids", torch.tensor(yes_no_ids, dtype=torch.long), persistent=False)
        #: settings recorded in ``swiftcore_head.json`` when saved (pooling, labels, normalize, tokens ...)
        self.head_info: dict[str, Any] = {"pooling": pooling}
        # Saved beside the weights by save_pretrained; not a submodule (set by the factory or loader).
        self.tokenizer: Any = None

    def save_pretrained(self, save_directory: str, tokenizer: Any = None) -> Any:
        """Save in the head's ecosystem format (see :mod:`swiftcore_heads.save`), with ``swiftcore_head.json``.

        Args:
            save_directory: the directory (created).
            tokenizer: saved alongside (default: the one the factory or loader attached).

        Returns:
            The directory as a ``Path``.
        """
        from swiftcore_heads.save import save_head_model

        tokenizer = tokenizer if tokenizer is not None else self.tokenizer
        return save_head_model(self, tokenizer, save_directory, self.head_info)

    @classmethod
    def from_pretrained(cls, checkpoint_dir: str, torch_dtype: Any = torch.float32) -> HeadModel:
        """Load a head checkpoint (``swiftcore train --task ...`` or :meth:`save_pretrained`); see
        :func:`swiftcore_heads.save.load_head_model`. The tokenizer is attached as ``.tokenizer``."""
        from swiftcore_heads.save import load_head_model

        model, tokenizer = load_head_model(checkpoint_dir, torch_dtype)
        model.tokenizer = tokenizer
        return model

    @property
    def config(self) -> Any:
        """The decoder's config (the Trainer and peft look for one)."""
        return self.decoder.config

    def hidden_states(
        self, input_ids: Any, attention_mask: Any = None, seq_lens: Any = None, position_ids: Any = None, **packed: Any
    ) -> Any:
        """The decoder's last hidden states for a padded (``attention_mask``) or packed (``seq_lens``) batch."""
        if seq_lens is not None:
            kwargs = {k: packed[k] for k in _PACKED_KWARGS if k in packed}
            out = self.decoder(input_ids=input_ids, position_ids=position_ids, use_cache=False, **kwargs)
        else:
            if attention_mask is None:
                attention_mask = torch.ones_like(input_ids)
            # Positions from the mask: a left-padded sample sees the positions it has when alone.
            out = self.decoder(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids_from_mask(attention_mask),
                use_cache=False,
            )
        return out.last_hidden_state

    def forward(
        self, input_ids: Any, attention_mask: Any = None, seq_lens: Any = None, position_ids: Any = None, **packed: Any
    ) -> Any:
        """Pooled output per sample: embeddings ``[N, H]``, scores ``[N, num_labels]`` or ``[N, 1]``."""
        hidden = self.hidden_states(input_ids, attention_mask, seq_lens, position_ids, **packed)
        method = "last" if self.task == "generative_reranker" else self.pooling
        pooled = pool(hidden, method, attention_mask=attention_mask, seq_lens=seq_lens)
        if self.task == "embedding":
            return pooled
        if self.score is not None:
            return self.score(pooled)
        weight = self.lm_head.weight if self.lm_head is not None else self.decoder.get_input_embeddings().weight
        logits = nn.functional.linear(pooled, weight[self.yes_no_ids])
        if self.logit_softcap:
            logits = torch.tanh(logits / self.logit_softcap) * self.logit_softcap
        return logits[:, :1] - logits[:, 1:]
