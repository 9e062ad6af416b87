"""Picklable loop factories: how a worker builds its own copy of a loop's fragments.

Under a distributed policy no fragment is ever pickled: every worker calls the
same *factory* and keeps only the fragments placed on it. A factory is any
picklable callable ``factory(env_slice=None) -> nn.Module`` (a module-level
function, a :func:`functools.partial` of one, or a dataclass like
:class:`PPOFactory`). ``env_slice`` tells the factory which envs of the whole
run this worker owns, so that env ``i`` is seeded the same way wherever it runs.

Example:
    >>> from torchfrag.policies.factory import EnvSlice, PPOFactory
    >>> f = PPOFactory("CartPole-v1", {"num_envs": 4, "steps": 4, "minibatch_size": 8})
    >>> loop = f(EnvSlice(offset=2, count=2, total=4))
    >>> loop.env.batch_size
    torch.Size([2])
    >>> loop.close()
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

from torch import nn

logger = logging.getLogger(__name__)

__all__ = ["EnvSlice", "LoopFactory", "PPOFactory", "slice_seeds"]


@dataclass(frozen=True)
class EnvSlice:
    """The envs a worker owns: global env ids ``offset .. offset + count - 1``.

    Attributes:
        offset: Global id of the first env.
        count: Number of envs on this worker.
        total: Envs in the whole run (all workers).
        worker: Index of the worker among the workers of its role.
        rank: Process rank (0: the driver).
    """

    offset: int
    count: int
    total: int
    worker: int = 0
    rank: int = 0


class LoopFactory(Protocol):
    """A picklable callable that builds a loop module, for all envs or one worker's slice."""

    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module: ...


def slice_seeds(seed: int, env_slice: EnvSlice) -> list[int]:
    """Per-env seeds of a slice, equal to those env ``offset + j`` gets in a pool seeded ``seed``.

    Example:
        >>> from torchfrag.policies.factory import EnvSlice, slice_seeds
        >>> from torchfrag.envs.pool import per_env_seeds
        >>> slice_seeds(0, EnvSlice(2, 2, 4)) == per_env_seeds(0, 4)[2:]
        True
    """
    from torchfrag._native import C

    return [C.env_seed(int(seed), i) for i in range(env_slice.offset, env_slice.offset + env_slice.count)]


@dataclass
class PPOFactory:
    """Builds :class:`torchfrag.algos.ppo.PPOLoop` exactly as :func:`~torchfrag.algos.ppo.make_ppo` does.

    With an :class:`EnvSlice`, the env holds only that slice's envs, each seeded
    as in the full pool; networks are initialised from ``seed`` in both cases,
    so every worker starts from the same weights as the driver.

    Args:
        env_id: A registered env id.
        cfg: PPO hyper-parameters (:class:`~torchfrag.algos.ppo.PPOConfig` fields).
        seed: Seeds torch and the envs.
        env_options: Extra options for the env (e.g. ``{"step_sleep_us": 1000}``,
            ``{"num_threads": 1}``).
        exploration: Exploration type of the rollout's act fragment
            (``"random"``; ``"mode"`` gives deterministic rollouts).

    Example:
        >>> from torchfrag.policies.factory import PPOFactory
        >>> loop = PPOFactory("CartPole-v1", {"num_envs": 2, "steps": 4, "minibatch_size": 8})()
        >>> loop.env.batch_size
        torch.Size([2])
        >>> loop.close()
    """

    env_id: str
    cfg: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    env_options: dict[str, Any] = field(default_factory=dict)
    exploration: str = "random"

    def config(self) -> Any:
        """The :class:`~torchfrag.algos.ppo.PPOConfig`."""
        from torchfrag.algos.ppo import PPOConfig

        return self.cfg if isinstance(self.cfg, PPOConfig) else PPOConfig.from_dict(dict(self.cfg))

    @property
    def num_envs(self) -> int:
        """Envs of the whole run."""
        return int(self.config().num_envs)

    def __call__(self, env_slice: EnvSlice | None = None) -> nn.Module:
        import torch

        from torchfrag.algos.ppo import PPOLoop, make_actor_critic, make_env
        from torchfrag.fragments import Rollout

        cfg = self.config()
        torch.manual_seed(int(self.seed))
        opts = dict(self.env_options)
        if env_slice is None:
            env = make_env(self.env_id, cfg.num_envs, seed=int(self.seed), obs_norm=cfg.obs_norm, **opts)
        else:
            env = make_env(self.env_id, env_slice.count, seed=slice_seeds(int(self.seed), env_slice),
                           obs_norm=cfg.obs_norm, **opts)
        actor, critic = make_actor_critic(env, list(cfg.hidden))
        loop = PPOLoop(env, actor, critic, cfg)
        if self.exploration != "random":
            loop.rollout = Rollout(actor, env, steps=cfg.steps, exploration=self.exploration)
        return loop
