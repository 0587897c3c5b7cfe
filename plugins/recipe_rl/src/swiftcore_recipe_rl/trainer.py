"""The RL trainers: TRL 1.16's GRPOTrainer and RLOOTrainer with swiftcore's atomic checkpoints and template-encoded
prompts, and REINFORCE++ as a small GRPOTrainer subclass.

Each class is built on first use (:func:`trainer_class`) so that importing this module imports neither torch nor
TRL.

Why REINFORCE++ is a subclass here: TRL 1.16 has no REINFORCE++ trainer (its RLOOTrainer is sequence-level and
leave-one-out; its GRPOTrainer normalises per group). REINFORCE++ (Hu et al., 2025, arXiv:2501.03262; OpenRLHF's
``--advantage_estimator reinforce`` / ``reinforce_baseline``) differs from GRPO only in its advantages: token-level
returns of the KL-penalised reward, normalised over the whole batch; its loss is PPO's clipped per-token
surrogate, which is GRPOTrainer's own ``_compute_loss`` fed ``(B, T)`` advantages (TRL supports that shape for
subclasses). So :func:`reinforce_pp_advantages` replaces GRPO's advantages and nothing else is rewritten: rollouts,
rewards, clipping, loss normalisation, logging and checkpoints stay TRL's.
"""

from __future__ import annotations

import logging
from functools import cache
from typing import Any

__all__ = [
    "chunk_lm_heads",
    "configure_async_rollouts",
    "configure_loss_variants",
    "gkd_trainer_class",
    "grpo_trainer_class",
    "opd_trainer_class",
    "opsd_trainer_class",
    "reinforce_pp_advantages",
    "reinforce_pp_trainer_class",
    "rloo_trainer_class",
    "trainer_class",
]

log = logging.getLogger("swiftcore.rl")


@cache
def _template_prompts() -> type:
    """The mixin that hands TRL the recipe's template ids instead of letting it tokenize prompts again."""

    class TemplatePrompts:
        """A TRL online trainer whose prompts are the ids the family's swiftcore template encodes.

        ``prompt_ids`` maps each dataset row's ``prompt`` text to its template ids (set by the recipe); TRL
        would otherwise tokenize the text again, and a tokenizer that adds a BOS or splits a special token
        differently would train the policy on prompts it is never served.
        """

        prompt_ids: dict[str, list[int]] = {}

        def _tokenize_prompts(self, prompts: list) -> tuple[list[list[int]], None, dict]:
            if all(isinstance(p, str) and p in self.prompt_ids for p in prompts):
                return [list(self.prompt_ids[p]) for p in prompts], None, {}
            return super()._tokenize_prompts(prompts)  # prompts the recipe did not encode (tests, subclasses)

    return TemplatePrompts


@cache
def _image_prompts() -> type:
    """The mixin that gives TRL's generation and loss the pixels of prompts with images (see :class:`ImagePrompts`)."""
    import torch

    from swiftcore_recipe_rl.prompts import MEDIA_COLUMN

    class ImagePrompts:
        """A TRL GRPO (or RLOO, or Distillation) trainer whose prompts may carry images, encoded once by the plan as
        ``swiftcore infer`` encodes them (:meth:`~swiftcore_recipe_rl.rollout.PromptCodec.encode_prompt`: the
        template, each image's placeholder expanded by the model's media preparer).

        Why these hooks: TRL 1.16's GRPOTrainer has its VLM path, but it renders the prompts with the tokenizer's
        chat template and runs the processor on that text again (an encoding that is not the one served). Here
        ``_tokenize_prompts`` returns the plan's ids and, as TRL's own ``multimodal_fields``, the pixel tensors the
        preparer makes (its ``collate``, the SFT collator's concatenation), so TRL's ``generate`` call sees them;
        the round's tensors are then added to the rollout batch under TRL's names (``pixel_values``,
        ``image_grid_thw``, ``num_images``, ``mm_token_type_ids`` over prompt and completion), which TRL's loss,
        its per-sample slicing in ``_get_per_token_logps_and_entropies`` and its batch splitting
        (``split_pixel_values_by_grid``) read. The old-policy and reference log-probs TRL computes while scoring a
        round get the same tensors (:meth:`_get_per_token_logps_and_entropies`).

        Two rows that differ only in their image have the same prompt text, so each row is found by its
        :data:`~swiftcore_recipe_rl.prompts.MEDIA_COLUMN` (taken out of the batch before the rewards see it; they
        get the row's own record as ``records``). Set by the recipe with :meth:`attach_media`.
        """

        prompt_media: list[dict[str, Any]] = []
        media: Any = None
        _round_rows: list[int] | None = None
        _round_media: dict[str, Any] | None = None
        #: The prompt records of the round being generated, in order (None outside an image round): what a rollout
        #: engine is asked with (:func:`_engine_rollouts`), since template ids cannot carry the pixels.
        round_records: list[dict[str, Any]] | None = None

        def attach_media(self, prompt_media: list[dict[str, Any]], media: Any) -> None:
            """Train on image prompts: ``prompt_media`` (the plan's
            :attr:`~swiftcore_recipe_rl.prompts.EncodedPrompts.media`) and ``media`` (the media preparer).

            Generation never samples the model's image or video placeholder tokens: a sampled one would have no
            pixels behind it, and the forward of the loss would fail on the count (TRL suppresses the image token
            the same way when its processing class is a processor; here it is the tokenizer)."""
            self.prompt_media, self.media = prompt_media, media
            config = self.accelerator.unwrap_model(self.model).config
            placeholders = [getattr(config, name, None) for name in ("image_token_id", "video_token_id")]
            placeholders = [int(t) for t in placeholders if t is not None]
            if not placeholders or not hasattr(self, "generation_kwargs"):  # TRL's vLLM path has no such kwargs
                return
            suppressed = sorted({*(self.generation_kwargs.get("suppress_tokens") or ()), *placeholders})
            self.generation_kwargs["suppress_tokens"] = suppressed
            self.generation_config.suppress_tokens = suppressed

        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            if not inputs or MEDIA_COLUMN not in inputs[0]:
                return super()._generate_and_score_completions(inputs)
            rows = [int(x[MEDIA_COLUMN]) for x in inputs]
            inputs = [
                {**{k: v for k, v in x.items() if k != MEDIA_COLUMN}, "records": self.prompt_media[r]["record"]}
                for x, r in zip(inputs, rows, strict=True)
            ]
            saved = self._round_rows, self._round_media, self.round_records  # a round inside another (a refill)
            self._round_rows, self._round_media, self.round_records = rows, None, None
            try:
                out = super()._generate_and_score_completions(inputs)
                media = self._round_media
            finally:
                self._round_rows, self._round_media, self.round_records = saved
            if media is not None:  # under TRL's names: its loss and its batch splitting read them
                out.update(self._forward_media(media, out["prompt_ids"].size(1), out["completion_ids"].size(1)))
            return out

        def _tokenize_prompts(self, prompts: list) -> tuple[list[list[int]], None, dict]:
            rows = self._round_rows
            if rows is None or len(rows) != len(prompts):
                return super()._tokenize_prompts(prompts)
            entries = [self.prompt_media[r] for r in rows]
            ids = [list(e["ids"]) for e in entries]
            if all(e["media"] is None for e in entries):
                return ids, None, {}
            self._round_media = media = self._media_batch(rows)
            self.round_records = [self.prompt_media[r]["prompt_record"] for r in rows]
            fields = dict(media["tensors"])
            if media["types"] is not None:  # per prompt token: TRL left-pads it as it pads the ids
                fields["mm_token_type_ids"] = media["types"]
            return ids, None, fields  # images None: TRL would otherwise run its own processor path again

        def _media_batch(self, rows: list[int]) -> dict[str, Any]:
            """The round's media: ``tensors`` (the preparer's, concatenated in row order as the SFT collator
            concatenates them), ``num_images`` per row and ``types`` (each row's ``mm_token_type_ids``, or None when
            the processor makes none)."""
            cache: dict[int, dict[str, Any]] = {}
            samples, num_images = [], []
            for r in rows:
                media = self.prompt_media[r]["media"]
                items = media.get("media_items") if media else None
                num_images.append(sum(1 for item in items or () if item[0] == "image"))
                if not items:
                    continue
                if r not in cache:  # once per prompt: a group repeats it num_generations times
                    cache[r] = self.media.media_tensors(items)
                samples.append({"input_ids": self.prompt_media[r]["ids"], **cache[r]})
            batch = self.media.collate(samples)
            tensors = {k: v for k, v in batch.items() if k not in ("input_ids", "labels", "attention_mask",
                                                                   "mm_token_type_ids")}  # fmt: skip
            typed = any(self.prompt_media[r]["media"] and "mm_token_type_ids" in self.prompt_media[r]["media"]
                        for r in rows)  # fmt: skip
            types = None
            if typed:
                types = []
                for r in rows:
                    media = self.prompt_media[r]["media"] or {}
                    types.append(list(media.get("mm_token_type_ids") or [0] * len(self.prompt_media[r]["ids"])))
            return {"tensors": tensors, "num_images": num_images, "types": types}

        def _forward_media(self, media: dict[str, Any], prompt_width: int, completion_width: int) -> dict[str, Any]:
            """The model inputs of a round's media for sequences of ``prompt_width`` left-padded prompt tokens and
            ``completion_width`` completion tokens (``mm_token_type_ids`` 0 on padding and completions)."""
            device = self.accelerator.device
            out: dict[str, Any] = {k: v.to(device) for k, v in media["tensors"].items()}
            out["num_images"] = list(media["num_images"])
            if media["types"] is not None:
                rows = [[0] * (prompt_width - len(t)) + t + [0] * completion_width for t in media["types"]]
                out["mm_token_type_ids"] = torch.tensor(rows, dtype=torch.long, device=device)
            return out

        def _get_per_token_logps_and_entropies(
            self, model: Any, input_ids: Any, attention_mask: Any, logits_to_keep: int, *args: Any, **kwargs: Any
        ) -> Any:
            media = self._round_media
            if media is not None and kwargs.get("pixel_values") is None:  # TRL's old / reference log-probs of a round
                kwargs.update(self._forward_media(media, input_ids.size(1) - logits_to_keep, logits_to_keep))
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )

    return ImagePrompts


