"""The pool as a ``dm_env.Environment`` (EnvPool's ``make_dm`` face, for dm_env and Acme users).

Every field of a ``dm_env.TimeStep`` is batched over the envs of one call:
``step_type``, ``reward`` and ``discount`` are ``[B]`` arrays, and
``observation`` is a named tuple ``State(env_id, elapsed_step, obs, <infos>)``
of ``[B, ...]`` arrays, as EnvPool's ``make_dm`` gives (``ts.observation.obs``,
``ts.observation.env_id``). The pool runs with next-step auto-reset, dm_env's
own convention: the step after a ``LAST`` is the new episode's ``FIRST``, with
reward 0 and discount 1, and its action is ignored. ``discount`` is 0 on a
``LAST`` that terminated and 1 on one that was truncated (time limit).

DeepMind Control Suite ids (``CheetahRun-v1``, ...) give dm_control's own
observation instead: an ``OrderedDict`` with its keys, in its order, each a
float64 ``[B, *shape]`` array (``observation_spec()`` is dm_control's, one
env's shapes); the env ids and infos of the last time step are then
:attr:`PoolDmEnv.last_info`. ``named_observations=False`` keeps EnvPool's
``State`` tuple for them too.

``dm-env`` is optional (``pip install dm-env``); it is imported when a dm env is
made, with a clear error where it is missing.

Example:
    >>> import numpy as np
    >>> from torchfrag.envs import make_dm
    >>> env = make_dm("CartPole-v1", num_envs=2, seed=0)
    >>> ts = env.reset()
    >>> ts.step_type.tolist(), ts.observation.obs.shape
    ([0, 0], (2, 4))
    >>> ts = env.step(np.ones(2, dtype=np.int64))
    >>> ts.step_type.tolist(), ts.discount.tolist()
    ([1, 1], [1.0, 1.0])
    >>> env.close()
"""
from __future__ import annotations

import collections
from typing import Any

import numpy as np
from gymnasium import spaces

from torchfrag.envs import dmc_observations
from torchfrag.envs.pool import EnvPool

__all__ = ["PoolDmEnv", "make_dm"]


def _dm_env() -> Any:
    try:
        import dm_env
    except ImportError as err:  # optional dependency
        raise ImportError("make_dm needs the dm-env package: pip install dm-env") from err
    return dm_env


def _array_spec(space: spaces.Space, name: str) -> Any:
    """A ``dm_env.specs`` array for one env's Gymnasium space."""
    specs = _dm_env().specs
    if isinstance(space, spaces.Discrete):
        return specs.DiscreteArray(int(space.n), dtype=space.dtype, name=name)
    if isinstance(space, spaces.Box):
        return specs.BoundedArray(space.shape, space.dtype, space.low, space.high, name=name)
    raise TypeError(f"no dm_env spec for the space {space}")


