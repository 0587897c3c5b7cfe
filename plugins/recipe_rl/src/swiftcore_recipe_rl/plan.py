"""Plan an RL run once: every check that can fail fast, and the prompts encoded, before any model loads
(:func:`plan_run`). The result, a :class:`RunPlan`, is plain data that an executor trains: in this process
(:func:`~swiftcore_recipe_rl.execute.execute`) or placed on Ray (:func:`~swiftcore_recipe_rl.ray_actors.run_on_ray`,
whose trainer actor receives the plan and runs the same executor), so nothing is checked or encoded twice.

What the plan step checks, in order: the common options and those the recipe refuses, the model (its spec and
requirements), the rewards and their options (and the ``gkd`` / ``opd`` teacher), every prompt row and the columns the
rewards read, prompts with images (the options that cannot take them), that the recipe trains the model's task, the
template against the tokenizer, the teacher's tokenizer vocabulary against the student's, a ``--rollout-server`` (it
answers and serves this checkpoint and template), the ``--environment`` and its options, every prompt's length, and
the checkpoint ``--resume-from-checkpoint`` names; then ``--chord-dataset``'s expert rows are encoded.

Importing this module imports neither torch nor TRL.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore_recipe_rl.options import GKDOptions, OPDOptions, OPSDOptions, RolloutOptions, SamplingOptions
from swiftcore_recipe_rl.prompts import EncodedPrompts, encode_prompts

if TYPE_CHECKING:
    from swiftcore.api import PluginSet

__all__ = [
    "EnvironmentPlan",
    "LocalParts",
    "RunPlan",
    "check_teacher_vocabulary",
    "connect_server",
    "media_preparer",
    "plan_environment",
    "plan_run",
]

log = logging.getLogger("swiftcore.rl")


@dataclass
class EnvironmentPlan:
    """``--environment NAME``: what the episode loop needs, its options bound and checked.

    Attributes:
        name: the environment's name.
        provider: the plugin that provides it.
        factory: makes one environment per episode (the resolved ``EnvironmentSpec.factory``, its
            ``--environment-option`` values bound:
            :func:`~swiftcore_recipe_rl.environment_options.environment_factory`).
        max_turns: the most replies per episode.
    """

    name: str
    provider: Any
    factory: Callable[[], Any]
    max_turns: int

    def episodes(self, codec: Any, rows: dict[str, dict] | None = None) -> Any:
        """The episode loop (TRL's ``rollout_func``) over this environment, with the run's ``codec`` and ``rows``
        (prompt text -> the row its environment is reset on)."""
        from swiftcore_recipe_rl.episodes import EpisodeRollout

        return EpisodeRollout(self.factory, codec, {} if rows is None else rows, max_turns=self.max_turns,
                              name=self.name)  # fmt: skip


@dataclass
class LocalParts:
    """What the plan step built that belongs to its own process: an executor in that process reuses them, and a plan
    pickled for another process leaves them behind (that executor rebuilds them from the plan), so the plan itself
    stays plain data.

    Attributes:
        codec: the run's :class:`~swiftcore_recipe_rl.rollout.PromptCodec` (the template and the tokenizer).
        rollout_server: the ``--rollout-server`` client, connected and checked; None without the option.
    """

    codec: Any = None
    rollout_server: Any = None


@dataclass
class RunPlan:
    """An RL run, checked and ready to train: the input of an executor (see the module).

    Attributes:
        recipe: the recipe (a key of :data:`~swiftcore_recipe_rl.recipe.CONFIGS`).
        cfg: the common options (``TrainConfig``), validated, ``recipe`` set.
        options: the recipe's options.
        spec: the policy's model spec.
        template: the template's spec (``--template`` or the model's default), checked against the tokenizer.
        teacher: the ``gkd`` / ``opd`` teacher's model spec; None for the other recipes.
        rewards: the rewards (``swiftcore_train.Reward``), loaded and checked against the dataset's columns.
        prompts: the prompts, encoded and within the length budget.
        environment: ``--environment``; None for single-turn rollouts.
        resume: the checkpoint ``--resume-from-checkpoint`` names; None for a fresh run.
        resumed_step: that checkpoint's step, when it has a trainer state.
        chord_samples: ``--chord-dataset``'s expert rows encoded as SFT encodes them
            (:func:`~swiftcore_recipe_rl.chord.encode_expert_data`); empty without the option.
        local: what the plan step built in its process (:class:`LocalParts`); never pickled.
    """

    recipe: str
    cfg: Any
    options: SamplingOptions
    spec: Any
    template: Any
    teacher: Any
    rewards: list[Any]
    prompts: EncodedPrompts
    environment: EnvironmentPlan | None = None
    resume: Path | None = None
    resumed_step: int | None = None
    chord_samples: list[dict[str, list[int]]] = field(default_factory=list)
    local: LocalParts = field(default_factory=LocalParts, repr=False, compare=False)

    @property
    def output_dir(self) -> Path:
        """``--output-dir``."""
        return Path(self.cfg.output_dir)

    @property
    def on_ray(self) -> bool:
        """``--ray``: the run's parts are placed on Ray."""
        return bool(getattr(self.options, "ray", False))

    def __getstate__(self) -> dict[str, Any]:
        # A tokenizer and an HTTP client belong to this process; the receiving executor rebuilds them from the plan.
        return {**self.__dict__, "local": LocalParts()}


