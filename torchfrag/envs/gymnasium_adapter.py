"""The pool as a Gymnasium ``VectorEnv``, and registration of every pool env with Gymnasium."""
from __future__ import annotations

import functools
from typing import Any

import gymnasium
import numpy as np
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from torchfrag.envs.pool import EnvPool
from torchfrag.envs.spec import list_envs

NAMESPACE = "torchfrag"


class PoolVectorEnv(VectorEnv):
    """A :class:`~torchfrag.envs.EnvPool` behind Gymnasium's ``VectorEnv`` API.

    Observations are copied out of the pool's reused buffers (``copy=True``)
    so that arrays a user keeps never change; pass ``copy=False`` to get the
    views and save a copy per step. Infos follow Gymnasium's vector
    convention: every key has a boolean mask ``_key``. With
    ``autoreset="same_step"`` finished envs report ``final_obs`` and
    ``final_info`` as Gymnasium's own vector envs do.

    Args:
        env_id: A pool env id.
        num_envs: Number of envs.
        autoreset: ``"next_step"`` (Gymnasium's default) or ``"same_step"``.
        copy: Copy observations out of the pool's buffers.
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

    def __init__(self, env_id: str, num_envs: int = 1, autoreset: str = "next_step",
                 copy: bool = True, **kwargs: Any) -> None:
        kwargs.pop("render_mode", None)
        self.pool = EnvPool(env_id, num_envs=num_envs, autoreset=autoreset, **kwargs)
        self.num_envs = num_envs
        self.copy = copy
        self.single_observation_space = self.pool.observation_space
        self.single_action_space = self.pool.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.metadata = {
            "autoreset_mode": AutoresetMode.SAME_STEP if autoreset == "same_step"
            else AutoresetMode.NEXT_STEP,
        }
        self.spec = None
        self.render_mode = None

    def reset(self, *, seed: int | list[int] | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        if options:
            raise ValueError(f"reset options are not supported by the pool, got {options}")
        if seed is not None:
            self.pool.seed(seed)
        obs, info = self.pool.reset()
        return self._out(obs), self._infos(info, None)

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                          dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.pool.step(actions)
        done = terminated | truncated
        return (self._out(obs), reward.copy(), terminated.copy(), truncated.copy(),
                self._infos(info, done))

    def close_extras(self, **kwargs: Any) -> None:
        self.pool.close()

    def _out(self, obs: np.ndarray) -> np.ndarray:
        return obs.copy() if self.copy else obs

    def _infos(self, info: dict[str, np.ndarray], done: np.ndarray | None) -> dict[str, Any]:
        out: dict[str, Any] = {}
        mask = np.ones(self.num_envs, dtype=bool)
        final_obs = info.pop("final_obs", None)
        for key, value in info.items():
            out[key] = value.copy()
            out[f"_{key}"] = mask
        if final_obs is not None and done is not None and done.any():
            finals = np.full(self.num_envs, None, dtype=object)
            final_info: dict[str, Any] = {}
            for i in np.flatnonzero(done):
                finals[i] = final_obs[i].copy()
            out["final_obs"] = finals
            out["_final_obs"] = done.copy()
            for key, value in info.items():
                final_info[key] = value.copy()
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

    def __init__(self, env_id: str, **kwargs: Any) -> None:
        kwargs.pop("render_mode", None)
        # Gymnasium's TimeLimit wrapper handles the limit for single envs.
        kwargs.setdefault("max_episode_steps", 0)
        self.pool = EnvPool(env_id, num_envs=1, **kwargs)
        self.observation_space = self.pool.observation_space
        self.action_space = self.pool.action_space

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        if options:  # as PoolVectorEnv: the pool takes its options at construction
            raise ValueError(f"reset options are not supported by the pool, got {options}")
        if seed is not None:
            self.pool.seed([seed])
        obs, info = self.pool.reset()
        return obs[0].copy(), {k: v[0].copy() for k, v in info.items()}

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
        return (obs[0].copy(), float(reward[0]), bool(terminated[0]), bool(truncated[0]),
                {k: v[0].copy() for k, v in info.items()})

    def close(self) -> None:
        self.pool.close()


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
        s = env_spec(env_id)
        gymnasium.register(
            id=full,
            entry_point=functools.partial(PoolSingleEnv, env_id),
            vector_entry_point=functools.partial(make_gymnasium, env_id),
            max_episode_steps=s.max_episode_steps or None,
            reward_threshold=s.reward_threshold,
        )
