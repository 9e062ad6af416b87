"""Hydra training entry point: ``python -m torchfrag.train`` (console script ``torchfrag-train``).

Examples (shell)::

    python -m torchfrag.train                                  # PPO on CartPole-v1
    python -m torchfrag.train env=Pendulum-v1 algo.lr=1e-3 seed=3
    python -m torchfrag.train -m seed=0,1,2                     # multirun sweep
    python -m torchfrag.train resume=outputs/.../checkpoints/latest.pt

Every run writes into its Hydra run folder: ``.hydra/`` (the composed
config), ``train.log``, ``<exp>/scalars/*.csv`` (TorchRL's CSV logger),
``checkpoints/`` (atomic, checksummed), ``learning_curve.png`` and
``summary.json``.

Config lookup: the ``conf/`` folder shipped inside the package
(``torchfrag/conf`` in a wheel), else the repository's top-level ``conf/``
(checkout or editable install). ``TORCHFRAG_CONF`` overrides both.

Example:
    >>> from torchfrag.train import config_dir
    >>> import os
    >>> os.path.isfile(os.path.join(config_dir(), "config.yaml"))
    True
"""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import math
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterator

try:
    from omegaconf import MISSING, DictConfig, OmegaConf
except KeyboardInterrupt:  # Ctrl-C while `python -m torchfrag.train` starts: no traceback
    if __name__ != "__main__":
        raise
    os.write(2, b"torchfrag.train: interrupted (Ctrl-C) while starting\n")
    os._exit(130)

logger = logging.getLogger(__name__)

__all__ = ["ResumeRefused", "compose_config", "config_dir", "main", "register_schemas", "train"]


# -- config schemas (types checked by Hydra on every override) ------------------------------
@dataclass
class EnvConfig:
    """``env/``: which task. ``options`` go to :func:`torchfrag.envs.make`."""

    id: str = MISSING
    options: dict[str, Any] = field(default_factory=dict)
    eval_envs: int = 4


@dataclass
class PolicyConfig:
    """``policy/``: the distribution policy (``local`` or a ``torchfrag.policies`` schema)."""

    name: str = "local"


@dataclass
class LoggerConfig:
    """``logger/``: ``csv`` (default), ``tensorboard`` or ``wandb`` (each needs its package) or
    ``none``. ``mode`` and ``project`` are W&B's (see :mod:`torchfrag.train_loggers`)."""

    backend: str = "csv"
    exp_name: str = "train"
    mode: str = "offline"
    project: str = "torchfrag"


@dataclass
class TrainConfig:
    """Top level of ``conf/config.yaml``."""

    env: EnvConfig = MISSING
    algo: Any = MISSING
    policy: Any = MISSING  # PolicyConfig or a torchfrag.policies schema
    logger: LoggerConfig = MISSING
    seed: int = 0
    total_frames: int | None = None
    target_return: float | None = None
    target_window: int = 20
    resume: str | None = None
    checkpoint_every: int = 0
    checkpoint_every_frames: int = 100_000
    checkpoint_every_seconds: float = 600.0
    checkpoint_keep: int = 3
    checkpoint_keep_best: bool = True
    eval_episodes: int = 10
    video: bool = False
    progress: bool = True
    plot: bool = True


def _algo_schemas() -> dict[str, type]:
    """``algo/<name>_schema`` for every algorithm: its config dataclass plus ``name``."""
    import dataclasses

    from torchfrag.algos import ALGOS, get_algo

    out = {}
    for name in ALGOS:
        cls, _ = get_algo(name)
        out[name] = dataclasses.make_dataclass(
            f"{cls.__name__}Schema", [("name", str, dataclasses.field(default=name))], bases=(cls,))
    return out


def register_schemas() -> None:
    """Stores the schemas in Hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(group="env", name="env_schema", node=EnvConfig)
    _store_registered_envs(cs)
    for name, node in _algo_schemas().items():
        cs.store(group="algo", name=f"{name}_schema", node=node)
    cs.store(group="policy", name="policy_schema", node=PolicyConfig)
    from torchfrag.policies import register_schemas as register_policy_schemas

    register_policy_schemas()
    cs.store(group="logger", name="logger_schema", node=LoggerConfig)
    from torchfrag.cli_messages import register_help_resolver

    register_help_resolver()  # --help lists the groups without their *_schema entries


#: The env group file whose settings an id without its own file inherits, per family
#: (recognised by an option only that family has).
_FAMILY_TEMPLATES = (("episodic_life", "Pong-v5"),)


def _store_registered_envs(cs: Any) -> None:
    """``env=<id>`` for every registered id: ids without a ``conf/env/<id>.yaml`` file get
    their family's settings (Atari: those of ``Pong-v5.yaml``; others: none)."""
    for node in _registered_env_nodes(config_dir()):
        cs.store(group="env", name=node.id, node=node)


