"""``--ray``: the trainer, the rollout engine and each reward function as Ray actors, for users who outgrow one
process.

What runs where (a local Ray cluster is started unless ``RAY_ADDRESS`` names one to join):

- the **trainer** (:class:`TrainerWorker`): the run's executor (:func:`~swiftcore_recipe_rl.execute.execute`), with
  a GPU when the cluster has one. The ``swiftcore train`` process plans the run (every check, the prompts encoded:
  :func:`~swiftcore_recipe_rl.plan.plan_run`), hands the plan to this actor and waits for its result; the actor
  checks and encodes nothing again;
- the **rollout worker** (:class:`RolloutWorker`): the rollout engine of ``--rollout-engine`` (``transformers`` when
  the trainer would generate itself) behind the same :class:`~swiftcore_recipe_rl.rollout_server.RolloutService`
  ``swiftcore rollout`` serves over HTTP; the trainer reaches it through :class:`RayRolloutEngine`, the
  ``--rollout-server`` client with a Ray actor call instead of an HTTP request, so the weight sync, the checks and
  the error handling are server mode's own. A Ray actor runs one call at a time, so a sync never interleaves a
  rollout;
- one **reward worker** per ``--reward`` (:class:`RewardWorker`): the reward loaded in its own process, scored there
  (TRL already runs the rewards of a step concurrently; :class:`RayReward` is what the trainer calls). A reward
  worker that dies costs its samples the fallback reward and a logged error, as a reward that raises does, and is
  restarted by Ray for the next call.

Why actors and not tasks: the engine and a reward model are loaded once and kept, and the engine's weights are
state. Placement: the trainer and the rollout worker each take one CPU (and one GPU each when the cluster has two,
half of one each when it has one); reward workers take none (they mostly wait). Every worker loads the same plugin
set as the command (``SWIFTCORE_PLUGINS``).

Importing this module imports neither Ray nor torch.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swiftcore_recipe_rl.remote import RemoteRolloutEngine

if TYPE_CHECKING:
    from swiftcore.api import PluginSet
    from swiftcore_recipe_rl.plan import RunPlan

__all__ = [
    "RayReward",
    "RayRolloutEngine",
    "RewardWorker",
    "RolloutWorker",
    "TrainerWorker",
    "placement",
    "run_on_ray",
    "start_reward_workers",
    "start_rollout_worker",
]

log = logging.getLogger("swiftcore.rl")


def _ray() -> Any:
    from swiftcore.api import SwiftcoreError

    try:
        import ray
    except ImportError as exc:
        raise SwiftcoreError(
            "--ray needs Ray: pip install 'swiftcore-recipe-rl[ray]' (or pip install ray); drop --ray to train in one "
            "process"
        ) from exc
    return ray


def _plugins(context: tuple[list[str], list[str]]) -> Any:
    """The command's plugin set (:func:`_context`), loaded in a worker.

    Ray puts the driver's working directory on a worker's ``sys.path``; the command does not have it there (a
    console script), and a checkpoint folder in it named like a plugin (``./tiny``) would make that plugin's name
    ambiguous. So it goes first, unless the command has it too.
    """
    import sys

    from swiftcore.api import load_plugins

    specs, driver_paths = context
    sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd()) or p in driver_paths]
    return load_plugins(env={"SWIFTCORE_PLUGINS": ",".join(specs)})


def _context(plugins: PluginSet) -> tuple[list[str], list[str]]:
    """What a worker needs to load the command's plugins: their specs and the command's ``sys.path``."""
    import sys

    return list(plugins.resolved_specs), list(sys.path)


def _gpus() -> float:
    """The GPUs the cluster offers (0 on a CPU-only cluster)."""
    return float(_ray().cluster_resources().get("GPU", 0))


def _share() -> float:
    """The GPU each of the trainer and the rollout worker takes: one each with two or more, half of the one."""
    gpus = _gpus()
    return 1.0 if gpus >= 2 else (0.5 if gpus >= 1 else 0.0)


# ------------------------------------------------------------------ the trainer


class TrainerWorker:
    """The trainer actor: executes a run's plan in its own process, its rollout engine and rewards in actors of their
    own (see the module)."""

    def __init__(self, context: tuple[list[str], list[str]]) -> None:
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        self.plugins = _plugins(context)

    def run(self, plan: RunPlan) -> Any:
        """Execute ``plan`` (a :class:`~swiftcore_recipe_rl.plan.RunPlan`): a reward worker per reward, the rollout
        worker, then the executor with them; the run's :class:`~swiftcore_train.TrainResult`."""
        from swiftcore_recipe_rl.execute import execute

        options = plan.options
        rewards = start_reward_workers(self.plugins, options.reward, plan.rewards)
        # The rollout worker runs --rollout-engine's backend; the transformers engine for trainer (TRL's generate
        # cannot run in another process).
        backend = options.rollout_engine if options.rollout_engine != "trainer" else "transformers"
        engine = start_rollout_worker(self.plugins, backend, plan.cfg, plan.template.name,
                                      timeout=options.rollout_server_timeout)  # fmt: skip
        return execute(plan, self.plugins, rewards=rewards, rollout_engine=engine,
                       record={"ray": placement(engine, rewards)})  # fmt: skip


