"""``SwiftGRPOTrainer``: TRL's GRPOTrainer with swiftcore's atomic checkpoints and template-encoded prompts.

Built on first use (:func:`grpo_trainer_class`) so that importing this module imports neither torch nor TRL.
"""

from __future__ import annotations

from functools import cache

__all__ = ["grpo_trainer_class"]


@cache
def grpo_trainer_class() -> type:
    """The trainer class: :class:`swiftcore_train.trainer.SwiftTrainer` (atomic checkpoints, resume checks) over
    :class:`trl.GRPOTrainer` (rollouts, rewards, advantages, the clipped loss of every loss type)."""
    from swiftcore_train.trainer import SwiftTrainer
    from trl import GRPOTrainer

    class SwiftGRPOTrainer(SwiftTrainer, GRPOTrainer):
        """GRPOTrainer whose prompts are the ids the family's swiftcore template encodes.

        ``prompt_ids`` maps each dataset row's ``prompt`` text to its template ids (set by the recipe); TRL
        would otherwise tokenize the text again, and a tokenizer that adds a BOS or splits a special token
        differently would train the policy on prompts it is never served.
        """

        prompt_ids: dict[str, list[int]] = {}

        def _tokenize_prompts(self, prompts: list) -> tuple[list[list[int]], None, dict]:
            if all(isinstance(p, str) and p in self.prompt_ids for p in prompts):
                return [list(self.prompt_ids[p]) for p in prompts], None, {}
            return super()._tokenize_prompts(prompts)  # prompts the recipe did not encode (tests, subclasses)

    return SwiftGRPOTrainer