@functools.lru_cache(maxsize=4)
def _registered_env_nodes(conf_dir: str) -> tuple[EnvConfig, ...]:
    from omegaconf import OmegaConf

    from torchfrag.envs import list_envs, spec
    from torchfrag.envs.dmc_observations import is_dmc

    folder = os.path.join(conf_dir, "env")
    nodes = []
    for env_id in list_envs():
        if os.path.isfile(os.path.join(folder, f"{env_id}.yaml")):
            continue
        options: dict[str, Any] = {}
        eval_envs = EnvConfig.eval_envs
        # DMC ids have no family template, and their spec compiles a MuJoCo model (slow, and
        # impossible without the optional dm_control): the CLI must start without them.
        own_options = () if is_dmc(env_id) else spec(env_id).options
        for option, template in _FAMILY_TEMPLATES:
            path = os.path.join(folder, f"{template}.yaml")
            if option in own_options and os.path.isfile(path):
                conf = OmegaConf.load(path)
                options = OmegaConf.to_container(conf.get("options", {}))
                eval_envs = int(conf.get("eval_envs", eval_envs))
                break
        nodes.append(EnvConfig(id=env_id, options=options, eval_envs=eval_envs))
    return tuple(nodes)


def config_dir() -> str:
    """Absolute path of the ``conf/`` folder (see the module docstring)."""
    env = os.environ.get("TORCHFRAG_CONF")
    if env:
        return os.path.abspath(env)
    pkg = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(pkg, "conf"), os.path.join(os.path.dirname(pkg), "conf")):
        if os.path.isfile(os.path.join(cand, "config.yaml")):
            return cand
    raise FileNotFoundError(
        f"torchfrag's conf/ folder was found neither in {pkg} nor next to it; "
        "reinstall torchfrag or set TORCHFRAG_CONF")