@cache
def _engine_rollouts() -> type:
    """The mixin that generates rollouts with a swiftcore engine (``--rollout-engine``, ``--rollout-server``)."""
    from swiftcore.api import SwiftcoreError
    from swiftcore_recipe_rl.prefetch import Lookahead, RolloutPrefetch

    class EngineRollouts:
        """A TRL online trainer whose completions come from a swiftcore inference engine, synced to the policy
        before each generation round; optionally up to ``max_staleness`` rounds ahead (``async_rollouts``:
        :mod:`~swiftcore_recipe_rl.prefetch` has the schedule) and importance-corrected.

        Why ``_generate_single_turn`` and nothing else: it is TRL's one call from prompt ids to completion ids
        (GRPOTrainer and RLOOTrainer both have it; their vLLM path is a branch inside it). Above it TRL still
        tokenizes (our template ids, :func:`_template_prompts`), decodes, runs tools and rewards; below it the
        trainer computes log-probs, advantages and the loss on exactly the ids returned here. TRL's ``rollout_func``
        would also replace the prompt encoding and its vLLM weight sync hooks, which we do not need.

        The importance-sampling correction (``importance_sampling``) is TRL's own: GRPOTrainer corrects its vLLM
        rollouts with the sampling log-probs vLLM returns (``vllm_importance_sampling_*``), and guards that code
        with ``use_vllm``. The engine returns the same log-probs (``generate_rollouts(logprobs=True)``), so
        :attr:`use_vllm` reads True outside generation while the correction is on: TRL then recomputes the
        policy's log-probs of each rollout, forms the truncated (or masked) ratio and weighs the loss with it.
        Inside generation it reads False, so TRL never reaches for a vLLM client of its own.

        With the correction on, the mismatch between the engine's and the trainer's log-probs of each round is logged
        as ``rollout_kl`` (:func:`~swiftcore_recipe_rl.losses.rollout_kl`, ``KL(engine || trainer)``), next to TRL's
        ``sampling/sampling_logp_difference/*`` and ``sampling/importance_sampling_ratio/*``.

        Set by the recipe (None: TRL's own generation): ``rollout_engine`` (an engine), ``weight_sync``
        (:class:`~swiftcore_recipe_rl.sync.WeightSync`), ``prompt_records`` (template ids -> the prompt record,
        so the engine encodes and parses it as served), ``async_rollouts``, ``max_staleness`` (``K``, with
        ``async_rollouts``: :func:`configure_async_rollouts`) and ``importance_sampling``.
        """

        rollout_engine: Any = None
        weight_sync: Any = None
        prompt_records: dict[tuple[int, ...], dict] = {}
        async_rollouts: bool = False
        max_staleness: int = 1
        importance_sampling: bool = False
        _synced_step: int | None = None
        _returns_logprobs = True  # GRPOTrainer's returns (ids, logprobs); RLOOTrainer's the ids alone
        _use_vllm = False
        _in_generation = False
        _lookahead: Any = None
        _item_index = -1
        _prefetch: Any = None

        @property
        def use_vllm(self) -> bool:
            """TRL's own vLLM generation (always off in swiftcore), or the importance-sampling correction outside
            generation (see the class)."""
            return self._use_vllm or (self.importance_sampling and not self._in_generation)

        @use_vllm.setter
        def use_vllm(self, value: bool) -> None:
            self._use_vllm = bool(value)

        def _generate(self, prompts: list) -> Any:
            self._in_generation = True
            try:
                return super()._generate(prompts)
            finally:
                self._in_generation = False

        def _generate_single_turn(self, prompt_ids: Any, images: Any, multimodal_fields: Any, *args: Any, **kw: Any):
            if self.rollout_engine is None:
                return super()._generate_single_turn(prompt_ids, images, multimodal_fields, *args, **kw)
            records = None
            if images or multimodal_fields:  # an image round: the engine gets each row's record (ids lack pixels)
                records = getattr(self, "round_records", None)
                if records is None or len(records) != len(prompt_ids) or self._prefetch is not None:
                    raise SwiftcoreError("--rollout-engine: these prompts' images cannot reach the engine here "
                                         "(asynchronous rollouts, or a trainer without image prompts)")  # fmt: skip
            mode = "train" if self.model.training else "eval"
            taken = None
            if self._prefetch is not None:
                if mode == "train":  # the oldest round ahead, if it is this one's and within --max-staleness
                    taken = self._prefetch.take(prompt_ids, self.state.global_step)
                if taken is None:
                    self._prefetch.wait()  # the engine's weights change only while the worker is idle
            if taken is not None:
                rollouts, weights_step = taken
            else:
                self.sync_rollout_engine()
                rollouts, weights_step = self.engine_rollouts(prompt_ids, records), self.state.global_step
            if self.async_rollouts:
                self._metrics[mode]["rollout_staleness"].append(float(self.state.global_step - weights_step))
                if mode == "train":
                    self._prefetch_rounds()
            completion_ids = [ids for _, ids in rollouts]
            if not self._returns_logprobs:
                return completion_ids
            logprobs = [g.logprobs for g, _ in rollouts] if self.importance_sampling else None
            return completion_ids, logprobs

        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            out = super()._generate_and_score_completions(inputs)
            sampled, trained = out.get("sampling_per_token_logps"), out.get("old_per_token_logps")
            if self.importance_sampling and sampled is not None and trained is not None:
                from swiftcore_recipe_rl.losses import rollout_kl

                mask = out["completion_mask"] * out["tool_mask"] if "tool_mask" in out else out["completion_mask"]
                kl = rollout_kl(trained, sampled, mask)
                mode = "train" if self.model.training else "eval"
                self._metrics[mode]["rollout_kl"].append(self.accelerator.gather(kl).mean().item())
            return out

        def sync_rollout_engine(self) -> Any:
            """Push the policy's weights to the engine once per optimiser step (the first round included); log
            ``sync_s`` and ``sync_bytes``. Returns the :class:`~swiftcore_recipe_rl.sync.SyncStats`, or None when
            the engine already has this step's weights."""
            if self._synced_step == self.state.global_step:
                return None
            stats = self.weight_sync.push(self.model)
            self._synced_step = self.state.global_step
            mode = "train" if self.model.training else "eval"
            self._metrics[mode]["sync_s"].append(stats.seconds)
            self._metrics[mode]["sync_bytes"].append(float(stats.bytes))
            return stats

        def engine_rollouts(
            self, prompt_ids: list[list[int]], records: list[dict[str, Any]] | None = None
        ) -> list[tuple[Any, list[int]]]:
            """``(Generation, completion ids)`` per prompt from the engine, sampled as TRL's config says; each
            completion keeps the stop token that ended it, as TRL's own generation does (and, with the
            importance-sampling correction on, each generation carries its tokens' sampling log-probs).
            ``records``: each prompt's record, in order (a round of image prompts: the engine encodes each with its
            images, as served); else each is found by its ids."""
            from swiftcore_infer import Request, SamplingParams

            args = self.args
            sampling = SamplingParams(
                max_new_tokens=int(self.max_completion_length),
                temperature=float(args.temperature),
                top_p=float(args.top_p if args.top_p is not None else 1.0),
                top_k=int(args.top_k or 0),
                repetition_penalty=float(args.repetition_penalty or 1.0),
            )
            adapter = self.weight_sync.adapter if self.rollout_engine.adapters else None
            requests = []
            for i, ids in enumerate(prompt_ids):
                record = records[i] if records is not None else self.prompt_records.get(tuple(int(t) for t in ids))
                if record is not None:
                    requests.append(Request(record=record, sampling=sampling, adapter=adapter))
                else:  # a prompt the recipe did not encode (tests): its ids as they are
                    requests.append(Request(prompt=[int(t) for t in ids], sampling=sampling, adapter=adapter))
            if self.importance_sampling:
                out = self.rollout_engine.generate_rollouts(requests, logprobs=True)
            else:
                out = self.rollout_engine.generate_rollouts(requests)
            for request, ids in zip(requests, prompt_ids, strict=True):
                if list(request.encoded) != [int(t) for t in ids]:
                    raise SwiftcoreError(
                        "--rollout-engine: the engine encodes a prompt differently from the trainer (its template or "
                        "the checkpoint's chat defaults differ); pass the same --template and thinking mode"
                    )
            return out

        # ------------------------------------------------------------------ async rollouts

        def get_batch_samples(self, epoch_iterator: Any, num_batches: int, device: Any) -> Any:
            if self.async_rollouts:  # the epoch's batches, readable ahead of the loop (a new epoch: a new wrapper)
                if self._lookahead is None or self._lookahead.source is not epoch_iterator:
                    self._lookahead, self._item_index = Lookahead(epoch_iterator), -1
                epoch_iterator = self._lookahead
            return super().get_batch_samples(epoch_iterator, num_batches, device)

        def _prepare_inputs(self, generation_batch: Any) -> Any:
            if self.async_rollouts and self.model.training and self._lookahead is not None:
                self._item_index += 1  # the loop hands TRL one batch per call, in the order it read them
            return super()._prepare_inputs(generation_batch)

        def _prefetch_rounds(self) -> None:
            """Start the next generation rounds on the worker (this round was just taken): first sync the engine to
            this step if the worker is idle, then start round after round, in order, while it is at most
            ``max_staleness`` rounds ahead and would be trained at most ``max_staleness`` steps after the weights the
            engine holds (a staler round waits for a later step, when the engine can be synced). Nothing starts past
            the epoch's last round."""
            if self._lookahead is None:
                return
            if self._prefetch is None:
                self._prefetch = RolloutPrefetch(self.max_staleness)
            prefetch = self._prefetch
            if prefetch.idle:
                self.sync_rollout_engine()
            weights = self._synced_step  # the step of the engine's weights, which every round started now samples
            if weights is None:
                return
            generate_every = self.args.steps_per_generation * self.num_iterations
            accumulation = max(1, int(self.args.gradient_accumulation_steps))
            now = self._item_index
            item = now if prefetch.last_item is None else prefetch.last_item
            while prefetch.pending < self.max_staleness:
                item += generate_every
                if item > now + self.max_staleness * generate_every:
                    return
                # the optimiser step the round will be trained at: the loop takes ``accumulation`` batches a step
                train_step = self.state.global_step + item // accumulation - now // accumulation
                if not prefetch.allows(train_step, weights):
                    return  # it waits for a sync (the worker is busy with rounds on older weights)
                rows = self._lookahead.peek(item)
                if not rows or not all(isinstance(r, dict) and r.get("prompt") in self.prompt_ids for r in rows):
                    return
                prompt_ids = [list(self.prompt_ids[r["prompt"]]) for r in rows]
                prefetch.submit(lambda p=prompt_ids, r=rows: self._generate_ahead(p, r), prompt_ids, weights, item=item)

        def _generate_ahead(self, prompt_ids: list[list[int]], rows: list[dict]) -> list[tuple[Any, list[int]]]:
            """On the worker: the round's rollouts, then its rewards (scored now and kept for TRL's call, so they
            overlap training too)."""
            rollouts = self.engine_rollouts(prompt_ids)
            prompts = [r["prompt"] for r in rows]
            columns = {k: [r[k] for r in rows] for k in rows[0] if k not in ("prompt", "completion", "completion_ids")}
            for func in getattr(self, "reward_funcs", ()):
                if hasattr(func, "score_ahead"):
                    func.score_ahead(prompts, [ids for _, ids in rollouts], **columns)
            return rollouts

        def train(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().train(*args, **kwargs)
            finally:
                if self._prefetch is not None:
                    self._prefetch.close()
                self._lookahead = None

    return EngineRollouts


@cache
def _step_timing() -> type:
    """The mixin that logs where a generation round's time goes (see :class:`StepTiming`)."""
    import time

    class StepTiming:
        """Per generation round, in ``logs.jsonl``: ``rollout_s`` (generating the completions, by TRL's generate, a
        rollout engine or an environment's episodes, the weight sync before it left out: that is ``sync_s``),
        ``rollout_tokens`` (completion tokens generated) and ``reward_s`` (every reward function of the round).
        With TRL's ``step_time`` (the whole optimiser step) they split a step into rollout, reward, sync and the
        rest (log-probs, loss, backward, optimiser), which ``bench/rl_steps.py`` reports.

        Why here rather than TRL's ``profiling_context``: that one reports to wandb/mlflow/trackio only, never to the
        trainer's own logs.
        """

        def _generate(self, prompts: list) -> Any:
            sync = getattr(self, "weight_sync", None)
            synced = len(sync.history) if sync is not None else 0
            start = time.perf_counter()
            out = super()._generate(prompts)
            seconds = time.perf_counter() - start
            if sync is not None:
                seconds -= sum(stats.seconds for stats in sync.history[synced:])
            mode = "train" if self.model.training else "eval"
            self._metrics[mode]["rollout_s"].append(seconds)
            self._metrics[mode]["rollout_tokens"].append(float(sum(len(ids) for ids in out[1])))
            return out

        def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
            start = time.perf_counter()
            rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            mode = "train" if self.model.training else "eval"
            self._metrics[mode]["reward_s"].append(time.perf_counter() - start)
            return rewards

    return StepTiming


@cache
def _environment_episodes() -> type:
    """The mixin that lets a multi-turn rollout (``--environment``, TRL's ``rollout_func``) see the batch's rows."""

    class EnvironmentEpisodes:
        """A TRL GRPO trainer whose ``rollout_func`` (:class:`~swiftcore_recipe_rl.episodes.EpisodeRollout`)
        gets each prompt's dataset row: TRL hands a rollout function the prompts alone, an environment's ``reset``
        needs the row's columns (the calculator's ``answer``). ``episode_inputs`` holds them while a batch is
        generated."""

        episode_inputs: list[dict[str, Any]] | None = None

        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            self.episode_inputs = [dict(x) for x in inputs]
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                self.episode_inputs = None

    return EnvironmentEpisodes


@cache
def _loss_variants() -> type:
    """The mixin that adds the GRPO loss variants TRL lacks (:mod:`swiftcore_recipe_rl.losses`) around its loss."""
    import torch
    from swiftcore_train import label_logps

    from swiftcore_recipe_rl.chord import mu_schedule, sft_loss
    from swiftcore_recipe_rl.dynamic_sampling import pick_groups, resample_indices, select_rollouts
    from swiftcore_recipe_rl.losses import fipo_weights, informative_groups

    class LossVariants:
        """A TRL GRPO trainer with FIPO's weighted advantages, DAPO's dynamic sampling (filter form) and CHORD's
        SFT term.

        Set by the recipe: ``fipo`` (:func:`~swiftcore_recipe_rl.losses.fipo_weights`' keyword arguments; None: not
        FIPO), ``dynamic_sampling``, and ``chord`` (:class:`~swiftcore_recipe_rl.chord.ExpertBatches`) with
        ``chord_schedule`` (:func:`~swiftcore_recipe_rl.chord.mu_schedule`'s keyword arguments) and ``chord_phi``
        (None: not CHORD).

        Why FIPO hooks ``_get_per_token_logps_and_entropies``: its weights need the current policy's log-probs, which
        TRL's ``_compute_loss`` computes and then, a few lines on, combines with ``inputs["advantages"]``. Hooking the
        log-prob call of the loss (and handing TRL a copy of the batch whose advantages it replaces) leaves the loss
        itself, clipping, normalisation and metrics TRL's, with ``(B, T)`` advantages, a shape TRL supports.
        """

        fipo: dict[str, Any] | None = None
        dynamic_sampling: bool = False
        dapo_max_resample: int = 0
        _refilling = False
        chord: Any = None
        chord_schedule: dict[str, Any] | None = None
        chord_phi: bool = False
        _loss_batch: dict[str, Any] | None = None
        _group_rewards: Any = None

        def _compute_loss(self, model: Any, inputs: Any) -> Any:
            loss = self._variant_loss(model, inputs)
            if self.chord is None or not self.model.training:
                return loss
            return self._chord_loss(model, loss)

        def _variant_loss(self, model: Any, inputs: Any) -> Any:
            """TRL's loss of the batch (with FIPO, on a copy of it whose advantages get weighted)."""
            if self.fipo is None:
                return super()._compute_loss(model, inputs)
            self._loss_batch = dict(inputs)  # a copy: the generation batch's advantages stay unweighted
            try:
                return super()._compute_loss(model, self._loss_batch)
            finally:
                self._loss_batch = None

        def _chord_loss(self, model: Any, grpo_loss: Any) -> Any:
            """CHORD: ``(1 - mu) * grpo_loss + mu * L_SFT`` on the next expert batch, ``mu`` of this optimiser
            step; logs ``chord/mu`` and ``chord/sft_loss``.

            TRL's loss of a micro-batch is already divided by the gradient-accumulation steps (the step's loss is
            the sum of its micro-batches'), so the SFT term is too: the step's SFT term is then the mean of its
            micro-batches' token means, as in ms-swift, where each micro-batch adds one expert batch.
            """
            mu = mu_schedule(self.state.global_step, **self.chord_schedule)
            self._metrics["train"]["chord/mu"].append(mu)
            if mu <= 0:  # no expert forward pass while the term weighs nothing
                return grpo_loss
            batch = self.chord.next_batch(grpo_loss.device)
            labels = batch.pop("labels")
            # the chunked lm_head where it applies (the full expert logits never exist)
            scored = label_logps(model, labels, getattr(self, "loss_chunk_size", 0), **batch)
            sft = sft_loss(*scored, phi=self.chord_phi)
            self._metrics["train"]["chord/sft_loss"].append(self.accelerator.gather(sft.detach()).mean().item())
            accumulation = self.current_gradient_accumulation_steps
            return (1.0 - mu) * grpo_loss + mu * sft.to(grpo_loss.dtype) / accumulation

        def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
            out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
            batch = self._loss_batch
            if batch is not None:  # the loss's own call: weight its advantages (FIPO)
                logps, old = out[0].detach(), batch.get("old_per_token_logps")
                log_ratio = torch.zeros_like(logps) if old is None else logps - old  # None: on-policy, ratio 1
                mask = batch["completion_mask"]
                mask = mask * batch["tool_mask"] if "tool_mask" in batch else mask
                advantages = batch["advantages"]
                weights = fipo_weights(log_ratio, mask, advantages, filter_ratio=self.args.delta, **self.fipo)
                batch["advantages"] = (advantages.unsqueeze(1) if advantages.dim() == 1 else advantages) * weights
                mode = "train" if self.model.training else "eval"
                mean = (weights.sum() / mask.sum().clamp(min=1)).detach()
                self._metrics[mode]["fipo/weight_mean"].append(self.accelerator.gather(mean).mean().item())
            return out

        def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
            self._group_rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            return self._group_rewards

        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            out = super()._generate_and_score_completions(inputs)
            if not self.dynamic_sampling or self._refilling:
                return out
            mode = "train" if self.model.training else "eval"
            size = self.num_generations if mode == "train" else self.num_generations_eval
            keep = self._informative(size)
            self._metrics[mode]["dynamic_sampling/kept"].append(keep.float().mean().item())
            if mode == "train" and self.dapo_max_resample:
                out, keep = self._refill(inputs, out, keep, size)
            n, rank = len(inputs), self.accelerator.process_index
            keep = keep[rank * n : (rank + 1) * n].to(out["completion_mask"].dtype).unsqueeze(1)
            out["completion_mask"] = out["completion_mask"] * keep
            mask = out["completion_mask"] * out["tool_mask"] if "tool_mask" in out else out["completion_mask"]
            # the dapo/cispo normaliser counts the kept groups' tokens only (DAPO: the batch is the informative groups)
            out["num_items_in_batch"] = self.accelerator.gather(mask.sum()).sum()
            return out

        def _informative(self, size: int) -> Any:
            """The last scored round's :func:`~swiftcore_recipe_rl.losses.informative_groups` (every process's
            rows: groups are whole here)."""
            per_func = self._group_rewards
            rewards = (per_func * self.reward_weights.to(per_func.device).unsqueeze(0)).nansum(dim=1)
            rewards[torch.isnan(per_func).all(dim=1)] = torch.nan
            return informative_groups(rewards, size)

        def _refill(self, inputs: list[dict], out: dict[str, Any], keep: Any, size: int) -> tuple[dict, Any]:
            """DAPO's refill (:mod:`swiftcore_recipe_rl.dynamic_sampling`): up to ``dapo_max_resample`` more rounds
            of ``len(inputs) // size`` prompts drawn from the dataset, each generated and scored by this trainer's
            whole pipeline, until the batch has as many informative groups as it has groups; returns the batch and
            its new ``keep``. Logs ``dynamic_sampling/resample_rounds`` and ``dynamic_sampling/refilled`` (the share
            of the batch's groups that carry a signal); a warning when the cap is reached short of a full batch."""
            groups = len(inputs) // size
            parts, keeps = [out], [keep.view(-1, size)[:, 0].tolist()]
            found, rounds = sum(keeps[0]), 0
            while found < groups and rounds < self.dapo_max_resample:
                rounds += 1
                indices = resample_indices(
                    len(self.train_dataset), groups, seed=self.args.seed, step=self.state.global_step, round_=rounds
                )
                rows = [dict(self.train_dataset[i]) for i in indices for _ in range(size)]
                self._refilling = True
                try:
                    parts.append(self._generate_and_score_completions(rows))
                finally:
                    self._refilling = False
                keeps.append(self._informative(size).view(-1, size)[:, 0].tolist())
                found += sum(keeps[-1])
            picks = pick_groups(keeps, groups)
            rows_picked = [(r, g * size + j) for r, g, _ in picks for j in range(size)]
            pad_id = getattr(self.processing_class, "pad_token_id", None)
            merged = select_rollouts(parts, rows_picked, 0 if pad_id is None else int(pad_id))
            filled = sum(k for _, _, k in picks)
            self._metrics["train"]["dynamic_sampling/resample_rounds"].append(float(rounds))
            self._metrics["train"]["dynamic_sampling/refilled"].append(filled / groups)
            if filled < groups:
                log.warning(
                    "--dapo-max-resample %d reached: %d of %d groups carry a reward signal after %d extra generation "
                    "round(s); the other %d stay in the batch masked out of the loss (raise --dapo-max-resample, or "
                    "check that the reward can tell this task's completions apart)",
                    self.dapo_max_resample, filled, groups, rounds, groups - filled,
                )  # fmt: skip
            new_keep = torch.tensor([k for _, _, k in picks], device=keep.device).repeat_interleave(size)
            return merged, new_keep

    return LossVariants


@cache
def grpo_trainer_class() -> type:
    """The ``grpo`` trainer: :class:`swiftcore_train.trainer.SwiftTrainer` (atomic checkpoints, resume checks) over
    :class:`trl.GRPOTrainer` (rollouts, rewards, advantages, the clipped loss of every loss type), with FIPO and
    dynamic sampling (:func:`_loss_variants`)."""
    from swiftcore_train import SwiftTrainer
    from trl import GRPOTrainer

    class SwiftGRPOTrainer(
        SwiftTrainer, _image_prompts(), _template_prompts(), _step_timing(), _engine_rollouts(),
        _environment_episodes(), _loss_variants(), GRPOTrainer,
    ):  # fmt: skip
        """GRPOTrainer on template-encoded prompts (with their images' pixels), with swiftcore's checkpoints (and
        optionally a rollout engine, multi-turn episodes and the loss variants TRL lacks)."""

    return SwiftGRPOTrainer


@cache
def rloo_trainer_class() -> type:
    """The ``rloo`` trainer: ``SwiftTrainer`` over :class:`trl.RLOOTrainer` (leave-one-out baseline, sequence-level
    clipped ratio, the KL penalty in the reward), on template-encoded prompts. TRL 1.16's RLOOTrainer tokenizes,
    generates and scores as its GRPOTrainer does (the same ``_tokenize_prompts`` / ``multimodal_fields`` / batch keys),
    so :func:`_image_prompts` serves both."""
    from swiftcore_train import SwiftTrainer
    from trl import RLOOTrainer

    class SwiftRLOOTrainer(
        SwiftTrainer, _image_prompts(), _template_prompts(), _step_timing(), _engine_rollouts(), RLOOTrainer
    ):
        """RLOOTrainer on template-encoded prompts (with their images' pixels), with swiftcore's checkpoints."""

        _returns_logprobs = False

    return SwiftRLOOTrainer


def reinforce_pp_advantages(
    rewards: Any,
    mask: Any,
    *,
    num_generations: int,
    baseline: bool,
    beta: float = 0.0,
    old_logps: Any = None,
    ref_logps: Any = None,
    reduce: Any = None,
) -> Any:
    """REINFORCE++ token advantages ``(B, T)``, as OpenRLHF computes them (``gamma = 1``).

    1. ``baseline`` (REINFORCE++-baseline): each reward minus its prompt group's mean (rows are grouped by
       ``num_generations``).
    2. The per-token reward: ``-beta * (old_logps - ref_logps)`` on every completion token (the k1 KL estimate),
       plus the scalar reward on the completion's last token.
    3. The return of each token: the sum of the per-token rewards from it to the end.
    4. Normalised over every completion token of the batch: ``(G - mean) / sqrt(max(var, 1e-8))``, population
       variance.

    Args:
        rewards: ``(B,)`` scalar rewards; NaN for a completion no reward could score (its advantages are 0 and it is
            left out of the statistics).
        mask: ``(B, T)`` 1 on completion tokens.
        num_generations: the group size (for ``baseline``).
        baseline: subtract the group mean first.
        beta: KL weight; with it, ``old_logps`` and ``ref_logps`` ``(B, T)``.
        reduce: sums a tensor over processes (``accelerator.reduce(x, "sum")``) so the statistics are global;
            None: this process's batch is the whole batch.
    """
    import torch

    rewards = rewards.to(torch.float32)
    scorable = ~torch.isnan(rewards)
    if baseline:
        grouped = rewards.view(-1, num_generations)
        rewards = (grouped - torch.nanmean(grouped, dim=1, keepdim=True)).view(-1)
    rewards = torch.nan_to_num(rewards, nan=0.0)
    mask = mask.to(torch.float32) * scorable.to(torch.float32)[:, None]
    per_token = torch.zeros_like(mask)
    if beta:
        per_token = -beta * (old_logps - ref_logps) * mask
    lengths = mask.sum(1).long()
    has_tokens = lengths > 0
    last = (mask.size(1) - 1 - mask.flip(1).argmax(1)).clamp(min=0)
    per_token[has_tokens, last[has_tokens]] += rewards[has_tokens]
    returns = per_token.flip(1).cumsum(1).flip(1) * mask
    stats = torch.stack([returns.sum(), (returns**2).sum(), mask.sum()])
    if reduce is not None:
        stats = reduce(stats)
    total, squares, count = stats[0], stats[1], stats[2].clamp(min=1.0)
    mean = total / count
    var = squares / count - mean**2
    return (returns - mean) * var.clamp(min=1e-8).rsqrt() * mask


#: The keys of a rollout batch that may carry its prompts' images (:func:`_image_prompts`, under TRL's names): the
#: ones TRL 1.16's ``_compute_loss`` passes from the batch to ``_get_per_token_logps_and_entropies``.
MEDIA_BATCH_KEYS = (
    "pixel_values", "image_grid_thw", "num_images", "pixel_attention_mask", "spatial_shapes", "num_tiles",
    "image_sizes", "token_type_ids", "mm_token_type_ids", "image_position_ids",
)  # fmt: skip


def policy_logps(trainer: Any, out: dict[str, Any]) -> Any:
    """The current policy's per-token log-probs of a GRPO-style trainer's rollouts ``out`` (no gradient), with the
    pixels of its image prompts when it has any (:data:`MEDIA_BATCH_KEYS`)."""
    import torch

    input_ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
    attention_mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
    media = {key: out[key] for key in MEDIA_BATCH_KEYS if out.get(key) is not None}
    with torch.no_grad():
        logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, input_ids, attention_mask, out["completion_ids"].size(1),
            batch_size=trainer.args.per_device_train_batch_size, **media,
        )  # fmt: skip
    return logps


