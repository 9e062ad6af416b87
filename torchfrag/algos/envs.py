"""How the algorithms make their training envs: float32 observations, optional normalisation.

Every algorithm, locally and on a worker's slice of envs, trains on
:func:`make_env`: a :class:`~torchfrag.envs.PoolEnv` whose float64
observations (MuJoCo) are cast to float32, whose categorical observations
(toy text's cell index, Blackjack's three counts) are one-hot encoded, and whose
MiniGrid grid codes (``[7, 7, 3]`` uint8) become flat float32 vectors, with
optional running observation normalisation.

Example:
    >>> from torchfrag.algos.envs import make_env
    >>> make_env("HalfCheetah-v5", 2).observation_spec["observation"].dtype
    torch.float32
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torchrl.envs import EnvBase, ObservationTransform

__all__ = ["OneHotObservation", "frozen_obs_norm", "is_discrete", "is_image", "make_env"]


def make_env(env_id: str, num_envs: int, seed: int | Sequence[int] = 0, *, obs_norm: bool = False,
             **options: Any) -> EnvBase:
    """A :class:`~torchfrag.envs.PoolEnv` with only the observation exposed, float32 observations.

    Discrete actions are indices (``Categorical``,
    ``categorical_action_encoding=True``): what the algorithms' actors write.

    Float64 observations (MuJoCo) are cast to float32 for the networks: by
    the pool env itself (``PoolEnv(observation_dtype=torch.float32)``, the
    same values and spec as TorchRL's ``DoubleToFloat`` at half its step
    cost), or, with ``obs_norm``, by a ``DoubleToFloat`` transform ahead of
    the normalisation (so the transforms' state-dict layout, which
    checkpoints hold, stays what it was); categorical ones (``Categorical`` or
    ``MultiCategorical`` specs) become float32 one-hot vectors
    (:class:`OneHotObservation`): an index is a name, not a magnitude.

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
    from torchrl.envs import (
        Compose,
        DoubleToFloat,
        DTypeCastTransform,
        FlattenObservation,
        PermuteTransform,
        TransformedEnv,
        VecNormV2,
    )

    from torchfrag.envs import PoolEnv
    from torchfrag.envs import spec as env_spec

    # float64 (MuJoCo) observations cast by the pool env where no other transform follows.
    float64 = getattr(env_spec(env_id, **options).observation_space, "dtype", None) == np.float64
    # Index actions: what the algorithms' actors write and PoolCollector's fast path sends.
    env = PoolEnv(env_id, num_envs=num_envs, seed=seed, info_keys=[],
                  categorical_action_encoding=True, env_options=options,
                  observation_dtype=torch.float32 if float64 and not obs_norm else None)
    # What it was made from, so that a loop can rebuild the same envs as another source
    # (PPO's collector="pool" replaces this env by a PoolCollector over the same envs).
    env.pool_seed = list(seed) if isinstance(seed, Sequence) else int(seed)
    env.pool_options = dict(options)
    transforms = []
    obs_spec = env.observation_spec["observation"]
    if obs_spec.dtype == torch.float64:
        transforms.append(DoubleToFloat(in_keys=["observation"]))
    elif OneHotObservation.applies_to(obs_spec):
        transforms.append(OneHotObservation.for_spec(obs_spec))
    elif _is_grid_code(env_id, obs_spec, len(env.batch_size)):
        # MiniGrid's (object, colour, state) codes per cell: small integers, not
        # pixels, so no CNN and no /255; an MLP reads them as a flat vector.
        transforms += [DTypeCastTransform(torch.uint8, torch.float32, in_keys=["observation"]),
                       FlattenObservation(-3, -1, in_keys=["observation"])]
    elif _is_rgb_picture(obs_spec, len(env.batch_size)):
        # CarRacing's [H, W, 3] picture: channels first for the CNN (which scales by 1/255).
        transforms.append(PermuteTransform([-1, -3, -2], in_keys=["observation"]))
    if obs_norm:
        transforms += [VecNormV2(in_keys=["observation"], decay=0.99999, eps=1e-8,
                                 reduce_batch_dims=True),
                       _obs_clip()]
    return TransformedEnv(env, Compose(*transforms)) if transforms else env