def compose_config(overrides: list[str] | None = None) -> DictConfig:
    """Composes the training config as the CLI would (for tests and notebooks).

    Example:
        >>> from torchfrag.train import compose_config
        >>> cfg = compose_config(["env=Pendulum-v1", "seed=3"])
        >>> cfg.env.id, cfg.seed
        ('Pendulum-v1', 3)
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register_schemas()
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        return compose("config", overrides=list(overrides or []))


# -- training -----------------------------------------------------------------------------
#: Most frames a run may count: the frame counters are signed 64-bit.
MAX_FRAMES = 2**63 - 1


def _check(cfg: DictConfig) -> None:
    """Refuses a config no training can use, before anything starts (see :func:`_hydra_main`).

    Raises:
        ValueError: One line naming the key, its value and what is allowed.
    """
    from torchfrag.algos import ALGOS
    from torchfrag.envs import list_envs
    from torchfrag.policies import as_policy
    from torchfrag.train_loggers import check_logger

    _check_known_keys(cfg)
    if cfg.env.id not in list_envs():
        raise ValueError(f"unknown env id {cfg.env.id!r}; registered: {sorted(list_envs())}")
    _check_env_options(cfg)
    if cfg.get("video", False):
        _check_video(cfg)
    if "_target_" not in cfg.algo and cfg.algo.get("name") not in ALGOS:
        raise ValueError(f"unknown algo {cfg.algo.get('name')!r}; shipped: {sorted(ALGOS)}, or give the "
                         "algo config a `_target_` naming your AlgoFactory subclass")
    # a PolicyError (ValueError) names an unknown policy or option, or a bad value (master_addr)
    as_policy(cfg.policy).validate()
    check_logger(cfg.logger)  # a known backend whose package is installed
    # Torch seeds are signed 64-bit: 2**63 and above overflow deep inside.
    if not 0 <= int(cfg.seed) < 2**63:
        raise ValueError(f"seed must be in [0, 2**63), got {cfg.seed}")
    for key in ("total_frames", "algo.total_frames"):
        value = OmegaConf.select(cfg, key)
        if value is not None and int(value) <= 0:
            raise ValueError(f"{key} must be a positive number of frames, got {value}")
        if value is not None and int(value) > MAX_FRAMES:
            raise ValueError(f"{key} must be at most 2**63 - 1 frames, got {value}")
    for key, low in (("checkpoint_every", 0), ("checkpoint_every_frames", 0), ("checkpoint_every_seconds", 0),
                     ("checkpoint_keep", 1), ("eval_episodes", 0), ("target_window", 1), ("env.eval_envs", 1)):
        value = OmegaConf.select(cfg, key)
        if not float(value) >= low or not math.isfinite(float(value)):
            raise ValueError(f"{key} must be >= {low}{_MEANING.get(key, '')}, got {value}")
    _check_algo(cfg)


#: What the lowest allowed value of a top-level count means, for the refusal's message.
_MEANING = {"checkpoint_every": " (0: off)", "checkpoint_every_frames": " (0: off)",
            "checkpoint_every_seconds": " (0: off)", "eval_episodes": " (0: skip)"}


def _check_algo(cfg: DictConfig) -> None:
    """The algorithm's own checks (:meth:`~torchfrag.algos.config.AlgoConfig.validate`) and a
    ``total_frames`` of at least one iteration."""
    from torchfrag.algos import factory_from_config

    algo = OmegaConf.to_container(cfg.algo, resolve=True)
    factory = factory_from_config(algo, cfg.env.id, seed=int(cfg.seed))
    known = factory.config_class().field_names() | {"name", "_target_"}
    _refuse_unknown("algo", algo, known)
    pcfg = factory.config()
    pcfg.validate()
    key = "total_frames" if cfg.total_frames is not None else "algo.total_frames"
    frames = int(cfg.total_frames) if cfg.total_frames is not None else int(pcfg.total_frames)
    if frames < pcfg.frames_per_iteration:
        raise ValueError(f"{key}={frames} is less than one iteration's {pcfg.frames_per_iteration} "
                         f"frames (algo.num_envs={pcfg.num_envs} x algo.steps={pcfg.steps}); raise "
                         f"{key} or lower algo.num_envs or algo.steps")
    warmup = pcfg.warmup_frames
    if warmup and frames <= warmup:  # nothing would be left to train on
        raise ValueError(f"{key}={frames} is not more than the {warmup} warm-up frames that count towards it "
                         f"(algo.learning_starts={getattr(pcfg, 'learning_starts', None)}, TorchRL's "
                         f"init_random_frames); raise {key} above {warmup} or lower algo.learning_starts")


def _check_env_options(cfg: DictConfig) -> None:
    """``env.options`` checked by the pool's own option rules (names, types, ranges) without
    building an env; keywords of :class:`~torchfrag.envs.PoolEnv` itself pass through."""
    import inspect

    from torchfrag.envs import EnvPool, PoolEnv, spec

    options = OmegaConf.to_container(cfg.env.options, resolve=True)
    # PoolEnv passes the pool's own keywords (wait_policy, spin_us) on to EnvPool.
    own = set(inspect.signature(PoolEnv.__init__).parameters)
    own |= set(inspect.signature(EnvPool.__init__).parameters)
    try:
        spec(cfg.env.id, **{k: v for k, v in options.items() if k not in own})
    except (ValueError, TypeError) as err:
        raise ValueError(f"env.options of {cfg.env.id}: {err}") from None


def _check_known_keys(cfg: DictConfig) -> None:
    """Refuses keys added with ``+`` that nothing reads (``+foo=1``, ``+env.foo=1``), which
    would otherwise be ignored without a word. ``algo`` is checked by :func:`_check_algo`,
    ``policy`` by :func:`torchfrag.policies.as_policy`."""
    from dataclasses import fields

    for where, node, schema in (("", cfg, TrainConfig), ("env", cfg.env, EnvConfig),
                                ("logger", cfg.logger, LoggerConfig)):
        _refuse_unknown(where, node, {f.name for f in fields(schema)})


def _refuse_unknown(where: str, node: Any, known: set[str]) -> None:
    """Raises ``ValueError`` naming the first key of ``node`` not in ``known``, and the known
    keys nearest to it."""
    import difflib

    for key in node:
        if key not in known:
            full = f"{where}.{key}" if where else str(key)
            near = difflib.get_close_matches(str(key), sorted(known), n=3, cutoff=0.5)
            raise ValueError(f"unknown key {full!r} (value {node[key]!r}): "
                             + (f"did you mean {', '.join(repr(n) for n in near)}? " if near else "")
                             + f"known {where or 'top-level'} keys: {', '.join(sorted(known))}")


class ResumeRefused(ValueError):
    """The checkpoint named by ``resume`` cannot continue this run (another env, algorithm or
    network shape, a damaged file, impossible counters); raised before training starts."""


def _serves_as_worker(cfg: DictConfig) -> bool:
    """Whether this process is a torchrun rank other than 0 of a distributed policy (a worker).

    Example:
        >>> from omegaconf import OmegaConf
        >>> _serves_as_worker(OmegaConf.create({"policy": {"name": "local"}}))
        False
    """
    from torchfrag.policies import as_policy
    from torchfrag.runtime.launcher import torchrun_env

    env = torchrun_env()
    return env is not None and env["rank"] != 0 and as_policy(cfg.policy).distributed


def _check_resume(cfg: DictConfig, path: str, ckpt: dict[str, Any]) -> None:
    """Refuses a checkpoint written for another env or algorithm (its saved config says), one
    without its config, and one whose ``iteration`` is negative or beyond its frames.

    Raises:
        ResumeRefused: One line naming the key, the checkpoint's value and this run's.
    """
    saved_yaml = ckpt.get("config")
    if not saved_yaml:
        raise ResumeRefused(f"resume={path!r} holds no saved config, so its env, algorithm and "
                            "network shape cannot be checked against this run; resume from a "
                            "checkpoint written by torchfrag.train")
    saved = OmegaConf.create(saved_yaml)
    for key in ("env.id", "algo.name", "algo._target_"):
        was, now = OmegaConf.select(saved, key), OmegaConf.select(cfg, key)
        if was is not None and was != now:
            raise ResumeRefused(f"resume={path!r} was trained with {key}={was!r}, but this run has "
                                f"{key}={now!r}; resume with {key}={was!r} or start a new run")
    iteration = ckpt.get("iteration")
    num_envs, steps = OmegaConf.select(saved, "algo.num_envs"), OmegaConf.select(saved, "algo.steps")
    state = ckpt.get("state")
    frames = state.get("frames") if isinstance(state, dict) else None
    if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
        raise ResumeRefused(f"resume={path!r} has iteration={iteration!r}; it must be an integer >= 0")
    if isinstance(frames, int) and num_envs and steps and iteration * int(num_envs) * int(steps) > frames:
        raise ResumeRefused(f"resume={path!r} has iteration={iteration}, beyond its {frames} frames "
                            f"({int(num_envs) * int(steps)} frames per iteration: at most iteration="
                            f"{frames // (int(num_envs) * int(steps))})")


def _load_resume(cfg: DictConfig) -> tuple[str, dict[str, Any]]:
    """``(path, checkpoint)`` that ``resume`` names, checked by :func:`_check_resume`.

    Raises:
        CheckpointError: No checkpoint there verifies.
        ResumeRefused: It was written for another run (see :func:`_check_resume`).
    """
    from torchfrag.runtime.checkpoint import CheckpointError, load_for_resume

    try:
        path, ckpt = load_for_resume(str(cfg.resume))
    except CheckpointError as err:
        raise CheckpointError(f"resume={str(cfg.resume)!r}: {err}") from err
    _check_resume(cfg, path, ckpt)
    return path, ckpt


def _load_resume_state(cfg: DictConfig, path: str, ckpt: dict[str, Any], loop: Any) -> None:
    """Loads the checkpoint's training state into ``loop``; a state that does not fit (another
    network shape) is refused in one line naming the first mismatch and the config keys that
    differ from the checkpoint's."""
    from torchfrag.algos.loop import load_training_state

    try:
        load_training_state(loop, ckpt["state"])
    except (RuntimeError, KeyError, ValueError, TypeError) as err:
        detail = next((line.strip() for line in str(err).splitlines()
                       if "mismatch" in line or "Missing" in line or "Unexpected" in line),
                      str(err).splitlines()[0] if str(err) else type(err).__name__)
        changed = _changed_keys(OmegaConf.create(ckpt["config"]).algo, cfg.algo, "algo")
        raise ResumeRefused(f"resume={path!r} does not fit this run's networks: {detail}"
                            + (f"; changed since the checkpoint: {', '.join(changed)}" if changed else "")
                            ) from err


