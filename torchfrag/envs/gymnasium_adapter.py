"""The pool as a Gymnasium ``VectorEnv``, and registration of every pool env with Gymnasium."""
from __future__ import annotations

import functools
import logging
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from torchfrag.envs import dmc_observations
from torchfrag.envs.pool import EnvPool
from torchfrag.envs.spec import list_envs

NAMESPACE = "torchfrag"
logger = logging.getLogger(__name__)

# Gymnasium's autoreset modes the pool implements, and the pool's names for them. DISABLED runs
# the pool in next-step mode and checks that the user resets finished envs before stepping them.
_MODES = {AutoresetMode.NEXT_STEP: "next_step", AutoresetMode.SAME_STEP: "same_step",
          AutoresetMode.DISABLED: "disabled"}


class PoolVectorEnv(VectorEnv):
    """A :class:`~torchfrag.envs.EnvPool` behind Gymnasium's ``VectorEnv`` API.

    Observations are copied out of the pool's reused buffers (``copy=True``)
    so that arrays a user keeps never change; pass ``copy=False`` to get the
    views and save a copy per step. Infos follow Gymnasium's vector
    convention: every key has a boolean mask ``_key``. With
    ``autoreset="same_step"`` finished envs report ``final_obs`` and
    ``final_info`` (the terminal step's observation and infos) as Gymnasium's
    own vector envs do. ``reset(options={"reset_mask": mask})`` resets only the
    masked envs.

    Seeding follows one rule on every face: an int seed ``s`` seeds env ``i``
    from ``hash(s, i)``, exactly as ``make(env_id, seed=s)`` does, so
    ``reset(seed=s)`` here, on ``gymnasium.make_vec("torchfrag/...")`` and a
    pool made with ``seed=s`` give the same trajectories. Gymnasium's own
    vector envs derive ``s + i`` instead; the hash keeps the streams of runs
    with adjacent seeds apart (seed 0's env 1 is not seed 1's env 0). A list
    seeds each env explicitly with its own entry.

    Args:
        env_id: A pool env id.
        num_envs: Number of envs.
        autoreset: ``"next_step"`` (Gymnasium's default), ``"same_step"`` or
            ``"disabled"``, as a string or a ``gymnasium.vector.AutoresetMode``.
            Disabled: finished envs stay finished until the user resets them
            (``reset(options={"reset_mask": ...})``); stepping one before that
            raises ``ValueError`` (Gymnasium's own vector envs assert).
        copy: Copy observations out of the pool's buffers.
        named_observations: DeepMind Control Suite ids only: observations as a
            ``Dict`` space of dm_control's keys (in its order, each ``[num_envs,
            *shape]`` float64) instead of the flat vector.
        **kwargs: Passed to :class:`~torchfrag.envs.EnvPool` (``seed``,
            ``num_threads``, env options).

    Example:
        >>> import numpy as np
        >>> from torchfrag.envs import make_gymnasium
        >>> envs = make_gymnasium("CartPole-v1", num_envs=3)
        >>> obs, info = envs.reset(seed=1)
        >>> obs, rew, term, trunc, info = envs.step(envs.action_space.sample())
        >>> obs.shape
        (3, 4)
        >>> envs.close()
    """

    def __init__(self, env_id: str, num_envs: int = 1,
                 autoreset: str | AutoresetMode = "next_step", copy: bool = True,
                 named_observations: bool = False, **kwargs: Any) -> None:
        render_mode, render_kwargs = _render_arguments(env_id, kwargs)
        self._named = dmc_observations.check_named(env_id, named_observations)
        if isinstance(autoreset, AutoresetMode):
            if autoreset not in _MODES:
                raise ValueError(f"autoreset={autoreset} is not supported by the pool; use"
                                 f" one of {list(_MODES)}")
            autoreset = _MODES[autoreset]
        self._disabled = autoreset == "disabled"
        #: Envs that finished under ``autoreset="disabled"`` and wait for a reset.
        self._finished = np.zeros(num_envs, dtype=bool)
        self.pool = EnvPool(env_id, num_envs=num_envs,
                            autoreset="next_step" if self._disabled else autoreset, **kwargs)
        self.num_envs = num_envs
        self.copy = copy
        self.single_observation_space = (dmc_observations.dict_space(env_id) if self._named
                                         else self.pool.observation_space)
        self.single_action_space = self.pool.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        #: Gymnasium's ``AutoresetMode`` of this pool (wrappers such as
        #: TorchRL's ``GymWrapper`` read it).
        self.autoreset_mode = {v: k for k, v in _MODES.items()}[autoreset]
        self.metadata = {"autoreset_mode": self.autoreset_mode,
                         **_render_metadata(self.pool, render_mode, render_kwargs)}
        self.spec = None
        #: ``"rgb_array"`` or ``None`` (Gymnasium's ``render_mode``).
        self.render_mode = render_mode
        self._last_obs: np.ndarray | None = None

    def reset(self, *, seed: int | list[int] | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        options = dict(options or {})
        mask = options.pop("reset_mask", None)
        if options:
            raise ValueError(f"reset options other than 'reset_mask' are not supported by the"
                             f" pool, got {sorted(options)}")
        one_seed = isinstance(seed, (int, np.integer)) and not isinstance(seed, bool)
        if mask is None:
            if seed is not None:
                self.pool.seed(int(seed) if one_seed else list(seed))
            obs, info = self.pool.reset()
            self._finished[:] = False
            self._last_obs = obs.copy()
            return self._out(obs), self._infos(info, None)
        ids = self._reset_ids(mask)
        if one_seed:
            self.pool.seed(int(seed), ids)  # the masked envs get their share of the pool rule
        elif seed is not None:
            seeds = list(seed)
            if len(seeds) != self.num_envs:
                raise ValueError(f"seed: one seed per env ({self.num_envs}), got {len(seeds)}")
            chosen = [(int(i), seeds[i]) for i in ids if seeds[i] is not None]
            if chosen:
                self.pool.seed([s for _, s in chosen], [i for i, _ in chosen])
        obs_r, info_r = self.pool.reset(ids)
        self._finished[ids] = False
        obs = self._last_obs.copy()
        obs[ids] = obs_r
        self._last_obs = obs.copy()
        infos: dict[str, Any] = {}
        for key, value in info_r.items():
            if key == "final_obs" or key.startswith("final_"):
                continue
            full = np.zeros((self.num_envs, *value.shape[1:]), dtype=value.dtype)
            full[ids] = value
            infos[key] = full
            infos[f"_{key}"] = mask.copy()
        return self._out(obs), infos

    def _reset_ids(self, mask: Any) -> np.ndarray:
        """Checks ``options["reset_mask"]`` as Gymnasium's vector envs do; returns the env ids."""
        if not isinstance(mask, np.ndarray):
            raise TypeError(f"options['reset_mask'] must be a numpy array, got {type(mask)}")
        if mask.shape != (self.num_envs,):
            raise ValueError(f"options['reset_mask'] must have shape ({self.num_envs},), got"
                             f" {mask.shape}")
        if mask.dtype != np.bool_:
            raise TypeError(f"options['reset_mask'] must have dtype bool, got {mask.dtype}")
        if not mask.any():
            raise ValueError("options['reset_mask'] must contain at least one True value")
        if self._last_obs is None:
            raise RuntimeError("reset(options={'reset_mask': ...}) needs a full reset() first")
        return np.flatnonzero(mask)

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                          dict[str, Any]]:
        if self._disabled and self._finished.any():
            raise ValueError(
                f"envs {np.flatnonzero(self._finished).tolist()} finished their episode and "
                "autoreset is disabled: reset them first, e.g. "
                "reset(options={'reset_mask': terminated | truncated})")
        obs, reward, terminated, truncated, info = self.pool.step(actions)
        done = terminated | truncated
        if self._disabled:
            self._finished |= done
        if self._last_obs is not None:
            self._last_obs[...] = obs
        return (self._out(obs), reward.copy(), terminated.copy(), truncated.copy(),
                self._infos(info, done))

    def render(self) -> tuple[np.ndarray, ...] | None:
        """The frames of all envs (``[H, W, 3]`` uint8 each), as Gymnasium's vector envs.

        Needs ``render_mode="rgb_array"`` at construction (without it
        Gymnasium's envs warn and return ``None``; so does this one).
        """
        if self.render_mode is None:
            _warn_no_render_mode("make_gymnasium")
            return None
        return tuple(self.pool.render(i) for i in range(self.num_envs))

    def close_extras(self, **kwargs: Any) -> None:
        self.pool.close()

    def _out(self, obs: np.ndarray) -> np.ndarray | dict[str, np.ndarray]:
        obs = obs.copy() if self.copy else obs
        return dmc_observations.split_observation(self.pool.env_id, obs) if self._named else obs

    def _infos(self, info: dict[str, np.ndarray], done: np.ndarray | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        mask = np.ones(self.num_envs, dtype=bool)
        final_obs = info.get("final_obs")
        # Same-step auto-reset: the plain names hold the new episode's infos,
        # "final_<name>" the terminal step's.
        names = [k for k in info if k != "final_obs" and not (
            k.startswith("final_") and k[len("final_"):] in info)]
        for key in names:
            out[key] = info[key].copy()
            out[f"_{key}"] = mask
        if final_obs is not None and done is not None and done.any():
            # Gymnasium's layout: values of the finished envs, zeros elsewhere.
            rows = np.flatnonzero(done)
            finals = np.full(self.num_envs, None, dtype=object)
            for i in rows:
                finals[i] = final_obs[i].copy()
                if self._named:
                    finals[i] = dmc_observations.split_observation(self.pool.env_id, finals[i])
            out["final_obs"] = finals
            out["_final_obs"] = done.copy()
            final_info: dict[str, Any] = {}
            for key in names:
                src = info.get(f"final_{key}", info[key])
                value = np.zeros_like(src)
                value[rows] = src[rows]
                final_info[key] = value
                final_info[f"_{key}"] = done.copy()
            out["final_info"] = final_info
            out["_final_info"] = done.copy()
        return out


class PoolSingleEnv(gymnasium.Env):
    """One pool env as a plain ``gymnasium.Env`` (what ``gymnasium.make`` returns).

    Example:
        >>> import gymnasium, torchfrag.envs
        >>> env = gymnasium.make("torchfrag/CartPole-v1")
        >>> obs, info = env.reset(seed=0)
        >>> obs.shape
        (4,)
    """

    def __init__(self, env_id: str, named_observations: bool = False, **kwargs: Any) -> None:
        render_mode, render_kwargs = _render_arguments(env_id, kwargs)
        self._named = dmc_observations.check_named(env_id, named_observations)
        _frameskip_option(env_id, kwargs)
        # Gymnasium's TimeLimit wrapper handles the limit for single envs, except
        # where the limit is part of the dynamics (MiniGrid's reward divides by its
        # max_steps): there the pool keeps it and truncates at the wrapper's step.
        if not env_id.startswith("MiniGrid-"):
            kwargs.setdefault("max_episode_steps", 0)
        self.pool = EnvPool(env_id, num_envs=1, **kwargs)
        self.observation_space = (dmc_observations.dict_space(env_id) if self._named
                                  else self.pool.observation_space)
        self.action_space = self.pool.action_space
        self.metadata = _render_metadata(self.pool, render_mode, render_kwargs)
        self.render_mode = render_mode

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if options:  # as PoolVectorEnv: the pool takes its options at construction
            raise ValueError(f"reset options are not supported by the pool, got {options}")
        if seed is not None:
            self.pool.seed([seed])
        obs, info = self.pool.reset()
        return self._one(obs), {k: v[0].copy() for k, v in info.items()}

    def step(self, action: Any):
        if self.pool.spec.action_space.shape:
            act = np.asarray(action)[None]
        else:
            # int(1.7) or int("1") would quietly pick action 1: only integers are actions.
            a = np.asarray(action)
            if a.shape != () or a.dtype.kind not in "iu" or isinstance(action, (bool, np.bool_)):
                raise TypeError(f"{self.pool.env_id}: a discrete action must be one integer in "
                                f"[0, {self.action_space.n}), got {action!r}")
            act = a.astype(np.int64)[None]
        obs, reward, terminated, truncated, info = self.pool.step(act)
        return (self._one(obs), float(reward[0]), bool(terminated[0]), bool(truncated[0]),
                {k: v[0].copy() for k, v in info.items()})

    def _one(self, obs: np.ndarray) -> np.ndarray | dict[str, np.ndarray]:
        """The env's observation (a copy), split into dm_control's keys if asked."""
        one = obs[0].copy()
        return dmc_observations.split_observation(self.pool.env_id, one) if self._named else one

    def render(self) -> np.ndarray | None:
        """The env's frame (``[H, W, 3]`` uint8) under ``render_mode="rgb_array"``."""
        if self.render_mode is None:
            _warn_no_render_mode("gymnasium.make")
            return None
        return self.pool.render(0)

    def close(self) -> None:
        self.pool.close()


def _frameskip_option(env_id: str, kwargs: dict[str, Any]) -> None:
    """Gymnasium's ``frameskip`` keyword (TorchRL's ``GymEnv`` always passes it).

    Atari: the pool's ``frame_skip`` option, as for ALE's own envs. Other
    envs: ``frameskip=1`` means nothing to do; any other value is the
    ``TypeError`` an env without the keyword raises, on which TorchRL's
    ``GymEnv`` skips frames itself.
    """
    from torchfrag.envs.spec import spec as env_spec

    if "frameskip" not in kwargs:
        return
    value = kwargs.pop("frameskip")
    if "frame_skip" in env_spec(env_id).options:
        kwargs.setdefault("frame_skip", value)
    elif value != 1:
        raise TypeError(f"PoolSingleEnv.__init__() got an unexpected keyword argument"
                        f" 'frameskip' ({env_id} has no frame skip option)")


def _render_arguments(env_id: str, kwargs: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """Takes ``render_mode`` (checked) and MuJoCo's rendering keywords out of ``kwargs``."""
    from torchfrag.envs.rendering import MUJOCO_RENDER_KWARGS, check_render_mode

    render_mode = kwargs.pop("render_mode", None)
    check_render_mode(env_id, render_mode)
    declared = _declared_options(env_id)
    render_kwargs = {k: kwargs.pop(k) for k in list(kwargs)
                     if k in MUJOCO_RENDER_KWARGS and k not in declared}
    if render_kwargs and render_mode is None:
        raise ValueError(f"{env_id}: rendering arguments {sorted(render_kwargs)} need"
                         " render_mode='rgb_array'")
    return render_mode, render_kwargs


def _declared_options(env_id: str) -> set[str]:
    """Names of the options ``env_id`` declares."""
    from torchfrag.envs.spec import spec as env_spec

    return set(env_spec(env_id).options)


def _render_metadata(pool: EnvPool, render_mode: str | None,
                     render_kwargs: dict[str, Any]) -> dict[str, Any]:
    """Gymnasium's ``render_modes``/``render_fps`` metadata; sets up the pool's renderer."""
    from torchfrag.envs.rendering import RENDER_MODES, render_fps

    if render_mode is None:
        return {"render_modes": list(RENDER_MODES)}
    try:
        pool.configure_render(**render_kwargs)
        fps = render_fps(pool.env_id, pool.options)
    except Exception:
        pool.close()
        raise
    return {"render_modes": list(RENDER_MODES), "render_fps": fps}


def _warn_no_render_mode(maker: str) -> None:
    gymnasium.logger.warn(
        "You are calling render method without specifying any render mode. You can specify the"
        f" render_mode at initialization, e.g. {maker}(..., render_mode='rgb_array')")


def make_gymnasium(env_id: str, num_envs: int = 1, **options: Any) -> PoolVectorEnv:
    """Returns the pool as a ``gymnasium.vector.VectorEnv``.

    Args:
        env_id: A pool env id (with or without the ``torchfrag/`` prefix).
        num_envs: Number of envs.
        **options: ``seed``, ``num_threads``, ``autoreset``, ``copy`` and env options.

    Example:
        >>> from torchfrag.envs import make_gymnasium
        >>> envs = make_gymnasium("Pendulum-v1", num_envs=2)
        >>> envs.single_action_space.shape
        (1,)
    """
    if env_id.startswith(f"{NAMESPACE}/"):
        env_id = env_id[len(NAMESPACE) + 1:]
    if "autoreset_mode" in options:  # Gymnasium's name for it
        if "autoreset" in options:
            raise ValueError("pass autoreset or autoreset_mode, not both")
        options["autoreset"] = options.pop("autoreset_mode")
    return PoolVectorEnv(env_id, num_envs=num_envs, **options)


def register_gymnasium_envs() -> None:
    """Registers every pool env as ``torchfrag/<EnvId>`` (single and vector entry points).

    Called on ``import torchfrag.envs``; afterwards
    ``gymnasium.make_vec("torchfrag/CartPole-v1", num_envs=8,
    vectorization_mode="vector_entry_point")`` builds a pool.
    """
    from torchfrag.envs.spec import spec as env_spec

    for env_id in list_envs():
        full = f"{NAMESPACE}/{env_id}"
        if full in gymnasium.registry:
            continue
        try:
            if dmc_observations.is_dmc(env_id):
                # A DMC spec compiles the task's model (0.25-0.9 s each); every suite task
                # has dm_control's 1000-step limit and no threshold (tests/test_dmc.py checks).
                limits = {"max_episode_steps": dmc_observations.DMC_STEP_LIMIT, "reward_threshold": None}
            else:
                s = env_spec(env_id)
                limits = {"max_episode_steps": s.max_episode_steps or None,
                          "reward_threshold": s.reward_threshold}
        except ValueError as err:
            # An optional family whose files are absent (DMC without the dmc extra): the
            # id stays registered, so making it raises that same clear error, and
            # `import torchfrag.envs` keeps working without the extra.
            logger.debug("%s registered without its limits: %s", full, err)
            limits = {}
        gymnasium.register(
            id=full,
            entry_point=functools.partial(PoolSingleEnv, env_id),
            vector_entry_point=functools.partial(make_gymnasium, env_id),
            **limits,
        )