class PoolDmEnv:
    """A :class:`~torchfrag.envs.EnvPool` behind dm_env's ``Environment`` API, batched.

    Sync: :meth:`reset`, :meth:`step`. Async (``batch_size < num_envs``):
    :meth:`async_reset`, :meth:`send` and :meth:`recv`, whose time steps hold
    the ``batch_size`` envs that finished first (``observation.env_id``).

    Args:
        env_id: A pool env id.
        num_envs: Number of envs.
        named_observations: dm_control's ``OrderedDict`` observations (DMC ids
            only). Default: on for DMC ids, off for the others.
        **kwargs: Passed to :class:`~torchfrag.envs.EnvPool` (``seed``,
            ``num_threads``, ``batch_size``, env options); ``autoreset`` is
            dm_env's next-step rule and cannot be changed.

    Example:
        >>> from torchfrag.envs import make_dm
        >>> env = make_dm("WalkerWalk-v1", num_envs=2, seed=0)
        >>> list(env.observation_spec()), env.observation_spec()["height"].shape
        (['orientations', 'height', 'velocity'], ())
        >>> ts = env.reset()
        >>> ts.observation["orientations"].shape, env.last_info["env_id"].tolist()
        ((2, 14), [0, 1])
        >>> env.close()
    """

    def __init__(self, env_id: str, num_envs: int = 1, *,
                 named_observations: bool | None = None, **kwargs: Any) -> None:
        dm_env = _dm_env()
        if named_observations is None:
            named_observations = dmc_observations.is_dmc(env_id)
        #: dm_control's (key, shape) pairs when observations are its OrderedDict, else None.
        named = dmc_observations.check_named(env_id, named_observations)
        self._keys = dmc_observations.observation_keys(env_id) if named else None
        if kwargs.get("autoreset", "next_step") != "next_step":
            raise ValueError(f"make_dm: autoreset={kwargs['autoreset']!r} is not supported: dm_env"
                             " time steps follow next-step auto-reset (FIRST after LAST)")
        kwargs.pop("autoreset", None)
        self.pool = EnvPool(env_id, num_envs=num_envs, autoreset="next_step", **kwargs)
        self.num_envs = num_envs
        self._info_names = [k for k in self.pool.spec.infos if k not in ("env_id", "elapsed_step")]
        self._state = collections.namedtuple(
            "State", ["env_id", "elapsed_step", "obs", *self._info_names])
        self._types = dm_env.StepType
        #: ``env_id``, ``elapsed_step`` and the env infos (``[B]`` arrays) of the last time
        #: step; with named observations the only place the async API's env ids appear.
        self.last_info: dict[str, np.ndarray] = {}

    # -- dm_env.Environment --------------------------------------------------------------
    def reset(self) -> Any:
        """Resets every env; returns ``FIRST`` time steps (reward 0, discount 1)."""
        obs, info = self.pool.reset()
        return self._timestep(obs, np.zeros(len(obs)), np.zeros(len(obs), bool),
                              np.zeros(len(obs), bool), info)

    def step(self, action: Any) -> Any:
        """Steps every env with ``action`` (one row per env)."""
        return self._timestep(*self.pool.step(action))

    # -- async ---------------------------------------------------------------------------
    def async_reset(self) -> None:
        """Starts resetting every env; the results arrive through :meth:`recv`."""
        self.pool.async_reset()

    def send(self, action: Any, env_id: Any = None) -> None:
        """Starts stepping the envs ``env_id`` (all by default) with ``action``."""
        self.pool.send(action, env_id)

    def recv(self, timeout: float | None = None) -> Any:
        """The time steps of the first ``batch_size`` envs to finish."""
        return self._timestep(*self.pool.recv(timeout=timeout))

    # -- specs ---------------------------------------------------------------------------
    def observation_spec(self) -> Any:
        """``State`` of array specs (one env's shapes), or dm_control's ``OrderedDict`` of them."""
        specs = _dm_env().specs
        if self._keys is not None:
            return collections.OrderedDict(
                (k, specs.Array(shape, np.float64, name=k)) for k, shape in self._keys)
        infos = self.pool.spec.infos
        return self._state(
            env_id=specs.Array((), np.int64, name="env_id"),
            elapsed_step=specs.Array((), np.int64, name="elapsed_step"),
            obs=_array_spec(self.pool.observation_space, "obs"),
            **{k: specs.Array(tuple(infos[k].shape), np.dtype(infos[k].dtype), name=k)
               for k in self._info_names})

    def action_spec(self) -> Any:
        """``DiscreteArray`` or ``BoundedArray`` of one env's action."""
        return _array_spec(self.pool.action_space, "action")

    def reward_spec(self) -> Any:
        """Scalar float reward."""
        return _dm_env().specs.Array((), np.float64, name="reward")

    def discount_spec(self) -> Any:
        """Scalar discount in [0, 1]."""
        return _dm_env().specs.BoundedArray((), np.float64, 0.0, 1.0, name="discount")

    def close(self) -> None:
        """Closes the pool."""
        self.pool.close()

    def __enter__(self) -> PoolDmEnv:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- internals -----------------------------------------------------------------------
    def _timestep(self, obs: np.ndarray, reward: np.ndarray, terminated: np.ndarray,
                  truncated: np.ndarray, info: dict[str, np.ndarray]) -> Any:
        # Next-step auto-reset: a row with elapsed_step 0 is a new episode's first observation.
        first = np.asarray(info["elapsed_step"]) == 0
        last = (terminated | truncated) & ~first
        step_type = np.where(first, int(self._types.FIRST),
                             np.where(last, int(self._types.LAST), int(self._types.MID)))
        discount = np.where(terminated & ~first, 0.0, 1.0)
        reward = np.where(first, 0.0, np.asarray(reward, dtype=np.float64))
        self.last_info = {"env_id": np.asarray(info["env_id"]),
                          "elapsed_step": np.asarray(info["elapsed_step"]),
                          **{k: info[k] for k in self._info_names}}
        if self._keys is not None:
            # A copy: the pool reuses its buffers, and dm_control's observations are the
            # caller's to keep.
            observation: Any = dmc_observations.split_observation(self.pool.env_id, obs.copy())
        else:
            observation = self._state(env_id=self.last_info["env_id"],
                                      elapsed_step=self.last_info["elapsed_step"], obs=obs,
                                      **{k: info[k] for k in self._info_names})
        return _dm_env().TimeStep(step_type=step_type.astype(np.int32), reward=reward,
                                  discount=discount, observation=observation)


def make_dm(env_id: str, num_envs: int = 1, **kwargs: Any) -> PoolDmEnv:
    """Returns the pool with dm_env's ``Environment`` API (EnvPool's ``make_dm``).

    Args:
        env_id: A pool env id (see :func:`torchfrag.envs.list_envs`).
        num_envs: Number of envs.
        **kwargs: ``seed``, ``num_threads``, ``batch_size`` and env options, as for
            :func:`torchfrag.envs.make`.

    Example:
        >>> from torchfrag.envs import make_dm
        >>> env = make_dm("Pendulum-v1", num_envs=3)
        >>> env.action_spec().shape, env.observation_spec().obs.shape
        ((1,), (3,))
        >>> env.close()
    """
    return PoolDmEnv(env_id, num_envs=num_envs, **kwargs)