def _changed_keys(was: Any, now: Any, prefix: str) -> list[str]:
    """``key=<checkpoint's> -> <this run's>`` for every key of two config nodes that differs."""
    a = OmegaConf.to_container(was, resolve=True)
    b = OmegaConf.to_container(now, resolve=True)
    return [f"{prefix}.{k}={a.get(k)!r} -> {b.get(k)!r}" for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k)]


def _check_video(cfg: DictConfig) -> None:
    """``video=true`` records ``render()`` frames of the final evaluation: the env must draw."""
    from torchfrag.envs.rendering import RenderError, renderable

    if int(cfg.eval_episodes) <= 0:
        raise ValueError("video=true records the final evaluation episodes; set eval_episodes>0"
                         f" (got {cfg.eval_episodes})")
    try:
        renderable(cfg.env.id)
    except RenderError as e:  # refused before training, not after
        raise ValueError(f"video=true: {e}") from e


def _evaluate(cfg: DictConfig, actor: Any, episodes: int, seed: int,
              transform: Any = None, frames: Any = None,
              frame_steps: list | None = None) -> list[float]:
    """Returns of ``episodes`` episodes of the deterministic policy on fresh envs.

    With ``frames`` (anything with ``append``: a list, a :class:`_VideoWriter`),
    env 0's episodes are recorded into it as Gymnasium's ``RecordVideo`` does:
    the ``render()`` frame (``[H, W, 3]`` uint8) after the reset and after
    every step, the terminal one included, so an episode of ``T`` steps adds
    ``T + 1`` frames (``frame_steps`` receives each recorded episode's ``T``).
    Evaluation then runs until env 0 ends an episode (at least one; the
    returns are still those of the first ``episodes`` episodes), so that only
    whole episodes are recorded.

    Kept instead of TorchRL's ``env.rollout``: ``rollout`` runs a fixed number
    of steps or stops at the first ``done`` (``break_when_any_done``), while an
    evaluation needs "until ``episodes`` episodes have ended, whichever envs
    end them" with the pool's same-step auto-reset, and the terminal frame of
    env 0 that the auto-reset would otherwise replace.
    """
    import torch
    from torchrl.envs import TransformedEnv

    from torchfrag.algos.envs import make_env
    from torchfrag.fragments import Act, EpisodeStats

    n = max(1, min(int(cfg.env.eval_envs), episodes))
    env = make_env(cfg.env.id, n, seed=seed, **dict(cfg.env.options))
    if transform is not None:  # e.g. the training env's observation statistics, frozen
        env = TransformedEnv(env, transform)
    pool_env = env  # what renders: the PoolEnv under the transforms
    while isinstance(pool_env, TransformedEnv):
        pool_env = pool_env.base_env
    act = Act(actor, exploration="deterministic")
    stats = EpisodeStats()
    returns: list[float] = []
    started = torch.zeros(n, dtype=torch.bool)
    steps0 = 0  # steps of env 0's current episode
    try:
        if frames is not None:
            # The pool resets a finished env within the step: keep its terminal frame.
            pool_env.pool.keep_final_frames(0)
        carry = env.reset()
        if frames is not None:
            frames.append(pool_env.render(0))
        for _ in range(100_000):
            transition, carry = env.step_and_maybe_reset(act(carry))
            nxt = transition.get("next")
            stats.update(nxt.get("reward").unsqueeze(1), nxt.get("done").unsqueeze(1))
            returns.extend(stats.returns)
            stats.returns, stats.lengths = [], []
            started |= nxt.get("done").reshape(n)
            done0 = bool(nxt.get("done")[0])
            if frames is not None:
                steps0 += 1
                if done0:
                    frames.append(pool_env.render(0, final=True))
                    if frame_steps is not None:
                        frame_steps.append(steps0)
                    steps0 = 0
            if len(returns) >= episodes and (frames is None or done0):
                break
            if frames is not None:
                # Same-step auto-reset: after a done step this is the new episode's start.
                frames.append(pool_env.render(0))
    finally:
        env.close()
    return returns[:episodes]