def plan_run(recipe: str, cfg: Any, plugins: PluginSet, options: SamplingOptions) -> RunPlan:
    """Check everything about a run of ``recipe`` that can fail before a model loads, and encode its prompts.

    Raises:
        SwiftcoreError: the first problem found (see the module for the order), naming it and what to do.
    """
    from dataclasses import replace

    from swiftcore_train import check_recipe_fits_model, load_rewards, load_template, parse_reward_options

    from swiftcore.api.models import check_requirements, resolve_model_spec
    from swiftcore_recipe_rl.data import load_prompt_rows, refuse_media_prompts
    from swiftcore_recipe_rl.rollout import PromptCodec

    if cfg.recipe == "sft":  # called from Python with the default: the manifest must still name the recipe
        cfg = replace(cfg, recipe=recipe)
    cfg.validate()
    _refuse_unsupported(cfg)
    check_rollout_draft(options, cfg)
    spec = resolve_model_spec(cfg.model, plugins, model_type=cfg.model_type)
    check_requirements(spec)
    rewards = []
    if isinstance(options, RolloutOptions) and (options.reward or not isinstance(options, OPDOptions)):
        rewards = load_rewards(
            plugins,
            options.reward,
            options=parse_reward_options(options.reward_option),
            fallback=options.reward_fallback,
            timeout=options.reward_timeout,
        )
    teacher = None
    if isinstance(options, GKDOptions | OPDOptions) and options.teacher_model:  # opsd's teacher is the policy
        # the teacher's spec now: a bad directory fails before loading
        teacher = resolve_model_spec(options.teacher_model, plugins)
        check_requirements(teacher)
    rows = load_prompt_rows(cfg.dataset, skip_bad_rows=cfg.skip_bad_rows)
    if isinstance(options, OPSDOptions):  # the privileged context's column, before any model loads
        from swiftcore_recipe_rl.opsd import check_context_column

        check_context_column(rows, options, f"--dataset {', '.join(cfg.dataset)}")
    for reward in rewards:
        reward.check_columns(rows[0].columns, where=f"--dataset {', '.join(cfg.dataset)}")
    images = refuse_media_prompts(rows, recipe, options, spec, engine=cfg.engine)  # before any model loads
    check_recipe_fits_model(cfg, spec, plugins)
    template_spec, template, tokenizer = load_template(cfg, spec, plugins)
    codec = PromptCodec(template, tokenizer, media=media_preparer(spec, cfg.model, tokenizer) if images else None)
    if teacher is not None:
        check_teacher_vocabulary(options.teacher_model, tokenizer, recipe)
        if images:
            check_teacher_pixels(options.teacher_model, cfg.model)
    server = connect_server(options, cfg, template_spec.name)
    if images and server is not None:
        check_server_takes_images(server, f"--dataset {', '.join(cfg.dataset)}")
    environment = plan_environment(options, plugins)
    episodes = environment.episodes(codec) if environment is not None else None
    prompts = encode_prompts(rows, codec, cfg, options, episodes)
    chord_samples = []
    if getattr(options, "chord_dataset", ""):  # CHORD's expert data, encoded now so a bad row fails before training
        from swiftcore_recipe_rl.chord import encode_expert_data

        chord_samples = encode_expert_data(options.chord_dataset, template, tokenizer, cfg)
        log.info("CHORD: %d expert samples from %s", len(chord_samples), options.chord_dataset)
    resume = _resume(cfg, Path(cfg.output_dir))
    return RunPlan(
        recipe=recipe, cfg=cfg, options=options, spec=spec, template=template_spec, teacher=teacher,
        rewards=rewards, prompts=prompts, environment=environment, resume=resume, resumed_step=_step_of(resume),
        chord_samples=chord_samples, local=LocalParts(codec=codec, rollout_server=server),
    )  # fmt: skip


def media_preparer(spec: Any, model_dir: str, tokenizer: Any) -> Any:
    """The policy's media preparer, built as ``swiftcore infer`` and the SFT data path build it
    (``swiftcore_media.prepare_media``); None for a checkpoint without processor files (the codec then refuses an
    image prompt, naming its row)."""
    from swiftcore_media import prepare_media

    return prepare_media(spec, model_dir, tokenizer)


