"""Executor for ``replicated_loop`` placements (``data_parallel``).

Every rank runs the whole loop on its own envs; every fragment that declares gradient sync
averages its gradients over the ranks (:mod:`torchfrag.runtime.gradsync`), and the state the
fragments produce (running statistics, counters) is merged over the ranks at the end of every
iteration (:func:`~torchfrag.runtime.state_sync.allreduce_produced`), so every replica starts
the next one from the same statistics.
"""
from __future__ import annotations

from typing import Any, ClassVar

from torch import nn

from torchfrag.runtime.comm import add_replica_frames, total_envs
from torchfrag.runtime.executor import RpcExecutor, register_executor
from torchfrag.runtime.gradsync import GradientGroup
from torchfrag.runtime.worker import _remote_dp_iterate, _remote_dp_setup, _remote_setup, run_replica_iteration, worker_extra

__all__ = ["ReplicatedLoop"]


@register_executor
class ReplicatedLoop(RpcExecutor):
    """``replicated_loop``: every rank (the driver is rank 0) runs the whole loop on its own envs.

    The worker half is :func:`~torchfrag.runtime.worker._remote_dp_iterate`; replica ``r``
    owns global envs ``r*num_envs ...`` (or the same envs, ``replicate_envs``); gradients are
    all-reduced in a process group of the replicas (:class:`~torchfrag.runtime.gradsync.GradientGroup`).
    """

    kind: ClassVar[str] = "replicated_loop"
    driver_role: ClassVar[str] = "replica"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group = GradientGroup()
        self.replica_frames: list[dict[str, int]] = []
        self._futs: list[Any] = []

    @classmethod
    def crossings(cls, placement: Any) -> list[Any]:
        from torchfrag.policies.explain import gradient_crossings, replica_outputs

        world = placement.workers(next(iter(placement.roles.values())))
        return [*gradient_crossings(placement.graph, f"replica[{world}]", world),
                replica_outputs(placement.graph, world)]

    @classmethod
    def first_slice(cls, placement: Any, total: int) -> Any:
        from torchfrag.policies.factory import EnvSlice

        if placement.option("replicate_envs", False):
            return None
        return EnvSlice(total, total, total * placement.workers(placement.groups_holding()[0]), 1, 1)

    def setup(self, placement: Any, replace: dict[str, nn.Module]) -> Any:
        """Starts the replicas and the process group; returns the per-iteration callable."""
        from torchfrag.policies.base import rollout_nodes
        from torchfrag.policies.contract import slice_node, sliced_rollout
        from torchfrag.policies.factory import EnvSlice

        policy, graph, calls = self.policy, self.graph, self.calls
        workers = self.cluster.workers
        extra = worker_extra(self, placement)
        world = placement.workers(placement.groups_holding()[0])  # the replicas' group, the driver in it
        backend = str(self.option("backend", "gloo"))
        # The rollout the replicas' slices divide (named in the slice when the loop has several).
        found = rollout_nodes(graph)
        self.rollout_node = sliced_rollout(placement) or (found[0] if found else None)
        node = slice_node(graph, self.rollout_node)
        total = total_envs(self, self.rollout_node) if self.rollout_node else 0
        pg_init = self.cluster.process_group_init("process_group")
        futs = []
        for i, w in enumerate(workers):
            rank = i + 1
            if self.option("replicate_envs", False) or self.rollout_node is None:
                sl, seed_off = None, None
            else:
                sl, seed_off = EnvSlice(rank * total, total, total * world, rank, rank, node), rank
            futs.append(calls.call(w, _remote_setup, self.factory, sl, "replica", None, seed_off, extra,
                                   timeout=policy.timeout))
        self.wait_setup(futs, workers)
        futs = [calls.call(w, _remote_dp_setup, i + 1, world, pg_init, backend,
                           policy.timeout) for i, w in enumerate(workers)]
        self.group.join(graph, backend, pg_init, world, policy.timeout)
        calls.wait(futs, workers, count_bytes=False)
        self.reset_counts()
        return self._iterate

    def _iterate(self, *args: Any) -> Any:
        self._futs = [self.calls.call(w, _remote_dp_iterate) for w in self.cluster.workers]
        return run_replica_iteration(self.graph, self.graph.module, *args)

    def finish(self, out: Any) -> Any:
        futs, self._futs = self._futs, []
        add_replica_frames(self.graph, self.replica_frames, self.calls.wait(futs, self.cluster.workers))
        return out

    def close(self) -> None:
        self.group.close()

    def report(self, extra: dict[str, Any], done: int) -> None:
        self.group.report(extra, done)
