"""dm_control's named observations for the pool's DeepMind Control Suite ids.

The C++ DMC envs write dm_control's ordered observation dict flattened in key
order (what ``control.flatten_observation`` gives): one float64 vector per
env. This module holds the keys and per-key shapes of every task (dm_control
1.0.50's ``observation_spec()``: scalars have shape ``()``, the manipulator's
``arm_pos`` is ``(8, 2)``) and splits flat batches back into those keys, as
the faces do when asked for named observations
(``PoolEnv(..., named_observations=True)``, ``make_gymnasium(...,
named_observations=True)`` and ``make_dm``).

Example:
    >>> import numpy as np
    >>> from torchfrag.envs.dmc_observations import observation_keys, split_observation
    >>> observation_keys("CheetahRun-v1")
    [('position', (8,)), ('velocity', (9,))]
    >>> parts = split_observation("WalkerWalk-v1", np.zeros((4, 24)))
    >>> {k: v.shape for k, v in parts.items()}
    {'orientations': (4, 14), 'height': (4,), 'velocity': (4, 9)}
"""
from __future__ import annotations

import collections
import math
from typing import TypeVar

import numpy as np
from gymnasium import spaces

__all__ = ["NAMED_OPTION", "check_named", "dict_space", "is_dmc", "observation_keys",
           "observation_size", "split_observation"]

#: The keyword every face takes to expose these keys.
NAMED_OPTION = "named_observations"

Shape = tuple[int, ...]
_Layout = tuple[tuple[str, Shape], ...]

_FINGER = (("position", (4,)), ("velocity", (3,)), ("touch", (2,)))
_HUMANOID = (("joint_angles", (21,)), ("head_height", ()), ("extremities", (12,)),
             ("torso_vertical", (3,)), ("com_velocity", (3,)), ("velocity", (27,)))
_MANIPULATOR = (("arm_pos", (8, 2)), ("arm_vel", (8,)), ("touch", (5,)), ("hand_pos", (4,)),
                ("object_pos", (4,)), ("object_vel", (3,)), ("target_pos", (4,)))
_WALKER = (("orientations", (14,)), ("height", ()), ("velocity", (9,)))
_CARTPOLE = (("position", (3,)), ("velocity", (2,)))
_HOPPER = (("position", (6,)), ("velocity", (7,)), ("touch", (2,)))
_POINT_MASS = (("position", (2,)), ("velocity", (2,)))
_REACHER = (("position", (2,)), ("to_target", (2,)), ("velocity", (2,)))
_ACROBOT = (("orientations", (4,)), ("velocity", (2,)))

# Id prefix (domain and task, EnvPool's spelling) -> dm_control's ordered keys and shapes.
_LAYOUTS: dict[str, _Layout] = {
    "AcrobotSwingup": _ACROBOT,
    "AcrobotSwingupSparse": _ACROBOT,
    "BallInCupCatch": (("position", (4,)), ("velocity", (4,))),
    "CartpoleBalance": _CARTPOLE,
    "CartpoleBalanceSparse": _CARTPOLE,
    "CartpoleSwingup": _CARTPOLE,
    "CartpoleSwingupSparse": _CARTPOLE,
    "CheetahRun": (("position", (8,)), ("velocity", (9,))),
    "FingerSpin": _FINGER,
    "FingerTurnEasy": (*_FINGER, ("target_position", (2,)), ("dist_to_target", ())),
    "FingerTurnHard": (*_FINGER, ("target_position", (2,)), ("dist_to_target", ())),
    "FishSwim": (("joint_angles", (7,)), ("upright", ()), ("target", (3,)),
                 ("velocity", (13,))),
    "FishUpright": (("joint_angles", (7,)), ("upright", ()), ("velocity", (13,))),
    "HopperHop": _HOPPER,
    "HopperStand": _HOPPER,
    "HumanoidRun": _HUMANOID,
    "HumanoidStand": _HUMANOID,
    "HumanoidWalk": _HUMANOID,
    "ManipulatorBringBall": _MANIPULATOR,
    "ManipulatorBringPeg": _MANIPULATOR,
    "ManipulatorInsertBall": _MANIPULATOR,
    "ManipulatorInsertPeg": _MANIPULATOR,
    "PendulumSwingup": (("orientation", (2,)), ("velocity", (1,))),
    "PointMassEasy": _POINT_MASS,
    "PointMassHard": _POINT_MASS,
    "ReacherEasy": _REACHER,
    "ReacherHard": _REACHER,
    "SwimmerSwimmer6": (("joints", (5,)), ("to_target", (2,)), ("body_velocities", (18,))),
    "SwimmerSwimmer15": (("joints", (14,)), ("to_target", (2,)), ("body_velocities", (45,))),
    "WalkerRun": _WALKER,
    "WalkerStand": _WALKER,
    "WalkerWalk": _WALKER,
}

