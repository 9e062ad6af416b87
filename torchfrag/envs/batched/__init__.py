"""Torch-native batched envs: Gymnasium's classic-control tasks as tensor code on any device.

Every env of a batch lives in one state tensor on ``device`` and steps with a
few elementwise operations, next to the policy: on an accelerator thousands
of envs step without touching the host. They have :class:`~torchfrag.envs.PoolEnv`'s
TorchRL face, so the :class:`~torchfrag.fragments.Rollout` fragment and the
algorithms use them like the C++ pool.

Example:
    >>> from torchfrag.envs.batched import make, list_envs
    >>> list_envs()
    ['Acrobot-v1', 'CartPole-v1', 'MountainCar-v0', 'MountainCarContinuous-v0', 'Pendulum-v1']
    >>> env = make("Pendulum-v1", num_envs=8, seed=0, g=9.81)
    >>> env.rollout(3, break_when_any_done=False)["next", "reward"].shape
    torch.Size([8, 3, 1])
"""
from __future__ import annotations

from typing import Any

from torchfrag.envs.batched.base import BatchedEnv
from torchfrag.envs.batched.classic import (
    Acrobot,
    CartPole,
    MountainCar,
    MountainCarContinuous,
    Pendulum,
)

__all__ = ["BatchedEnv", "CartPole", "Acrobot", "MountainCar", "MountainCarContinuous",
           "Pendulum", "ENVS", "MUJOCO_WARP_IDS", "make", "list_envs"]

#: Ids served by MuJoCo Warp (:mod:`torchfrag.envs.batched.mjwarp`, optional extra).
MUJOCO_WARP_IDS = ("HalfCheetah-v5", "Hopper-v5", "Ant-v5")

#: Env id -> class.
ENVS: dict[str, type[BatchedEnv]] = {
    cls.env_id: cls for cls in (CartPole, Acrobot, MountainCar, MountainCarContinuous, Pendulum)
}


def list_envs() -> list[str]:
    """Ids of the torch-native envs (sorted)."""
    return sorted(ENVS)


def make(env_id: str, num_envs: int = 1, **kwargs: Any) -> BatchedEnv:
    """Builds the torch-native env ``env_id`` (arguments as :class:`BatchedEnv`).

    ``"HalfCheetah-v5"``, ``"Hopper-v5"`` and ``"Ant-v5"`` build the MuJoCo Warp
    envs of :mod:`torchfrag.envs.batched.mjwarp` (the optional ``[gpu]`` extra),
    imported only then.

    Raises:
        ValueError: ``env_id`` has no torch-native implementation.
    """
    if env_id in MUJOCO_WARP_IDS:
        from torchfrag.envs.batched.mjwarp import WARP_ENVS

        return WARP_ENVS[env_id](num_envs, **kwargs)
    try:
        cls = ENVS[env_id]
    except KeyError:
        raise ValueError(f"no torch-native env {env_id!r}; available: {list_envs()} and, on "
                         f"MuJoCo Warp, {list(MUJOCO_WARP_IDS)}") from None
    return cls(num_envs, **kwargs)