@cache
def reinforce_pp_trainer_class() -> type:
    """The ``reinforce_pp`` trainer: the ``grpo`` trainer with REINFORCE++ advantages (see the module)."""
    import torch

    class SwiftReinforcePPTrainer(grpo_trainer_class()):
        """GRPOTrainer whose advantages are REINFORCE++'s (:func:`reinforce_pp_advantages`).

        ``args.beta`` is REINFORCE++'s KL weight: TRL builds the reference model from it (none with LoRA: the
        adapter is switched off) and computes the reference log-probs of each rollout while ``beta`` is set. The
        KL then lives in the returns, so the loss runs with ``beta = 0`` (no KL term in the loss). Set
        ``baseline`` after construction for REINFORCE++-baseline (the recipe does).
        """

        baseline: bool = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.kl_coef, self.beta = self.beta, 0.0

        def _calculate_rewards(self, inputs: Any, prompts: Any, completions: Any, completion_ids_list: Any) -> Any:
            self._rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            return self._rewards_per_func

        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            self.beta = self.kl_coef  # TRL computes the reference log-probs only while beta != 0
            try:
                out = super()._generate_and_score_completions(inputs)
            finally:
                self.beta = 0.0
            mode = "train" if self.model.training else "eval"
            per_func = self._rewards_per_func  # gathered over processes
            unscorable = torch.isnan(per_func).all(dim=1)
            rewards = (per_func * self.reward_weights.to(per_func.device).unsqueeze(0)).nansum(dim=1)
            rewards[unscorable] = torch.nan
            if self.baseline:  # the group mean needs whole groups: take it over every process's rows, then slice
                grouped = rewards.view(-1, self.num_generations if mode == "train" else self.num_generations_eval)
                rewards = (grouped - torch.nanmean(grouped, dim=1, keepdim=True)).view(-1)
            n = len(inputs)
            rewards = rewards[self.accelerator.process_index * n : (self.accelerator.process_index + 1) * n]
            mask = out["completion_mask"] if "tool_mask" not in out else out["completion_mask"] * out["tool_mask"]
            old = ref = None
            if self.kl_coef:
                ref = out.pop("ref_per_token_logps")
                old = out.get("old_per_token_logps")
                if old is None:  # on-policy: TRL skips the old log-probs; the KL needs them
                    old = self._rollout_logps(out)
                kl = ((old - ref) * mask).sum() / mask.sum().clamp(min=1.0)
                self._metrics[mode]["kl"].append(self.accelerator.gather(kl).mean().item())
            out["advantages"] = reinforce_pp_advantages(
                rewards,
                mask,
                num_generations=1,
                baseline=False,  # done above, over whole groups
                beta=self.kl_coef,
                old_logps=old,
                ref_logps=ref,
                reduce=lambda x: self.accelerator.reduce(x, reduction="sum"),
            )
            return out

        def _rollout_logps(self, out: dict[str, Any]) -> Any:
            return policy_logps(self, out)

    return SwiftReinforcePPTrainer