def _absolute(plan: RunPlan) -> RunPlan:
    """``plan`` with its local paths absolute: a worker's working directory is not the command's."""
    cfg = plan.cfg

    def fix(value: str) -> str:
        return str(Path(value).resolve()) if value and Path(value).exists() else value

    cfg = replace(
        cfg,
        model=fix(cfg.model),
        dataset=tuple(fix(d) for d in cfg.dataset),
        output_dir=str(Path(cfg.output_dir).resolve()),
        resume_from_checkpoint=fix(cfg.resume_from_checkpoint) if cfg.resume_from_checkpoint else None,
    )
    return replace(plan, cfg=cfg, resume=plan.resume.resolve() if plan.resume is not None else None)


def run_on_ray(plan: RunPlan, plugins: PluginSet) -> Any:
    """``--ray``: join (``RAY_ADDRESS``) or start a Ray cluster and execute ``plan`` (a
    :class:`~swiftcore_recipe_rl.plan.RunPlan`) in a trainer actor; its result."""
    ray = _ray()
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS") or None
        started = "joined the Ray cluster at " + address if address else "started a local Ray cluster"
        ray.init(address=address, include_dashboard=False, configure_logging=False, log_to_driver=True)
        log.info("--ray: %s (%s)", started, ", ".join(f"{k} {v:g}" for k, v in sorted(ray.cluster_resources().items())
                                                       if k in ("CPU", "GPU")))  # fmt: skip
    trainer = ray.remote(TrainerWorker).options(num_cpus=1, num_gpus=_share(), max_restarts=0)
    actor = trainer.remote(_context(plugins))
    try:
        return ray.get(actor.run.remote(_absolute(plan)))
    except ray.exceptions.RayTaskError as exc:  # the run's own error, raised again here with its message
        raise exc.as_instanceof_cause() from None
    finally:
        ray.kill(actor)


# ------------------------------------------------------------------ the rollout worker


class RolloutWorker:
    """The rollout actor: a rollout engine behind a :class:`~swiftcore_recipe_rl.rollout_server.RolloutService`,
    answering server mode's routes as method calls (:meth:`call`)."""

    def __init__(self, context: tuple[list[str], list[str]], backend: str, cfg: Any, template: str) -> None:
        from swiftcore_recipe_rl.identity import checkpoint_identity
        from swiftcore_recipe_rl.rollout_server import RolloutService
        from swiftcore_recipe_rl.sync import create_rollout_engine

        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        device = "cuda" if _cuda() else "cpu"
        engine = create_rollout_engine(backend, cfg, _plugins(context), template=template, device=device,
                                       flag="--rollout-engine")  # fmt: skip
        self.service = RolloutService(engine, identity=checkpoint_identity(engine.base_dir))

    def call(self, route: str, payload: Any = None, body: bytes | None = None, name: str | None = None) -> Any:
        """``(status, answer)`` of one of server mode's routes, as the HTTP server would answer it."""
        from swiftcore_infer import error_text

        from swiftcore_recipe_rl.rollout_server import _status

        service = self.service
        routes = {
            "/health": lambda: service.health(),
            "/rollouts": lambda: service.rollouts(payload),
            "/load_adapter": lambda: service.load_adapter(name, body),
            "/update_adapter": lambda: service.update_adapter(name, body),
            "/update_weights": lambda: service.update_weights(body),
        }
        try:
            return 200, routes[route]()
        except Exception as exc:
            status = _status(exc)
            if status >= 500:
                log.exception("%s failed", route)
            return status, {"error": {"message": error_text(exc), "code": status}}

    def pid(self) -> int:
        """This worker's process id."""
        return os.getpid()


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


class RayRolloutEngine(RemoteRolloutEngine):
    """The rollout worker as a rollout engine: :class:`~swiftcore_recipe_rl.remote.RemoteRolloutEngine` with a
    Ray actor call for transport.

    Args:
        actor: the :class:`RolloutWorker` actor handle.
        timeout: seconds a call may take (``--rollout-server-timeout``).
    """

    flag = "--ray"

    def __init__(self, actor: Any, *, timeout: float = 600.0) -> None:
        self._actor = actor
        super().__init__("ray://rollout-worker", timeout=timeout)

    def _open(self) -> None:
        """Nothing to open: the actor handle is the connection."""

    def _send(self, method: str, route: str, **kwargs: Any) -> tuple[int, Any, str]:
        from swiftcore.api import SwiftcoreError

        ray = _ray()
        params = kwargs.get("params") or {}
        call = self._actor.call.remote(route, kwargs.get("json"), kwargs.get("content"), params.get("name"))
        try:
            status, payload = ray.get(call, timeout=self.timeout)
        except ray.exceptions.GetTimeoutError as exc:
            ray.cancel(call)
            raise SwiftcoreError(self._lost(route, f"no answer within --rollout-server-timeout {self.timeout:g} s"))  \
                from exc  # fmt: skip
        except ray.exceptions.RayError as exc:
            raise SwiftcoreError(self._lost(route, f"{type(exc).__name__}: {str(exc).splitlines()[0]}")) from exc
        return status, payload, ""

    def _lost(self, route: str, reason: str) -> str:
        return (
            f"the Ray rollout worker stopped answering during {route} ({reason}); this step took no optimiser step "
            "and the checkpoints written so far are intact: run the same command with --resume-from-checkpoint "
            "latest"
        )

    def close(self) -> None:
        """Stop the rollout worker."""
        _ray().kill(self._actor)


