"""The ``actor_pools`` executor: several actor pools, each running one rollout of the loop.

Each pool is a :class:`~torchfrag.runtime.replicated_rollout.ReplicatedRollout` (or, for a
group naming ``async_replicated_rollout``, an
:class:`~torchfrag.runtime.replicated_rollout.AsyncReplicatedRollout`) of its own
(its own actors, stub, state to send and produced state to merge), over the pool's worker
processes (the pools' workers in the order of the policy's pool groups); this class only lays the
pools out, keeps their iteration and version in step with the run's and adds their figures up.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from torch import nn

from torchfrag.runtime.comm import graph_module_with
from torchfrag.runtime.executor import RpcExecutor, executor_class, register_executor
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
        from torchfrag.policies.actor_pools import pool_executor
        from torchfrag.policies.explain import replicated_rollout_crossings
        from torchfrag.policies.groups import policy_groups

        groups = policy_groups(placement.policy)
        out = []
        for role, view in _pools(placement):
            # an asynchronous pool keeps `prefetch` requests in flight per actor from the start
            ahead = (int(groups[role].options.get("prefetch", 1))
                     if pool_executor(placement.policy, role) == "async_replicated_rollout" else 0)
            for c in replicated_rollout_crossings(view, ahead):
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
        from torchfrag.policies.actor_pools import pool_executor
        from torchfrag.policies.groups import policy_groups

        workers = self.cluster.workers
        groups = policy_groups(placement.policy)
        first = 0
        for role, view in _pools(placement):
            size = view.workers("actor")
            kind = executor_class(pool_executor(placement.policy, role))  # sync, or async for this pool
            pool = kind(view.policy, self.graph, self.factory, self.cluster, self.calls, self.stats)
            pool.options = {**self.options, **view.options(), **groups[role].options}
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
        for pool in self.pools:
            pool.after_iteration(out)
        self.failed = [w for pool in self.pools for w in pool.failed]
        self.frames_missing = sum(pool.frames_missing for pool in self.pools)

    def report(self, extra: dict[str, Any], done: int) -> None:
        for pool in self.pools:  # an asynchronous pool's policy lag
            pool.report(extra, done)