@cache
def gkd_trainer_class() -> type:
    """The ``gkd`` trainer: ``SwiftTrainer`` over :class:`trl.DistillationTrainer` (on-policy completions of the
    student, generalised JSD to the teacher's next-token distributions), on template-encoded prompts."""
    from swiftcore_train import SwiftTrainer
    from trl import DistillationTrainer

    class SwiftGKDTrainer(SwiftTrainer, _image_prompts(), _template_prompts(), _engine_rollouts(), DistillationTrainer):
        """DistillationTrainer on template-encoded prompts (with their images' pixels), with swiftcore's checkpoints
        (and optionally the student's completions from a rollout engine or server, synced to the student before each
        generation round).

        Why :func:`_image_prompts` serves it as it serves GRPO: TRL 1.16's DistillationTrainer generates through the
        same ``_tokenize_prompts`` -> ``_generate_single_turn(prompt_ids, images, multimodal_fields)`` calls, and its
        ``_compute_loss`` passes the batch's ``pixel_values`` / ``image_grid_thw`` / ``mm_token_type_ids`` (TRL's
        names, which the mixin adds to each round) to the student's forward and to the teacher's alike; its
        ``_prepare_inputs`` splits them by sample with ``num_images``. So the student generates seeing each row's
        pixels and both distributions of the divergence are conditioned on them; the teacher takes the student's
        processor's pixels as they are (the plan's ``check_teacher_pixels``)."""

        _returns_logprobs = False  # DistillationTrainer's _generate_single_turn returns the ids alone

    return SwiftGKDTrainer