class _VideoWriter:
    """Streams frames into an MP4 (H.264, imageio-ffmpeg) or, without it, a GIF.

    Frames are written as they come (a MuJoCo episode of 480x480 frames would
    take ~0.7 GB held in memory). H.264's yuv420p needs even sizes: odd ones
    are padded with a black row/column (Atari's 210x160 is even).

    Args:
        stem: Path without suffix; ``.mp4`` or ``.gif`` is appended.
        fps: Frames per second (the env's ``render_fps``).
    """

    def __init__(self, stem: str, fps: int) -> None:
        import importlib.util

        self.mp4 = importlib.util.find_spec("imageio_ffmpeg") is not None
        self.path = stem + (".mp4" if self.mp4 else ".gif")
        self.fps = fps
        self.frames = 0
        self._writer: Any = None
        self._pad: tuple | None = None

    def append(self, frame: Any) -> None:
        import imageio.v2 as imageio
        import numpy as np

        if self._writer is None:
            h, w = frame.shape[:2]
            self._pad = ((0, h % 2), (0, w % 2), (0, 0)) if (h % 2 or w % 2) else None
            if self.mp4:
                self._writer = imageio.get_writer(
                    self.path, fps=self.fps, codec="libx264", pixelformat="yuv420p",
                    macro_block_size=1, ffmpeg_log_level="error")
            else:
                # GIF durations are in 10 ms units; Pillow merges identical
                # consecutive frames into one longer frame.
                self._writer = imageio.get_writer(self.path, mode="I", duration=1000 / self.fps,
                                                  loop=0)
        self._writer.append_data(np.pad(frame, self._pad) if self._pad else frame)
        self.frames += 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