_Array = TypeVar("_Array")


def _layout(env_id: str) -> _Layout | None:
    base, sep, version = env_id.rpartition("-")
    if not sep or version != "v1":
        return None
    return _LAYOUTS.get(base)


#: Steps per episode of every suite task (dm_control's time limit over its control timestep).
DMC_STEP_LIMIT = 1000


def is_dmc(env_id: str) -> bool:
    """Whether ``env_id`` is one of the pool's DeepMind Control Suite tasks.

    Example:
        >>> from torchfrag.envs.dmc_observations import is_dmc
        >>> is_dmc("HopperHop-v1"), is_dmc("Hopper-v5")
        (True, False)
    """
    return _layout(env_id) is not None


def observation_keys(env_id: str) -> list[tuple[str, Shape]]:
    """dm_control's observation keys of a DMC id, in order, with one env's shape of each.

    Args:
        env_id: A DMC id of the pool, e.g. ``"CheetahRun-v1"``.

    Returns:
        ``[(key, shape), ...]`` in dm_control's ``observation_spec()`` order.

    Raises:
        ValueError: ``env_id`` is not a DMC id (only those have named observations).

    Example:
        >>> from torchfrag.envs.dmc_observations import observation_keys
        >>> observation_keys("PendulumSwingup-v1")
        [('orientation', (2,)), ('velocity', (1,))]
    """
    layout = _layout(env_id)
    if layout is None:
        raise ValueError(f"{env_id!r} has no named observations: {NAMED_OPTION}=True is for the "
                         "DeepMind Control Suite ids (CheetahRun-v1, WalkerWalk-v1, ...), whose "
                         "observation is dm_control's ordered dict flattened")
    return list(layout)


def observation_size(env_id: str) -> int:
    """Length of the flat observation of a DMC id (the sum of its keys' sizes).

    Example:
        >>> from torchfrag.envs.dmc_observations import observation_size
        >>> observation_size("ManipulatorBringBall-v1")
        44
    """
    return sum(math.prod(shape) for _, shape in observation_keys(env_id))


def split_observation(env_id: str, flat: _Array, scalar_shape: Shape = ()
                      ) -> collections.OrderedDict[str, _Array]:
    """Splits flat observations ``[..., size]`` into dm_control's keys (views, no copy).

    Args:
        env_id: A DMC id of the pool.
        flat: NumPy array or torch tensor whose last dimension is the flat observation.
        scalar_shape: Shape given to scalar keys: ``()`` (dm_control's) or ``(1,)``
            (TorchRL's ``DMControlEnv``, which gives scalars one dimension).

    Returns:
        An ordered dict ``key -> [..., *shape]`` in dm_control's order.

    Raises:
        ValueError: ``flat``'s last dimension is not the id's observation size.

    Example:
        >>> import numpy as np
        >>> from torchfrag.envs.dmc_observations import split_observation
        >>> split_observation("FishUpright-v1", np.arange(21.0))["upright"]
        array(7.)
    """
    keys = observation_keys(env_id)
    size = sum(math.prod(shape) for _, shape in keys)
    if flat.shape[-1] != size:
        raise ValueError(f"{env_id}: flat observations have {size} values, got an array of "
                         f"shape {tuple(flat.shape)}")
    lead = tuple(flat.shape[:-1])
    out: collections.OrderedDict[str, _Array] = collections.OrderedDict()
    start = 0
    for key, shape in keys:
        n = math.prod(shape)
        out[key] = flat[..., start:start + n].reshape((*lead, *(shape or scalar_shape)))
        start += n
    return out


def dict_space(env_id: str) -> spaces.Dict:
    """One env's observation as a Gymnasium ``Dict`` of unbounded float64 boxes, in dm_control's order.

    Example:
        >>> from torchfrag.envs.dmc_observations import dict_space
        >>> dict_space("PointMassEasy-v1")["velocity"].shape
        (2,)
    """
    # An OrderedDict: Gymnasium sorts the keys of a plain dict.
    return spaces.Dict(collections.OrderedDict(
        (key, spaces.Box(-np.inf, np.inf, shape, np.float64))
        for key, shape in observation_keys(env_id)))


def check_named(env_id: str, named: object) -> bool:
    """Checks a face's ``named_observations`` argument: a bool, true only for DMC ids.

    Raises:
        TypeError: ``named`` is not a bool.
        ValueError: ``named`` is true for an id without named observations.

    Example:
        >>> from torchfrag.envs.dmc_observations import check_named
        >>> check_named("CheetahRun-v1", True), check_named("CartPole-v1", False)
        (True, False)
    """
    if not isinstance(named, (bool, np.bool_)):
        raise TypeError(f"{NAMED_OPTION} must be True or False, got {named!r}")
    if named:
        observation_keys(env_id)  # its clear error for other ids
    return bool(named)