@cache
def opd_trainer_class() -> type:
    """The ``opd`` trainer: the ``grpo`` trainer whose advantages are on-policy distillation's KL advantages
    (:func:`~swiftcore_recipe_rl.losses.kl_advantages`)."""
    import torch
    from swiftcore_train import label_logps

    from swiftcore_recipe_rl.losses import kl_advantages

    class SwiftOPDTrainer(grpo_trainer_class()):
        """GRPOTrainer whose per-token advantages are ``log p_teacher(y_t) - log p_student(y_t)`` (plus
        ``reward_weight`` times GRPO's reward advantage).

        Why a subclass of the ``grpo`` trainer and nothing more: the method differs from GRPO only in its advantages.
        The student's rollouts (TRL's, or a swiftcore engine's), the rewards, the loss of ``--grpo-loss-type`` (TRL's
        ``_compute_loss`` takes ``(B, T)`` advantages, as FIPO and REINFORCE++ use it), the importance-sampling
        correction, logging and checkpoints stay the ``grpo`` trainer's. Set after construction (the recipe does):
        ``teacher`` (the teacher model, frozen, on the trainer's device) and ``reward_weight``.
        Logged: ``opd/reverse_kl`` (the mean over completion tokens of ``log p_student - log p_teacher``) and
        ``opd/teacher_logp`` (the mean teacher log-prob of a sampled token).
        """

        teacher: Any = None
        reward_weight: float = 0.0

        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            out = super()._generate_and_score_completions(inputs)
            return self.distillation_advantages(out)

        def distillation_advantages(self, out: dict[str, Any]) -> dict[str, Any]:
            """``out`` (a generation batch) with its ``advantages`` replaced by the ``(B, T)`` KL advantages."""
            mask = out["completion_mask"] * out["tool_mask"] if "tool_mask" in out else out["completion_mask"]
            student = out.get("old_per_token_logps")
            if student is None:  # on-policy: TRL skips the old log-probs; the advantages need them
                student = policy_logps(self, out)
            teacher = self.teacher_logps(out)
            tokens = mask.sum().clamp(min=1)
            mode = "train" if self.model.training else "eval"
            reverse_kl = ((student - teacher) * mask).sum() / tokens
            self._metrics[mode]["opd/reverse_kl"].append(self.accelerator.gather(reverse_kl).mean().item())
            teacher_logp = (teacher * mask).sum() / tokens
            self._metrics[mode]["opd/teacher_logp"].append(self.accelerator.gather(teacher_logp).mean().item())
            out["advantages"] = kl_advantages(
                teacher, student, mask, out["advantages"], reward_weight=self.reward_weight
            )
            return out

        def teacher_logps(self, out: dict[str, Any]) -> Any:
            """The teacher's per-token log-probs ``(B, T)`` of the completions, at the rollout temperature (as TRL
            computes the student's), in float32."""
            return self.completion_logps(self.teacher, out["prompt_ids"], out["prompt_mask"], out)

        def completion_logps(
            self,
            model: Any,
            prompt_ids: Any,
            prompt_mask: Any,
            out: dict[str, Any],
            media: dict[str, Any] | None = None,
        ) -> Any:
            """``model``'s per-token log-probs ``(B, T)`` of ``out``'s completions after ``prompt_ids`` (left-padded,
            ``prompt_mask``), at the rollout temperature, in float32, without gradient; with the round's pixels
            (``media``: the model's media inputs for these prompts; None: ``out``'s own, for ``out``'s prompts)."""
            input_ids = torch.cat([prompt_ids, out["completion_ids"]], dim=1)
            attention_mask = torch.cat([prompt_mask, out["completion_mask"]], dim=1)
            keep = out["completion_ids"].size(1)
            size = self.args.per_device_train_batch_size
            # A round of image prompts: the model's inputs of its pixels too (num_images is TRL's slicing count, not
            # an input), the whole round in one forward: its pixel rows belong to images of varying row counts, and
            # splitting them by sample is TRL's per-family code (_get_per_token_logps_and_entropies), not needed here.
            if media is None:
                media = {k: out[k] for k in MEDIA_BATCH_KEYS if k != "num_images" and out.get(k) is not None}
            if media:
                size = input_ids.size(0)
            chunks = []
            with torch.no_grad():
                for start in range(0, input_ids.size(0), size):
                    ids, mask = input_ids[start : start + size], attention_mask[start : start + size]
                    labels = torch.full_like(ids, -100)
                    labels[:, -keep:] = ids[:, -keep:]
                    # the chunked lm_head where it applies (the full logits never exist)
                    logps, _ = label_logps(
                        model, labels, getattr(self, "loss_chunk_size", 0), temperature=self.temperature,
                        input_ids=ids, attention_mask=mask, **media,
                    )  # fmt: skip
                    chunks.append(logps[:, -keep:])
            return torch.cat(chunks)

    return SwiftOPDTrainer


