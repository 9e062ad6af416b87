"""Executor for ``replicated_loop`` placements (``data_parallel``).

Every rank runs the whole loop on its own envs; every fragment that declares gradient sync
averages its gradients over the ranks (:mod:`torchfrag.runtime.gradsync`), and the state the
fragments produce (running statistics, counters) is merged over the ranks at the end of every
iteration (:func:`~torchfrag.runtime.state_sync.allreduce_produced`), so every replica starts
the next one from the same statistics.
"""
from __future__ import annotations

from typing import Any

from torch import nn

from torchfrag.runtime.comm import RpcExecutor, add_replica_frames, total_envs
from torchfrag.runtime.gradsync import install_gradient_sync
from torchfrag.runtime.worker import (_remote_dp_iterate, _remote_dp_setup, _remote_setup, run_replica_iteration,
                                     worker_extra)

__all__ = ["prepare_replicated_loop", "finish_iteration"]


class _DPIteration:
    def __init__(self, ex: RpcExecutor) -> None:
        self.ex = ex

    def __call__(self, *args: Any) -> Any:
        ex = self.ex
        futs = [ex.calls.call(w, _remote_dp_iterate) for w in ex.cluster.workers]
        ex.__dict__["dp_futs"] = futs
        return run_replica_iteration(ex.graph, ex.__dict__["dp_fn"], *args)


def _dp_finish(ex: RpcExecutor, out: Any) -> Any:
    futs = ex.__dict__.pop("dp_futs", [])
    results = ex.calls.wait(futs, ex.cluster.workers)
    add_replica_frames(ex, results)
    return out

finish_iteration = _dp_finish


def prepare_replicated_loop(ex: RpcExecutor, placement: Any, replace: dict[str, nn.Module]) -> Any:
    """Starts the process group; returns the per-iteration callable."""
    from torchfrag.policies.base import rollout_nodes
    from torchfrag.policies.factory import EnvSlice

    policy, graph, calls = ex.policy, ex.graph, ex.calls
    workers = ex.cluster.workers
    extra = worker_extra(ex, placement)
    name, kind = policy.name, placement.kind

    world = policy.workers
    found = rollout_nodes(graph)
    ex.rollout_node = found[0] if found else None
    total = total_envs(ex, found[0]) if found else 0
    pg_init = ex.cluster.process_group_init("process_group")
    futs = []
    for i, w in enumerate(workers):
        rank = i + 1
        if policy.replicate_envs or not found:
            sl, seed_off = None, None
        else:
            sl, seed_off = EnvSlice(rank * total, total, total * world, rank, rank), rank
        futs.append(calls.call(w, _remote_setup, ex.factory, sl, "replica", None, seed_off, extra,
                               timeout=policy.timeout))
    calls.wait(futs, workers, count_bytes=False)
    futs = [calls.call(w, _remote_dp_setup, i + 1, world, pg_init, policy.backend,
                       policy.timeout) for i, w in enumerate(workers)]
    import datetime

    import torch.distributed as dist

    dist.init_process_group(policy.backend, init_method=pg_init, rank=0,
                            world_size=world, timeout=datetime.timedelta(seconds=policy.timeout))
    ex.dp_opts = install_gradient_sync(graph, world)
    calls.wait(futs, workers, count_bytes=False)
    calls.stats.calls = 0
    calls.stats.bytes_sent = 0
    ex.__dict__["dp_fn"] = graph.module
    return _DPIteration(ex)