def start_rollout_worker(
    plugins: PluginSet, backend: str, cfg: Any, template: str, *, timeout: float
) -> RayRolloutEngine:
    """A :class:`RolloutWorker` actor of ``backend`` on the policy's base checkpoint, as a rollout engine."""
    ray = _ray()
    actor = (
        ray.remote(RolloutWorker)
        .options(num_cpus=1, num_gpus=_share(), max_restarts=0)
        .remote(_context(plugins), backend, cfg, template)
    )
    return RayRolloutEngine(actor, timeout=timeout)


# ------------------------------------------------------------------ reward workers


class RewardWorker:
    """A reward actor: one reward loaded in its own process, scoring batches (:meth:`score`)."""

    def __init__(
        self, context: tuple[list[str], list[str]], name: str, options: dict, fallback: float, timeout: Any
    ) -> None:
        from swiftcore_train import load_rewards

        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        (self.reward,) = load_rewards(
            _plugins(context), [name], options={name: options} if options else {}, fallback=fallback,
            timeout=timeout,
        )  # fmt: skip

    def score(self, completions: list[str], kwargs: dict[str, Any]) -> tuple[list[float], int]:
        """``(scores, faults)``: the reward's scores of a batch (never raises) and how many were fallbacks."""
        before = self.reward.faults
        scores = self.reward(completions, **kwargs)
        return scores, self.reward.faults - before

    def pid(self) -> int:
        """This worker's process id."""
        return os.getpid()


class RayReward:
    """A reward scored by its :class:`RewardWorker`, with the interface of the core's
    :class:`~swiftcore_train.rewards.Reward` the recipe uses (``name``, ``spec``, ``options``, ``faults``, calling it).

    Args:
        local: the reward as loaded in the trainer (its spec, options and fallback; never called).
        actor: its reward worker.
    """

    def __init__(self, local: Any, actor: Any) -> None:
        self.local = local
        self.actor = actor
        self.faults = 0

    @property
    def name(self) -> str:
        """The reward's name."""
        return self.local.name

    @property
    def spec(self) -> Any:
        """The reward's spec."""
        return self.local.spec

    @property
    def options(self) -> dict[str, str]:
        """The reward's options."""
        return self.local.options

    def check_columns(self, columns: Any, where: str = "the dataset") -> None:
        """See :meth:`swiftcore_train.rewards.Reward.check_columns`."""
        self.local.check_columns(columns, where)

    def __call__(self, completions: Sequence[str], **kwargs: Any) -> list[float]:
        """The worker's scores; a worker that died costs every sample the fallback and a logged error."""
        ray = _ray()
        try:
            scores, faults = ray.get(self.actor.score.remote(list(completions), kwargs))
        except ray.exceptions.RayError as exc:
            log.error("reward %r: its Ray worker failed (%s); its %d samples get the fallback reward %s", self.name,
                      str(exc).splitlines()[0], len(completions), self.local.fallback)  # fmt: skip
            scores, faults = [float(self.local.fallback)] * len(completions), len(completions)
        self.faults += faults
        return scores


def start_reward_workers(plugins: PluginSet, names: Sequence[str], rewards: Sequence[Any]) -> list[RayReward]:
    """One :class:`RewardWorker` per loaded reward (restarted by Ray if it dies), each wrapped as a :class:`RayReward`.

    Args:
        plugins: the run's plugins (the workers load the same set).
        names: the ``--reward`` values the rewards were loaded by (``name@plugin`` kept: the same provider's).
        rewards: the rewards as loaded in the trainer, in the same order.
    """
    ray = _ray()
    worker = ray.remote(RewardWorker).options(num_cpus=0, max_restarts=-1)
    context = _context(plugins)
    return [
        RayReward(r, worker.remote(context, name, dict(r.options), r.fallback, r.timeout))
        for name, r in zip(names, rewards, strict=True)
    ]


def placement(engine: RayRolloutEngine, rewards: Sequence[RayReward]) -> dict[str, Any]:
    """Where the run's parts run (process ids and Ray node ids), for ``args.json``: ``trainer``, ``rollout`` and
    ``rewards`` (reward name -> its worker's)."""
    ray = _ray()
    node = ray.get_runtime_context().get_node_id()
    return {
        "trainer": {"pid": os.getpid(), "node": node},
        "rollout": {"pid": ray.get(engine._actor.pid.remote())},
        "rewards": {r.name: {"pid": ray.get(r.actor.pid.remote())} for r in rewards},
    }