def train(cfg: DictConfig, run_dir: str | None = None) -> dict[str, Any]:
    """Trains as configured; returns the run summary (also written to ``summary.json``).

    Args:
        cfg: A composed config (:func:`compose_config` or Hydra's).
        run_dir: Output folder; Hydra's run folder when ``None``.
    """
    import torch
    from tqdm import tqdm

    from torchfrag.algos import factory_from_config
    from torchfrag.algos.loop import close_loop, env_fragment, eval_policy, training_state
    from torchfrag.graph import capture
    from torchfrag.runtime import run, save_checkpoint
    from torchfrag.runtime.checkpoint import remove_partial_writes
    from torchfrag.train_checkpoints import Cadence, Retention
    from torchfrag.train_loggers import make_logger

    _check(cfg)
    resume_path, ckpt = None, None
    if cfg.resume and _serves_as_worker(cfg):
        # The driver owns the training state and hands it to its workers; the checkpoint lives on
        # the driver's host, so a worker node given the same command line does not look for it.
        logger.info("resume=%s: this node serves as a worker; the driver resumes", cfg.resume)
    elif cfg.resume:
        resume_path, ckpt = _load_resume(cfg)
    if run_dir is None:
        from hydra.core.hydra_config import HydraConfig

        run_dir = HydraConfig.get().runtime.output_dir
    os.makedirs(run_dir, exist_ok=True)
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    remove_partial_writes(ckpt_dir)
    algo = OmegaConf.to_container(cfg.algo, resolve=True)
    if cfg.total_frames is not None:
        algo["total_frames"] = int(cfg.total_frames)
    algo_name = str(algo.get("name") or str(algo.get("_target_", "algo")).rsplit(".", 1)[-1])
    # The algo config names its factory (`_target_`, a user's AlgoFactory subclass) or a shipped
    # algorithm (`name`); the same picklable factory builds the loop here and on any worker.
    factory = factory_from_config(algo, cfg.env.id, seed=int(cfg.seed), env_options=dict(cfg.env.options))
    pcfg = factory.config()
    loop = factory()
    rollout = env_fragment(loop)
    graph = capture(loop)
    if cfg.policy.name != "local":  # a placement the policy refuses: one line, before the listing
        from torchfrag.policies import PolicyError, as_policy

        try:
            as_policy(cfg.policy).place(graph)
        except PolicyError:
            close_loop(loop)
            raise
    iterations = pcfg.iterations
    start = 0
    curve: list[tuple[int, float]] = []
    if ckpt is not None:
        try:
            _load_resume_state(cfg, resume_path, ckpt, loop)
        except ResumeRefused:
            close_loop(loop)
            raise
        torch.set_rng_state(ckpt["rng"])
        start = int(ckpt["iteration"])
        curve = [tuple(x) for x in ckpt.get("curve", [])]
        logger.info("resumed from %s at iteration %d (%d frames)", resume_path, start,
                    rollout.frames)
    logger.info("captured loop:\n%s", graph)
    tlog = make_logger(cfg.logger, run_dir, config=cfg)
    window: deque[float] = deque(maxlen=int(cfg.target_window))
    for _, r in curve[-int(cfg.target_window):]:
        window.append(r)
    final_frames = pcfg.warmup_frames + iterations * pcfg.frames_per_iteration  # warm-up counts
    bar = tqdm(total=final_frames, initial=rollout.frames, unit="frames", unit_scale=True,
               disable=not cfg.progress, dynamic_ncols=True)
    state = {"t0": time.perf_counter(), "f0": rollout.frames, "last": None, "checkpoint": resume_path}
    config_yaml = OmegaConf.to_yaml(cfg, resolve=True)
    cadence = Cadence.from_config(cfg)
    cadence.start(rollout.frames, time.monotonic())
    retention = Retention(keep=int(cfg.checkpoint_keep), keep_best=bool(cfg.checkpoint_keep_best))

    def checkpoint(iteration: int) -> str:
        score = sum(window) / len(window) if window else None  # the mean training return now
        path = os.path.join(ckpt_dir, f"iter_{iteration:06d}.pt")
        payload = {"state": training_state(loop), "rng": torch.get_rng_state(),
                   "iteration": iteration, "curve": [list(c) for c in curve],
                   "config": config_yaml, "train_return": score}
        save_checkpoint(payload, path)
        retention.add(path, score)
        payload["checkpoints"] = retention.index()  # what this run kept, with their returns
        save_checkpoint(payload, os.path.join(ckpt_dir, "latest.pt"))
        cadence.mark(iteration, rollout.frames, time.monotonic())
        state["checkpoint"], state["saved"] = path, iteration
        return path

    def hook(i: int, metrics: Any, g: Any) -> bool:
        frames = rollout.frames
        ep = rollout.stats.pop()
        scalars = {k: float(v) for k, v in metrics.items()}
        if ep:
            curve.append((frames, ep["episode_return"]))
            window.append(ep["episode_return"])
            scalars.update({k: float(v) for k, v in ep.items()})
        elapsed = time.perf_counter() - state["t0"]
        fps = (frames - state["f0"]) / max(elapsed, 1e-9)
        scalars["fps"] = fps
        if tlog is not None:
            for k, v in scalars.items():
                tlog.log_scalar(f"train/{k}", v, step=frames)
        bar.update(frames - bar.n)
        if window:
            bar.set_postfix(ret=f"{sum(window) / len(window):.1f}", fps=f"{fps:.0f}", refresh=False)
        if cadence.due(i + 1, frames, time.monotonic()):
            checkpoint(i + 1)
        state["last"] = i + 1
        if cfg.target_return is not None and len(window) == window.maxlen and \
                sum(window) / len(window) >= float(cfg.target_return):
            logger.info("target return %.1f reached at %d frames", cfg.target_return, frames)
            return True
        return False

    t_start = time.perf_counter()
    try:
        result = run(graph, policy=cfg.policy if cfg.policy.name != "local" else "local",
                     factory=factory, iterations=max(0, iterations - start),
                     hooks=[hook], start=start)
    except KeyboardInterrupt:
        if state["last"] is not None and state.get("saved") != state["last"]:
            # The state as Ctrl-C found it, labelled with the last finished iteration; a failed
            # write leaves the previous checkpoint to resume from.
            with contextlib.suppress(Exception):
                checkpoint(state["last"])
        _log_interrupt(rollout.frames, state["checkpoint"])
        raise
    finally:
        bar.close()
    train_seconds = time.perf_counter() - t_start
    final_iteration = state["last"] if state["last"] is not None else start
    last_ckpt = checkpoint(final_iteration)
    evals: list[float] = []
    video_path, video_frames = None, 0
    frame_steps: list[int] = []  # steps of env 0's recorded episodes
    if cfg.eval_episodes > 0:
        eval_transform = getattr(loop, "eval_transform", None)
        video = None
        if cfg.video:
            from torchfrag.envs.rendering import render_fps

            video = _VideoWriter(os.path.join(run_dir, "eval_video"),
                                 fps=render_fps(cfg.env.id, dict(cfg.env.options)))
        try:
            evals = _evaluate(cfg, eval_policy(loop), int(cfg.eval_episodes),
                              seed=int(cfg.seed) + 10_000,
                              transform=eval_transform() if eval_transform is not None else None,
                              frames=video, frame_steps=frame_steps)
        finally:
            if video is not None:
                video.close()
        if video is not None and video.frames:
            video_path, video_frames = video.path, video.frames
        if tlog is not None:
            tlog.log_scalar("eval/episode_return", sum(evals) / len(evals), step=rollout.frames)
    if tlog is not None:
        tlog.close()  # a W&B run finished, a TensorBoard file complete
    if cfg.plot:
        from torchfrag.train_plot import save_learning_curve

        save_learning_curve(curve, evals, os.path.join(run_dir, "learning_curve.png"),
                            f"{algo_name} on {cfg.env.id} (seed {cfg.seed})", frames=rollout.frames)
    summary = {
        "env": cfg.env.id, "algo": algo_name, "seed": int(cfg.seed),
        "frames": rollout.frames, "iterations": final_iteration,
        "train_seconds": train_seconds,
        "fps": (rollout.frames - state["f0"]) / max(train_seconds, 1e-9),
        "stopped_early": result.stopped_by_hook,
        "train_return": sum(window) / len(window) if window else None,
        "eval_returns": evals,
        "eval_return": sum(evals) / len(evals) if evals else None,
        "checkpoint": last_ckpt, "run_dir": run_dir,
    }
    if cfg.video:
        # video_frames = video_steps + video_episodes: a frame per reset and per step.
        summary["video"] = video_path
        summary["video_frames"] = video_frames
        summary["video_episodes"] = len(frame_steps)
        summary["video_steps"] = sum(frame_steps)
    with open(os.path.join(run_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    logger.info("done: %d frames in %.1fs (%.0f fps), eval return %s", summary["frames"],
                train_seconds, summary["fps"], summary["eval_return"])
    close_loop(loop)
    return summary


#: Whether the user asked for full tracebacks (``HYDRA_FULL_ERROR=1`` or ``-v``); see :func:`main`.
_FULL_ERRORS = {"asked": False, "composed": False}


def _hydra_main(cfg: DictConfig) -> float | None:
    _FULL_ERRORS["composed"] = True
    _restore_full_error_setting()  # composed: errors from here on are Hydra's (or _refuse's) to report
    try:
        _check(cfg)
    except ValueError as err:  # a refused config: one line on stderr, exit status 1, nothing started
        _refuse(err)
    from torchfrag.runtime.checkpoint import CheckpointError

    from torchfrag.policies import PolicyError

    try:
        summary = train(cfg)
    except (ResumeRefused, CheckpointError, PolicyError) as err:  # raised before the first iteration
        _refuse(err)
    return summary["eval_return"]


def _log_interrupt(frames: int, checkpoint: str | None) -> None:
    """The one line a Ctrl-C of training leaves: where it stopped and what to resume from."""
    _INTERRUPT["logged"] = True
    logger.warning("interrupted (Ctrl-C) at %d frames; %s", frames,
                   f"resume={checkpoint} continues from its last checkpoint" if checkpoint
                   else "no checkpoint written yet")


#: Whether :func:`train` already logged the Ctrl-C (:func:`main` logs one otherwise).
_INTERRUPT = {"logged": False}


def _restore_full_error_setting() -> None:
    """Puts ``HYDRA_FULL_ERROR`` back as the user had it (:func:`main` sets it while composing)."""
    if not _FULL_ERRORS["asked"]:
        os.environ.pop("HYDRA_FULL_ERROR", None)


def _refuse(err: Exception) -> None:
    """Exits with status 1 and one line ``torchfrag.train: error: <reason>`` on stderr; with
    ``HYDRA_FULL_ERROR=1`` (or ``-v``) the error propagates with its full traceback."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        raise err
    reason = "; ".join(line.strip() for line in str(err).splitlines() if line.strip())
    raise SystemExit(f"torchfrag.train: error: {reason}") from None


def main() -> None:
    """Console entry point (``torchfrag-train`` / ``python -m torchfrag.train``).

    A refusal or a config Hydra cannot compose ends with one line on stderr and status 1;
    Ctrl-C with one line (where training stopped, what to resume from) and status 130.
    """
    try:
        _main()
    except KeyboardInterrupt:
        # The run's cleanup (workers stopped and reaped, envs closed) already ran on the way
        # out. Exit now: interpreter teardown could otherwise wait on RPC's exit handlers or
        # on threads left blocked by the interrupted start-up. 130 = killed by SIGINT.
        if not _INTERRUPT["logged"]:
            if logging.getLogger().handlers:  # Hydra's logging is set up: console and train.log
                logger.warning("interrupted (Ctrl-C) before training started")
            else:
                os.write(2, b"torchfrag.train: interrupted (Ctrl-C) while starting\n")
        logging.shutdown()
        os._exit(130)


@contextlib.contextmanager
def _sigint_exits() -> Iterator[None]:
    """A Ctrl-C within the block exits at once with one line and status 130, nothing to clean
    up yet: raised as ``KeyboardInterrupt`` inside a native module's import (torch's), it
    crashed the process with SIGSEGV."""
    import signal

    def leave(signum: int, frame: Any) -> None:
        os.write(2, b"torchfrag.train: interrupted (Ctrl-C) while starting\n")
        os._exit(130)

    previous = signal.signal(signal.SIGINT, leave)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _maybe_run_isolated(argv: list[str]) -> None:
    """Runs a one-host distributed run in a network namespace of its own (see
    :mod:`torchfrag.private_net`) and exits with its status; returns to run here otherwise.

    Overrides that do not compose stay here, so that this process reports them in one line.
    """
    from torchfrag.private_net import run_isolated, wants_isolation

    if not wants_isolation(argv):
        return
    if not any(a in ("-m", "--multirun") for a in argv):  # a sweep's values compose per job
        try:
            compose_config([a for a in argv if not a.startswith(("hydra.", "hydra/", "-"))])
        except Exception:  # noqa: BLE001 - reported by the composition below, in one line
            return
    _restore_full_error_setting()  # the child reports as the user asked
    rc = run_isolated(argv)  # passes Ctrl-C on to the run
    if rc is not None:
        raise SystemExit(rc)
    os.environ["HYDRA_FULL_ERROR"] = "1"  # no namespace: composed here, errors come back


def _main() -> None:
    import sys

    import hydra

    for flag in ("-v", "--verbose"):  # full tracebacks for refusals (Hydra has no such flag)
        while flag in sys.argv[1:]:
            sys.argv.remove(flag)
            os.environ["HYDRA_FULL_ERROR"] = "1"
    # Composition errors (unknown option, malformed override, missing `+`, wrong type) come back
    # here as exceptions, to be reported in one line; _hydra_main restores the user's setting.
    _FULL_ERRORS["asked"] = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"
    with _sigint_exits():  # imports torch and the env pool
        register_schemas()
    # tqdm's default lock holds a multiprocessing semaphore, which the os._exit on Ctrl-C
    # would leak (the resource tracker then prints a warning after our one line).
    import threading

    from tqdm import tqdm

    tqdm.set_lock(threading.RLock())
    _maybe_run_isolated(sys.argv[1:])
    try:
        hydra.main(version_base="1.3", config_path=config_dir(), config_name="config")(_hydra_main)()
    except Exception as err:
        _restore_full_error_setting()
        if _FULL_ERRORS["asked"] or _FULL_ERRORS["composed"]:
            raise
        from torchfrag.cli_messages import composition_error_line

        raise SystemExit("torchfrag.train: error: "
                         + composition_error_line(err, sys.argv[1:])) from None


if __name__ == "__main__":
    main()
