"""The ``actor_pools`` executor: several actor pools, each running one rollout of the loop.

Each pool is a :class:`~torchfrag.runtime.replicated_rollout.ReplicatedRollout` of its own
(its own actors, stub, state to send and produced state to merge), over the pool's worker
processes (the pools' workers in the order of the policy's pool groups); this class only lays the
pools out, keeps their iteration and version in step with the run's and adds their figures up.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from torch import nn

from torchfrag.runtime.comm import graph_module_with
from torchfrag.runtime.executor import RpcExecutor, register_executor
from torchfrag.runtime.replicated_rollout import ReplicatedRollout

__all__ = ["ActorPools"]


def _pools(placement: Any) -> list[tuple[str, Any]]:
    """``(group, the pool's own actors placement)`` for every pool group, in the policy's order."""
    from torchfrag.policies.actor_pools import pool_groups, pool_placement

    return [(role, pool_placement(placement, role)) for role in pool_groups(placement.policy)]


@register_executor
class ActorPools(RpcExecutor):
    """``actor_pools``: one :class:`ReplicatedRollout` per pool, in one driver loop.

    Attributes:
        pools: The pools' executors, in the policy's order.
    """

    kind: ClassVar[str] = "actor_pools"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pools: list[ReplicatedRollout] = []
        self._placed: nn.Module | None = None

    @classmethod
    def crossings(cls, placement: Any) -> list[Any]:
        out = []
        for role, view in _pools(placement):
            for c in ReplicatedRollout.crossings(view):
                out.append(dataclasses.replace(c, src=c.src.replace("@actor[", f"@{role}["),
                                               dst=c.dst.replace("@actor[", f"@{role}[")))
        return out

    @classmethod
    def first_slice(cls, placement: Any, total: int) -> Any:
        from torchfrag.policies.contract import sliced_rollout

        node = sliced_rollout(placement)  # the rollout the factory check builds
        view = next(v for _r, v in _pools(placement) if v.nodes_of("actor")[0] == node)
        sl = ReplicatedRollout.first_slice(view, total)
        return dataclasses.replace(sl, node=view.nodes_of("actor")[0])

    @classmethod
    def check(cls, graph: Any, placement: Any, factory: Any) -> None:
        from torchfrag.policies.actor_pools import check_pools

        check_pools(placement)  # a YAML-only policy (no class) is checked here
        for _role, view in _pools(placement):
            ReplicatedRollout.check(graph, view, factory)

    def setup(self, placement: Any, replace: dict[str, nn.Module]) -> Any:
        workers = self.cluster.workers
        first = 0
        for _role, view in _pools(placement):
            size = view.workers("actor")
            pool = ReplicatedRollout(view.policy, self.graph, self.factory, self.cluster, self.calls, self.stats)
            pool.options = {**self.options, **view.options()}
            pool.start_actors(view, workers[first:first + size], replace, seed_base=first, name_slices=True)
            self.pools.append(pool)
            first += size
        self.reset_counts()
        self._placed = graph_module_with(self.graph, replace)
        return self._iterate

    def _iterate(self, *args: Any) -> Any:
        for pool in self.pools:
            pool.iteration, pool.version = self.iteration, self.version
        return self._placed(*args)

    def after_iteration(self, out: Any) -> None:
        self.failed = [w for pool in self.pools for w in pool.failed]
        self.frames_missing = sum(pool.frames_missing for pool in self.pools)
