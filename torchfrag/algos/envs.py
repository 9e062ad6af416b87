"""How the algorithms make their training envs: float32 observations, optional normalisation.

Every algorithm, locally and on a worker's slice of envs, trains on
:func:`make_env`: a :class:`~torchfrag.envs.PoolEnv` whose float64
observations (MuJoCo) are cast to float32, with optional running observation
normalisation.

Example:
    >>> from torchfrag.algos.envs import make_env
    >>> make_env("HalfCheetah-v5", 2).observation_spec["observation"].dtype
    torch.float32
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torchrl.envs import EnvBase

__all__ = ["frozen_obs_norm", "is_discrete", "is_image", "make_env"]


def make_env(env_id: str, num_envs: int, seed: int | Sequence[int] = 0, *, obs_norm: bool = False,
             **options: Any) -> EnvBase:
    """A :class:`~torchfrag.envs.PoolEnv` with only the observation exposed, float32 observations.

    Float64 observations (MuJoCo) are cast to float32 for the networks with
    TorchRL's ``DoubleToFloat`` transform.

    Args:
        env_id: A registered env id.
        num_envs: Envs in the pool.
        seed: One seed for the pool, or one per env.
        obs_norm: Append running observation normalisation (``VecNormV2`` over
            all envs, decay 0.99999) and a clip to [-10, 10].
        **options: Env options for :func:`torchfrag.envs.make`.

    Example:
        >>> from torchfrag.algos.envs import make_env
        >>> make_env("CartPole-v1", 2).batch_size
        torch.Size([2])
        >>> make_env("Pendulum-v1", 2, obs_norm=True).transform[0].__class__.__name__
        'VecNormV2'
    """
    from torchrl.envs import Compose, DoubleToFloat, TransformedEnv, VecNormV2

    from torchfrag.envs import PoolEnv

    env = PoolEnv(env_id, num_envs=num_envs, seed=seed, info_keys=[], **options)
    # What it was made from, so that a loop can rebuild the same envs as another source
    # (PPO's collector="pool" replaces this env by a PoolCollector over the same envs).
    env.pool_seed = list(seed) if isinstance(seed, Sequence) else int(seed)
    env.pool_options = dict(options)
    transforms = []
    if env.observation_spec["observation"].dtype == torch.float64:
        transforms.append(DoubleToFloat(in_keys=["observation"]))
    if obs_norm:
        transforms += [VecNormV2(in_keys=["observation"], decay=0.99999, eps=1e-8,
                                 reduce_batch_dims=True),
                       _obs_clip()]
    return TransformedEnv(env, Compose(*transforms)) if transforms else env


def _obs_clip() -> Any:
    """The clip that follows observation normalisation, in training and evaluation envs alike."""
    from torchrl.envs import ClipTransform

    return ClipTransform(in_keys=["observation"], low=-10.0, high=10.0)


def frozen_obs_norm(env: EnvBase) -> Any:
    """A frozen copy of ``env``'s observation normalisation (for evaluation envs), or ``None``.

    Example:
        >>> from torchfrag.algos.envs import frozen_obs_norm, make_env
        >>> frozen_obs_norm(make_env("CartPole-v1", 2)) is None
        True
        >>> type(frozen_obs_norm(make_env("CartPole-v1", 2, obs_norm=True))).__name__
        'Compose'
    """
    from torchrl.envs import Compose, VecNormV2

    for t in getattr(env, "transform", []) or []:
        if isinstance(t, VecNormV2):
            return Compose(t.frozen_copy(), _obs_clip())
    return None


def is_discrete(env: EnvBase) -> bool:
    """Whether ``env`` has a discrete (categorical) action space."""
    spec = env.action_spec_unbatched
    return spec.dtype in (torch.int64, torch.int32) or hasattr(spec.space, "n")


def is_image(env: EnvBase) -> bool:
    """Whether the observation is an image stack (``[C, H, W]`` per env)."""
    return env.observation_spec["observation"].ndim - len(env.batch_size) == 3