@cache
def opsd_trainer_class() -> type:
    """The ``opsd`` trainer: the ``opd`` trainer whose teacher is the policy itself, scoring each completion after
    the row's privileged prompt (:mod:`swiftcore_recipe_rl.opsd`)."""
    from contextlib import nullcontext

    import torch

    from swiftcore_recipe_rl.opsd import teacher_key

    class SwiftOPSDTrainer(opd_trainer_class()):
        """The ``opd`` trainer with ``teacher_logps`` computed by the policy on the teacher's prompts: the advantages,
        the loss and the logged ``opd/*`` metrics are ``opd``'s (one definition: ``distillation_advantages``).

        Set after construction (the recipe does): ``teacher_prompt_ids`` (:func:`~swiftcore_recipe_rl.opsd.
        teacher_prompt_ids`), ``context_column``, ``teacher_mode`` (``current`` or ``initial``) and, for
        ``initial`` with full fine-tuning, ``teacher`` (a frozen copy of the starting weights).

        Prompts with images: the teacher's prompt keeps the row's images, so its forward takes the round's pixel
        tensors (TRL's batch keys, which :func:`_image_prompts` adds) with the teacher's own prompt ids and
        ``mm_token_type_ids`` (:meth:`teacher_media`); a teacher blind to the image would score the student's tokens
        against another question.
        """

        teacher_prompt_ids: dict[tuple[str, str, int], dict[str, Any]] = {}
        context_column = "answer"
        teacher_mode = "current"
        _teacher_rows: list[dict[str, Any]] | None = None

        def _generate_and_score_completions(self, inputs: Any) -> dict[str, Any]:
            saved = self._teacher_rows  # a round inside another (a refill) keeps the outer round's prompts
            self._teacher_rows = [self.teacher_prompt_ids[teacher_key(x, self.context_column)] for x in inputs]
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                self._teacher_rows = saved

        def teacher_logps(self, out: dict[str, Any]) -> Any:
            """The policy's log-probs of the completions after the teacher's (privileged) prompts: its current
            weights, or with ``initial`` its starting ones (adapter off, or the frozen copy); in a round of image
            prompts with the round's pixels (:meth:`teacher_media`)."""
            rows = [r["ids"] for r in self._teacher_rows or ()]
            width = max(len(r) for r in rows)
            pad = getattr(self.processing_class, "pad_token_id", None) or 0
            device = out["completion_ids"].device
            prompt_ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
            prompt_mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=device)
            media = self.teacher_media(out, width)
            model, context = self.model, nullcontext()
            if self.teacher_mode == "initial":
                if self.teacher is not None:
                    model = self.teacher
                else:  # LoRA: the starting policy is the base model
                    context = self.accelerator.unwrap_model(self.model).disable_adapter()
            with context:
                return self.completion_logps(model, prompt_ids, prompt_mask.to(out["prompt_mask"].dtype), out, media)

        def teacher_media(self, out: dict[str, Any], width: int) -> dict[str, Any]:
            """The teacher forward's media inputs of the round ``out``, whose teacher prompts are left-padded to
            ``width``: the round's pixel tensors as they are (each teacher prompt keeps its row's images, in the same
            order: :func:`~swiftcore_recipe_rl.opsd.privileged_record`), and ``mm_token_type_ids`` over the teacher's
            own prompt tokens (its placeholders sit elsewhere than in the student's prompt); empty for a text round."""
            media = {
                k: out[k]
                for k in MEDIA_BATCH_KEYS
                if k not in ("num_images", "mm_token_type_ids") and out.get(k) is not None
            }
            if out.get("mm_token_type_ids") is not None:
                keep = out["completion_ids"].size(1)
                types = []
                for row in self._teacher_rows or ():
                    own = list(row["types"] or [0] * len(row["ids"]))  # a text row of an image run: all 0
                    types.append([0] * (width - len(own)) + own + [0] * keep)
                media["mm_token_type_ids"] = torch.tensor(types, dtype=torch.long, device=out["completion_ids"].device)
            return media

    return SwiftOPSDTrainer