def check_teacher_vocabulary(teacher_dir: str, tokenizer: Any, recipe: str) -> None:
    """Refuse a teacher whose tokenizer maps tokens to other ids than the student's: the distillation recipes score
    the student's token ids with the teacher, so an id must mean the same token to both.

    Raises:
        SwiftcoreError: the vocabularies differ (naming their sizes and a token they disagree on).
    """
    from swiftcore.api import SwiftcoreError
    from swiftcore.api.models import load_tokenizer

    try:
        theirs = load_tokenizer(teacher_dir).get_vocab()
    except Exception as exc:  # a directory without a tokenizer, or one transformers cannot read
        raise SwiftcoreError(
            f"--teacher-model {teacher_dir}: its tokenizer could not be loaded ({type(exc).__name__}: {exc}); the "
            f"{recipe} recipe checks that it is the student's; give a model directory with its tokenizer files"
        ) from exc
    ours = tokenizer.get_vocab()
    if theirs == ours:
        return
    differing = sorted(t for t in set(ours) | set(theirs) if ours.get(t) != theirs.get(t))
    raise SwiftcoreError(
        f"--teacher-model {teacher_dir}: its tokenizer vocabulary differs from the student's ({len(theirs)} tokens "
        f"vs {len(ours)}; {len(differing)} differ, e.g. {differing[0]!r}: teacher id {theirs.get(differing[0])}, "
        f"student id {ours.get(differing[0])}); the {recipe} recipe scores the student's token ids with the teacher, "
        "so they must mean the same tokens: use a teacher with the student's tokenizer (the same model family)"
    )


#: The files whose contents decide what pixel tensors a checkpoint's processor makes of an image.
_PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")


def check_teacher_pixels(teacher_dir: str, student_dir: str) -> None:
    """Refuse a ``--teacher-model`` that cannot score image prompts with the student's pixels: the round's pixel
    tensors are made once, by the student's processor, and the teacher's forward takes them as they are, so the
    teacher must be of the student's model type, with the same image placeholder token and processor settings.

    Raises:
        SwiftcoreError: the first difference (naming the option, the field or file, and what to do).
    """
    from swiftcore.api import SwiftcoreError

    def read(folder: str, name: str) -> Any:
        path = Path(folder) / name
        return json.loads(path.read_text()) if path.is_file() else None

    teacher, student = read(teacher_dir, "config.json") or {}, read(student_dir, "config.json") or {}
    differences = [
        f"config.json {key} {teacher.get(key)!r} (the student's: {student.get(key)!r})"
        for key in ("model_type", "image_token_id")
        if teacher.get(key) != student.get(key)
    ]
    differences += [
        f"{name} differs from the student's"
        for name in _PROCESSOR_FILES
        if read(teacher_dir, name) != read(student_dir, name)
    ]
    if differences:
        raise SwiftcoreError(
            f"--teacher-model {teacher_dir}: {differences[0]}; prompts with images are scored by the teacher with the "
            "pixels the student's processor makes, so the teacher must be of the student's model type with its "
            "processor files: use a teacher of the same family and processor, or drop the images from --dataset"
        )


def check_rollout_draft(options: SamplingOptions, cfg: Any) -> None:
    """``--rollout-draft DIR``: a directory with a ``config.json``, for a policy trained in full (whether an
    installed plugin decodes that draft is known once the engine loads the policy:
    :func:`~swiftcore_recipe_rl.sync.create_rollout_engine`).

    Raises:
        SwiftcoreError: no such directory, no ``config.json`` in it, or a LoRA (adapter) policy.
    """
    from swiftcore.api import SwiftcoreError

    draft = getattr(options, "rollout_draft", "")
    if not draft:
        return
    path = Path(draft)
    if not path.is_dir():
        raise SwiftcoreError(f"--rollout-draft {draft}: no such directory; give a draft's directory (a checkpoint of "
                             f"`swiftcore train --recipe eagle3 --model {cfg.model}`)")  # fmt: skip
    if not (path / "config.json").is_file():
        raise SwiftcoreError(f"--rollout-draft {draft}: no config.json there; give a draft's directory (a checkpoint "
                             f"of `swiftcore train --recipe eagle3 --model {cfg.model}`)")  # fmt: skip
    if cfg.tuner != "full":
        raise SwiftcoreError(
            f"--rollout-draft with --tuner {cfg.tuner}: the draft decodes for the engine's full weights, and the "
            "engine then takes no adapter to sync the policy's LoRA into; use --tuner full, or drop --rollout-draft"
        )


