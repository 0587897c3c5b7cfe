"""The episode loop that runs any environment inside a rollout (``--environment NAME``; TRL's ``rollout_func``).

The loop (:class:`EpisodeRollout`) generates, parses the reply with the family's template
(:meth:`Template.parse_response`), steps the environment, appends the tool messages as the template renders them
after that reply, and generates again, until the environment says done, the model replies without a tool call,
``--max-turns`` replies were generated, or the ``--max-completion-length`` budget (all turns and tool results
together) is spent. The model's own tokens are kept verbatim (never re-tokenized); the tool-result tokens between
them are context, masked out of the loss (TRL's ``env_mask`` -> ``tool_mask``). The rewards see the last reply as the
completion and, by keyword, the episode (:data:`~swiftcore_recipe_rl.environment_reward.EPISODE_KEYWORDS`).

An environment is an :class:`~swiftcore.api.EnvironmentSpec` some plugin registers
(``swiftcore_register_environments``); its factory makes one environment per episode (its options bound:
:func:`~swiftcore_recipe_rl.environment_options.environment_factory`), a gym env over chat messages
(:class:`~swiftcore.api.protocols.EnvironmentProtocol`; the built-in one is
:class:`~swiftcore_recipe_rl.calculator.Calculator`).

Importing this module imports neither torch nor TRL.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from swiftcore_recipe_rl.environment_reward import EPISODE_KEYWORDS

__all__ = ["EpisodeRollout", "tool_suffix_ids"]

log = logging.getLogger("swiftcore.rl")


def tool_suffix_ids(
    template: Any, tokenizer: Any, record: Mapping[str, Any], messages: list, tool_messages: list
) -> list[int]:
    """The ids the family's template puts after a reply (ending at its stop word) when ``tool_messages`` follow it:
    the tool turn(s) and the next generation prompt, e.g. Qwen3.5's ``\\n<|im_start|>user\\n<tool_response>\\n...
    </tool_response><|im_end|>\\n<|im_start|>assistant\\n<think>\\n``.

    ``messages`` is the conversation up to and including that reply. The suffix is the text the template renders
    with the tool messages and a generation prompt, past the reply's stop word in its rendering without them.

    Raises:
        SwiftcoreError: the template renders the earlier turns differently once tool messages follow (its prefix
            is not kept), so no suffix can be appended to the model's own tokens.
    """
    from swiftcore.api import SwiftcoreError

    before = template.render({**record, "messages": messages}, add_generation_prompt=False)
    after = template.render({**record, "messages": [*messages, *tool_messages]}, add_generation_prompt=True)
    end = max((before.rfind(w) + len(w) for w in template.stop_words if w in before), default=len(before))
    if not after.startswith(before[:end]):
        raise SwiftcoreError(
            f"template {getattr(template, 'name', '?')!r} renders the conversation differently once a tool message "
            "follows a reply; multi-turn rollouts need a template that keeps the earlier turns as they are"
        )
    return [int(t) for t in tokenizer.encode(after[end:], add_special_tokens=False)]


class EpisodeRollout:
    """TRL's ``rollout_func(prompts, trainer)`` for ``--environment``: one episode per prompt (see the module).

    Args:
        factory: makes one environment per episode (the resolved ``EnvironmentSpec.factory``, its options bound:
            :func:`environment_factory`).
        codec: the run's :class:`~swiftcore_recipe_rl.rollout.PromptCodec` (the template and tokenizer).
        rows: prompt text -> the record it was encoded from (its columns come from the batch's rows).
        max_turns: the most replies per episode.
        name: the environment's name, for messages.
    """

    def __init__(
        self, factory: Callable[[], Any], codec: Any, rows: dict[str, dict], *, max_turns: int, name: str = "?"
    ) -> None:
        self.factory = factory
        self.codec = codec
        self.rows = rows
        self.max_turns = max_turns
        self.name = name
        #: The last batch's episodes (tests and logging): one dict per prompt.
        self.episodes: list[dict[str, Any]] = []

    def row(self, prompt: str, columns: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """What ``reset`` gets for ``prompt``: its record and its dataset row's columns."""
        return {**self.rows.get(prompt, {}), **{k: v for k, v in (columns or {}).items() if k != "prompt"}}

    def reset(self, row: Mapping[str, Any]) -> tuple[Any, dict[str, Any]]:
        """A fresh environment and the prompt record its ``reset`` returned (checked)."""
        from swiftcore.api import SwiftcoreError

        env = self.factory()
        record = env.reset(row)
        if not isinstance(record, Mapping) or not isinstance(record.get("messages"), list):
            raise SwiftcoreError(
                f"environment {self.name!r}: reset(row) must return a record with a 'messages' list, "
                f"got {type(record).__name__}"
            )
        return env, dict(record)

    def __call__(self, prompts: list[str], trainer: Any) -> dict[str, Any]:
        """Run one episode per prompt; TRL's rollout output (``prompt_ids``, ``completion_ids``, ``logprobs``,
        ``env_mask``) and the episode keywords (:data:`EPISODE_KEYWORDS`) for the rewards."""
        inputs = getattr(trainer, "episode_inputs", None) or [{}] * len(prompts)
        episodes = []
        for prompt, columns in zip(prompts, inputs, strict=True):
            env, record = self.reset(self.row(prompt, columns))
            _, ids = self.codec.encode(record)
            episodes.append({
                "env": env, "record": record, "prompt_ids": ids, "completion_ids": [], "mask": [], "logprobs": [],
                "messages": list(record["messages"]), "turns": 0, "tool_calls": 0, "env_reward": 0.0,
                "last_ids": [], "done": False,
            })  # fmt: skip
        budget = int(trainer.max_completion_length)
        stops = set(int(t) for t in trainer.eos_token_ids)
        mode = "train" if trainer.model.training else "eval"
        n = trainer.num_generations if mode == "train" else trainer.num_generations_eval
        have_logprobs = True
        active = list(range(len(episodes)))
        while active:
            inputs_ids = [episodes[i]["prompt_ids"] + episodes[i]["completion_ids"] for i in active]
            generated, logprobs = self._generate(trainer, inputs_ids, n, budget, [episodes[i] for i in active])
            n = 1  # later turns: each episode has its own history
            have_logprobs = have_logprobs and logprobs is not None
            for k, i in enumerate(active):
                self._turn(episodes[i], list(generated[k]), logprobs[k] if logprobs is not None else None,
                           budget=budget, stops=stops)  # fmt: skip
            active = [i for i in active if not episodes[i]["done"]]
        self.episodes = episodes
        decoded = [self.codec.decode(e["last_ids"]) for e in episodes]
        return {
            "prompt_ids": [e["prompt_ids"] for e in episodes],
            "completion_ids": [e["completion_ids"] for e in episodes],
            "logprobs": [e["logprobs"] for e in episodes] if have_logprobs else None,
            "env_mask": [e["mask"] for e in episodes],
            "final_completion": decoded,
            **{key: [e[key] for e in episodes] for key in EPISODE_KEYWORDS},
        }

    def _generate(self, trainer: Any, ids: list[list[int]], n: int, budget: int, episodes: list[dict]) -> tuple:
        """One turn for the active episodes, no longer than the budget any of them has left."""
        config = getattr(trainer, "generation_config", None)
        room = max(budget - len(e["completion_ids"]) for e in episodes)
        saved = getattr(config, "max_new_tokens", None)
        if config is not None:
            config.max_new_tokens = max(1, min(room, saved or room))
        try:
            out = trainer._generate_single_turn(ids, None, {}, n)
        finally:
            if config is not None:
                config.max_new_tokens = saved
        return out if isinstance(out, tuple) else (out, None)

    def _turn(self, e: dict, ids: list[int], logprobs: list | None, *, budget: int, stops: set[int]) -> None:
        """Append one reply to episode ``e``; step its environment; append the tool messages or end it."""
        ids = ids[: budget - len(e["completion_ids"])]
        e["completion_ids"] += ids
        e["mask"] += [1] * len(ids)
        e["logprobs"] += list(logprobs[: len(ids)]) if logprobs is not None else [0.0] * len(ids)
        e["last_ids"] = ids
        e["turns"] += 1
        reply = self.codec.template.parse_response(self.codec.decode(ids))
        message = {"role": "assistant", "content": reply.get("content") or "", "tool_calls": reply.get("tool_calls")}
        if reply.get("reasoning_content"):
            message["reasoning_content"] = reply["reasoning_content"]
        e["messages"].append(message)
        if not ids or ids[-1] not in stops:  # cut at the budget: the reply is unfinished, the episode over
            e["done"] = True
            return
        try:
            out = e["env"].step(reply)
            tool_messages = list(out.get("messages") or ())
            e["env_reward"] += float(out.get("reward") or 0.0)
            done = bool(out.get("done")) or not tool_messages
        except Exception as exc:  # environment code may raise anything: the episode ends, the run goes on
            log.error("environment %r raised %s: %s; the episode ends", self.name, type(exc).__name__, exc)
            e["done"] = True
            return
        if done or e["turns"] >= self.max_turns:
            e["done"] = True
            return
        suffix = tool_suffix_ids(self.codec.template, self.codec.tokenizer, e["record"], e["messages"], tool_messages)
        if len(e["completion_ids"]) + len(suffix) >= budget:  # no room left for the tool result and a reply
            e["done"] = True
            return
        e["completion_ids"] += suffix
        e["mask"] += [0] * len(suffix)
        e["logprobs"] += [0.0] * len(suffix)
        e["messages"] += tool_messages
        e["tool_calls"] += len(tool_messages)