def configure_loss_variants(
    trainer: Any, options: Any, *, chord_samples: list[dict[str, list[int]]] | None = None, seed: int = 0
) -> None:
    """Set the ``grpo`` trainer's own loss variants from its options: FIPO's settings with ``--grpo-loss-type
    fipo``, ``--dynamic-sampling``, and with ``--chord-dataset`` CHORD on ``chord_samples`` (the expert rows the
    plan encoded), shuffled by ``seed``; and the async rollout schedule (:func:`configure_async_rollouts`)."""
    if getattr(options, "chord_dataset", ""):
        from swiftcore_recipe_rl.chord import ExpertBatches

        pad_id = getattr(trainer.processing_class, "pad_token_id", None)  # a processor without one: pad with 0
        trainer.chord = ExpertBatches(
            chord_samples or [], options.chord_batch_size, 0 if pad_id is None else pad_id, seed=seed,
            rank=trainer.accelerator.process_index, world=trainer.accelerator.num_processes,
        )  # fmt: skip
        trainer.chord_schedule = dict(
            warmup_steps=options.chord_mu_warmup_steps,
            decay_steps=options.chord_mu_decay_steps,
            peak=options.chord_mu_peak,
            valley=options.chord_mu_valley,
        )
        trainer.chord_phi = options.chord_phi
    if getattr(options, "grpo_loss_type", None) == "fipo":
        trainer.fipo = dict(
            decay_rate=options.fipo_decay_rate,
            clip_range=options.fipo_clip_range,
            clip_high_only=options.fipo_clip_high_only,
            safety_threshold=options.fipo_safety_threshold,
        )
    configure_async_rollouts(trainer, options)
    trainer.dynamic_sampling = bool(getattr(options, "dynamic_sampling", False))
    trainer.dapo_max_resample = int(getattr(options, "dapo_max_resample", 0))
    if trainer.dapo_max_resample and trainer.accelerator.num_processes > 1:
        from swiftcore.api import SwiftcoreError

        raise SwiftcoreError(
            f"--dapo-max-resample with {trainer.accelerator.num_processes} processes: the refill runs on one process "
            "only so far; train on one process, or use --dapo-max-resample 0 (the filter form)"
        )