class OneHotObservation(ObservationTransform):
    """Categorical observations as float32 one-hot vectors, one block per entry.

    A ``Categorical(n)`` observation of batch shape ``B`` becomes ``[*B, n]``;
    a ``MultiCategorical(nvec)`` one ``[*B, k]`` becomes ``[*B, sum(nvec)]``,
    the entries' one-hots side by side.

    Args:
        nvec: Categories per entry (one number for a scalar observation).
        scalar: Whether the observation is one index per env (no trailing dim).
        in_keys: Observation keys to encode.

    Example:
        >>> from torchfrag.algos.envs import make_env
        >>> make_env("FrozenLake-v1", 2).observation_spec["observation"].shape
        torch.Size([2, 16])
        >>> make_env("Blackjack-v1", 2).reset()["observation"].shape
        torch.Size([2, 45])
    """

    def __init__(self, nvec: Sequence[int], scalar: bool,
                 in_keys: Sequence[str] = ("observation",)) -> None:
        super().__init__(in_keys=list(in_keys), out_keys=list(in_keys))
        self.nvec = [int(n) for n in nvec]
        self.scalar = scalar
        if scalar and len(self.nvec) != 1:
            raise ValueError(f"a scalar observation has one category count, got {self.nvec}")

    @staticmethod
    def applies_to(spec: Any) -> bool:
        """Whether ``spec`` is a categorical (integer-index) observation spec."""
        from torchrl.data import Categorical, MultiCategorical

        return isinstance(spec, (Categorical, MultiCategorical)) and spec.dtype != torch.bool

    @classmethod
    def for_spec(cls, spec: Any) -> OneHotObservation:
        """The transform for a batched ``Categorical``/``MultiCategorical`` observation spec."""
        from torchrl.data import MultiCategorical

        if isinstance(spec, MultiCategorical):
            nvec = spec.nvec.reshape(-1, spec.shape[-1])[0]
            return cls([int(n) for n in nvec], scalar=False)
        return cls([int(spec.space.n)], scalar=True)

    def _apply_transform(self, obs: torch.Tensor) -> torch.Tensor:
        if self.scalar:
            return torch.nn.functional.one_hot(obs.long(), self.nvec[0]).to(torch.float32)
        blocks = [torch.nn.functional.one_hot(obs[..., k].long(), n)
                  for k, n in enumerate(self.nvec)]
        return torch.cat(blocks, dim=-1).to(torch.float32)

    def _reset(self, tensordict: Any, tensordict_reset: Any) -> Any:
        return self._call(tensordict_reset)

    def transform_observation_spec(self, observation_spec: Any) -> Any:
        from torchrl.data import Bounded

        for key in self.in_keys:
            spec = observation_spec[key]
            lead = spec.shape if self.scalar else spec.shape[:-1]
            observation_spec[key] = Bounded(low=0.0, high=1.0, shape=(*lead, sum(self.nvec)),
                                            dtype=torch.float32, device=spec.device)
        return observation_spec


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


def _is_grid_code(env_id: str, spec: Any, batch_dims: int) -> bool:
    """MiniGrid's ``[7, 7, 3]`` uint8 cell codes (not an RGB picture such as CarRacing's)."""
    return (env_id.startswith("MiniGrid-") and spec.dtype == torch.uint8
            and spec.ndim - batch_dims == 3)


def _is_rgb_picture(spec: Any, batch_dims: int) -> bool:
    """An ``[H, W, 3]`` uint8 RGB picture (CarRacing's), as opposed to ``[C, H, W]`` stacks."""
    return spec.dtype == torch.uint8 and spec.ndim - batch_dims == 3 and spec.shape[-1] == 3


def is_image(env: EnvBase) -> bool:
    """Whether the observation is an image stack (``[C, H, W]`` per env)."""
    return env.observation_spec["observation"].ndim - len(env.batch_size) == 3