def _refuse_unsupported(cfg: Any) -> None:
    """Refuse the common options the RL recipes do not support yet, naming them."""
    from swiftcore.api import SwiftcoreError

    unsupported = {
        "--val-dataset / --split-ratio": bool(cfg.val_dataset) or cfg.split_ratio > 0,
        "--packing": cfg.packing,
        "--padding-free": cfg.padding_free,
    }
    given = [flag for flag, on in unsupported.items() if on]
    if given:
        raise SwiftcoreError(f"{', '.join(given)}: not supported by the {cfg.recipe} recipe yet; drop them")


def check_server_takes_images(server: Any, where: str) -> None:
    """Refuse image prompts (in ``where``) for a rollout server whose engine does not generate with images yet: the
    transformers engine does (each row's record travels with its images inlined, :mod:`~swiftcore_recipe_rl.remote`).
    """
    backend = server.info["backend"]
    if backend == "transformers":
        return
    from swiftcore.api import SwiftcoreError

    server.close()
    raise SwiftcoreError(
        f"{where}: image prompts, and the rollout server {server.url} runs the {backend} backend, which does not take "
        "them yet; start `swiftcore rollout` with --backend transformers, or train without --rollout-server"
    )


def connect_server(options: SamplingOptions, cfg: Any, template: str) -> Any:
    """``--rollout-server URL``: the server, checked (answers, serves this base checkpoint and template) before
    the model loads, so a wrong server fails in a second; None without the option."""
    url = getattr(options, "rollout_server", "")
    if not url:
        return None
    from swiftcore_recipe_rl.remote import connect_rollout_server

    engine = connect_rollout_server(
        url,
        cfg.model,
        template=template,
        lora=cfg.tuner != "full",
        timeout=options.rollout_server_timeout,
        api_key=_server_key(options),
    )
    log.info("rollouts: swiftcore rollout server %s (%s, weight version %d)", url, engine.info["backend"],
             engine.weight_version)  # fmt: skip
    return engine


def _server_key(options: SamplingOptions) -> str | None:
    """The rollout server's key: ``--rollout-server-key-file``'s first line, else ``$SWIFTCORE_ROLLOUT_KEY``, else
    None (read with the server's own rules: :func:`swiftcore_serve.read_key_file`)."""
    import os

    from swiftcore_serve import checked_key, read_key_file

    if options.rollout_server_key_file:
        path = Path(options.rollout_server_key_file)
        return checked_key(read_key_file(path, "--rollout-server-key-file"), f"--rollout-server-key-file {path}")
    value = os.environ.get("SWIFTCORE_ROLLOUT_KEY")
    return checked_key(value, "$SWIFTCORE_ROLLOUT_KEY") if value is not None else None


def plan_environment(options: SamplingOptions, plugins: PluginSet) -> EnvironmentPlan | None:
    """``--environment NAME``: that environment's factory, its ``--environment-option`` values bound to it and
    checked (None: single-turn rollouts).

    Raises:
        SwiftcoreError: an unknown environment, or an option it does not take or refuses.
    """
    if not isinstance(options, RolloutOptions) or not options.environment:
        return None
    from swiftcore.api import resolve
    from swiftcore_recipe_rl.environment_options import environment_factory

    name = options.environment

    spec = plugins.registry.get("environment", name)
    factory = resolve(spec.factory, what=f"environment {spec.name!r} of {spec.provider}")
    env_options = options.environment_options()
    factory = environment_factory(factory, env_options, name=spec.name, provider=spec.provider)
    log.info("multi-turn episodes: environment %s (%s)%s, at most %d replies each", spec.name, spec.provider,
             "".join(f" {k}={v}" for k, v in env_options.items()), options.max_turns)  # fmt: skip
    return EnvironmentPlan(name=spec.name, provider=spec.provider, factory=factory, max_turns=options.max_turns)


def _resume(cfg: Any, output_dir: Path) -> Path | None:
    """The checkpoint ``--resume-from-checkpoint`` names (``latest``: the newest in ``--output-dir``)."""
    from swiftcore.api import SwiftcoreError

    value = cfg.resume_from_checkpoint
    if not value:
        return None
    if value in ("latest", "true", "True"):
        from swiftcore_train import last_checkpoint

        last = last_checkpoint(output_dir)
        if last is None:
            raise SwiftcoreError(f"--resume-from-checkpoint latest: no checkpoint-N directory in {str(output_dir)!r}")
        return last
    return Path(value)


def _step_of(checkpoint: Path | None) -> int | None:
    """The global step a checkpoint's trainer state records (None: no checkpoint, or one without a state)."""
    if checkpoint is None or not (checkpoint / "trainer_state.json").is_file():
        return None
    return int(json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8")).get("global_step", 0))