def configure_async_rollouts(trainer: Any, options: Any) -> None:
    """Set ``--async-rollouts`` and ``--max-staleness K`` on a trainer with engine rollouts: ``async_rollouts`` and
    ``max_staleness`` (``K``; 1 when not given, and the run is synchronous when async rollouts are off)."""
    trainer.async_rollouts = bool(getattr(options, "async_rollouts", False))
    staleness = getattr(options, "max_staleness", None)
    trainer.max_staleness = 1 if staleness is None or not trainer.async_rollouts else int(staleness)


def chunk_lm_heads(trainer: Any, chunk_size: int | None) -> None:
    """``--loss-chunk-size`` for a TRL GRPO or RLOO trainer (every rollout recipe: grpo, rloo, reinforce_pp, opd,
    opsd): the per-token log-probs (and entropies) of the policy, the old policy and the reference come from
    swiftcore-train's chunked lm_head (``chunk_size`` tokens' logits at a time, the SFT loss's chunking, at the
    trainer's temperature) in place of TRL's fused head; the same loss and gradients (``tests/test_chunked_logps.py``).
    CHORD's expert batch and an ``opd`` teacher's scores use the same chunk size (``trainer.loss_chunk_size``). None:
    the default chunk size; 0, ``--fp32-lm-head``, ``--fsdp`` or ``--deepspeed``
    (:func:`~swiftcore_train.trainer_head_reason`): TRL's head (and full logits). A MoE model's load-balancing loss,
    which TRL adds, comes from the chunked head too."""
    from swiftcore_train import DEFAULT_LOSS_CHUNK_SIZE, trainer_head_reason, use_chunked_lm_head

    size = DEFAULT_LOSS_CHUNK_SIZE if chunk_size is None else chunk_size
    reason = trainer_head_reason(trainer)
    temperature = trainer.temperature
    policy = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
    # grpo_trainer.py and rloo_trainer.py add the policy's head with the entropy (a metric; GRPO's high-entropy mask)
    use_chunked_lm_head(policy, size, temperature=temperature, outputs=("log_probs", "entropy"), reason=reason)
    if getattr(trainer, "ref_model", None) is not None:
        use_chunked_lm_head(trainer.ref_model, size, temperature=temperature, reason=reason)
    # CHORD's expert batch and a distillation teacher's scores (forwards without a TRL head) chunk as the policy does
    trainer.loss_chunk_size = 0 if reason else size


def trainer_class(recipe: str) -> type:
    """The trainer class of ``recipe`` (``grpo``, ``rloo``, ``reinforce_pp``, ``gkd``, ``opd`` or ``opsd``)."""
    classes = {
        "grpo": grpo_trainer_class,
        "rloo": rloo_trainer_class,
        "reinforce_pp": reinforce_pp_trainer_class,
        "gkd": gkd_trainer_class,
        "opd": opd_trainer_class,
        "opsd": opsd_trainer_class,
    }
    return classes[recipe]()
