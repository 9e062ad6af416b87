"""Env specs: spaces, infos and options of an env id, without building envs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces

from torchfrag._native import C


@dataclass(frozen=True)
class OptionInfo:
    """One option an env id accepts.

    Attributes:
        name: Option name, passed as a keyword to :func:`torchfrag.envs.make`.
        type: ``"float"``, ``"int"``, ``"bool"`` or ``"str"``.
        default: Value used when the option is not given.
        per_env: Whether a sequence with one value per env is accepted
            (domain randomisation of physical parameters).
        doc: What the option does.
    """

    name: str
    type: str
    default: Any
    per_env: bool
    doc: str


@dataclass(frozen=True)
class ArrayInfo:
    """dtype and per-env shape of one output array (observation or info)."""

    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    low: np.ndarray
    high: np.ndarray


@dataclass(frozen=True)
class EnvSpec:
    """Everything known about an env id before any env is built.

    Attributes:
        id: The env id, e.g. ``"CartPole-v1"``.
        observation_space: Space of one env's observation.
        action_space: Space of one env's action.
        infos: Extra per-step arrays an env writes (besides the pool's
            ``env_id`` and ``elapsed_step``), by name.
        options: Accepted options, by name.
        max_episode_steps: Steps after which ``truncated`` is set (0: never).
        reward_threshold: Gymnasium's "solved" threshold, where it has one.
    """

    id: str
    observation_space: spaces.Space
    action_space: spaces.Space
    infos: dict[str, ArrayInfo]
    options: dict[str, OptionInfo] = field(repr=False)
    max_episode_steps: int
    reward_threshold: float | None

    @classmethod
    def from_native(cls, raw: dict) -> EnvSpec:
        """Builds the spec from the dict ``torchfrag._C`` returns."""
        obs = _array_info(raw["obs"])
        act = raw["action"]
        if act["discrete"]:
            action_space: spaces.Space = spaces.Discrete(int(act["n"]))
        else:
            shape = tuple(act["shape"])
            action_space = spaces.Box(
                low=_broadcast(act["low"], shape, np.float32),
                high=_broadcast(act["high"], shape, np.float32),
                shape=shape,
                dtype=np.float32,
            )
        if obs.dtype == np.uint8:
            observation_space: spaces.Space = spaces.Box(
                low=obs.low.astype(np.uint8), high=obs.high.astype(np.uint8), shape=obs.shape,
                dtype=np.uint8)
        elif obs.dtype.kind == "i" and np.isfinite(obs.low).all() and np.isfinite(obs.high).all():
            observation_space = _discrete_space(obs)
        else:
            observation_space = spaces.Box(
                low=obs.low, high=obs.high, shape=obs.shape, dtype=obs.dtype)
        threshold = raw["reward_threshold"]
        return cls(
            id=raw["id"],
            observation_space=observation_space,
            action_space=action_space,
            infos={i["name"]: _array_info(i) for i in raw["infos"]},
            options={o["name"]: OptionInfo(**o) for o in raw["options"]},
            max_episode_steps=int(raw["max_episode_steps"]),
            reward_threshold=None if not np.isfinite(threshold) else float(threshold),
        )


def _discrete_space(obs: ArrayInfo) -> spaces.Space:
    """Integer observations with finite bounds are categorical, as in Gymnasium.

    A scalar is ``Discrete`` (FrozenLake's cell); a vector is ``MultiDiscrete``
    (Blackjack's Tuple of three Discretes, one entry each: a tuple space
    would not batch into one array).
    """
    low = obs.low.astype(np.int64)
    n = obs.high.astype(np.int64) - low + 1
    if obs.shape == ():
        return spaces.Discrete(int(n), start=int(low))
    return spaces.MultiDiscrete(n, dtype=np.int64, start=low)


def _broadcast(values: list[float], shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 1:
        arr = np.full(shape, arr.item())
    return arr.reshape(shape).astype(dtype)


def _array_info(raw: dict) -> ArrayInfo:
    shape = tuple(raw["shape"])
    dtype = np.dtype(raw["dtype"])
    if dtype == np.uint8:
        low = np.zeros(shape, dtype=np.float64)
        high = np.full(shape, 255.0)
    else:
        low = _broadcast(raw["low"], shape, np.float64)
        high = _broadcast(raw["high"], shape, np.float64)
    return ArrayInfo(raw["name"], dtype, shape, low.astype(dtype) if dtype.kind == "f" else low,
                     high.astype(dtype) if dtype.kind == "f" else high)


def spec(env_id: str, **options: Any) -> EnvSpec:
    """Returns the spec of ``env_id`` under ``options`` without building an env.

    Args:
        env_id: A registered id (see :func:`list_envs`), or Gymnasium's
            ``ALE/<Game>-v5`` (see :mod:`torchfrag.envs.aliases`).
        **options: Options as accepted by :func:`torchfrag.envs.make`; they can
            change shapes (e.g. Atari ``stack_num``).

    Raises:
        ValueError: Unknown id or option (the message lists the valid ones).

    Example:
        >>> from torchfrag.envs import spec
        >>> spec("CartPole-v1").action_space
        Discrete(2)
    """
    from torchfrag.envs.aliases import resolve
    from torchfrag.envs.pool import normalize_options

    env_id, options = resolve(env_id, options)
    return EnvSpec.from_native(C.env_spec(env_id, normalize_options(env_id, options)))


def list_envs() -> list[str]:
    """Returns every env id the pool can build, sorted.

    Example:
        >>> from torchfrag.envs import list_envs
        >>> "CartPole-v1" in list_envs()
        True
    """
    return list(C.list_envs())
