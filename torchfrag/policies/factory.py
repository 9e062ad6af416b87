"""Picklable loop factories: how a worker builds its own copy of a loop's fragments.

Under a distributed policy no fragment is ever pickled: every worker calls the
same *factory* and keeps only the fragments placed on it. A factory is any
picklable callable ``factory(env_slice=None) -> nn.Module`` (a module-level
function, a :func:`functools.partial` of one, or a dataclass like
:class:`torchfrag.algos.AlgoFactory`, the factory of every shipped algorithm,
re-exported here as ``PPOFactory``). ``env_slice`` tells the factory which envs of the whole
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
from dataclasses import dataclass
from typing import Protocol

from torch import nn

# The loop factory of every algorithm lives with the algorithms (torchfrag.algos.factory, which
# imports nothing from policies at module level, so there is no algos <-> policies cycle).
from torchfrag.algos.factory import AlgoFactory, PPOFactory  # noqa: E402

logger = logging.getLogger(__name__)

__all__ = ["AlgoFactory", "EnvSlice", "LoopFactory", "PPOFactory", "slice_seeds"]


@dataclass(frozen=True)
class EnvSlice:
    """The envs a worker owns: global env ids ``offset .. offset + count - 1``.

    Attributes:
        offset: Global id of the first env.
        count: Number of envs on this worker.
        total: Envs in the whole run (all workers).
        worker: Index of the worker among the workers of its role.
        rank: Process rank (0: the driver).
        node: The rollout whose envs these are, when the loop has several rollouts with an
            env: the factory slices that one and builds the others whole (checked before any
            worker starts); ``None`` when the loop has one.
    """

    offset: int
    count: int
    total: int
    worker: int = 0
    rank: int = 0
    node: str | None = None


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
