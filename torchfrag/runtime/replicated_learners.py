"""Executor for ``replicated_learners`` placements (``multi_learner``): learners, each with actors.

Learner 0 is the driver; learners ``1 .. L-1`` are worker processes that build the whole
loop from the factory. Every learner runs the loop with its rollout (and the chain placed
with it) on actors of its own, as the ``replicated_rollout`` executor does for the driver
(:func:`~torchfrag.runtime.replicated_rollout.install_actors`, here also inside the
learner processes: RPC lets any process call any other). The learners form a process group
of their own and every fragment that declares gradient sync averages its gradients over
them (:mod:`torchfrag.runtime.gradsync`), so their parameters stay identical; the state
the actors produce (running statistics), once merged into each learner, is merged over
the learners as well (:func:`reduce_produced`), so every learner normalises alike.

Worker layout (RPC names): ``worker1 .. worker{L-1}`` are the learners, then learner ``r``'s
actors are the next ``actors_per_learner`` workers, learner 0's first.
"""
from __future__ import annotations

import datetime
import logging
from typing import Any

from torch import nn

from torchfrag.runtime.comm import Calls, CommStats, RpcExecutor, add_replica_frames, graph_module_with, total_envs
from torchfrag.runtime.gradsync import install_gradient_sync
from torchfrag.runtime.launcher import Cluster
from torchfrag.runtime.replicated_rollout import actor_chain, actor_sizes, install_actors, setup_actor
from torchfrag.runtime.state_sync import allreduce_produced
from torchfrag.runtime.worker import WORKER, _remote_dp_iterate, _remote_dp_setup, _remote_setup, worker_extra

logger = logging.getLogger(__name__)

__all__ = ["prepare_replicated_learners", "finish_learners_iteration", "learner_layout", "reduce_produced"]


def learner_layout(workers: list[str], learners: int, actors_per_learner: int
                   ) -> tuple[list[str], list[list[str]]]:
    """``(learner workers, actors of each learner)`` from the RPC worker names.

    Example:
        >>> learner_layout(["worker1", "worker2", "worker3", "worker4", "worker5"], 2, 2)
        (['worker1'], [['worker2', 'worker3'], ['worker4', 'worker5']])
    """
    first = learners - 1
    groups = [workers[first + r * actors_per_learner:first + (r + 1) * actors_per_learner]
              for r in range(learners)]
    return workers[:first], groups


def reduce_produced(frag: Any, base: dict[str, Any]) -> None:
    """Merges a fragment's produced state (running statistics) over the learners' process group.

    Every learner starts the iteration from the same state ``base`` (the previous merge) and
    has folded its own actors' state in (:func:`~torchfrag.runtime.state_sync.allreduce_produced`).
    """
    allreduce_produced(frag, base)


class _LearnersIteration:
    """One iteration: the learner workers start theirs, the driver runs its own placed loop."""

    def __init__(self, ex: RpcExecutor, placed: nn.Module, learners: list[str]) -> None:
        self.ex, self.placed, self.learners = ex, placed, learners

    def __call__(self, *args: Any) -> Any:
        ex = self.ex
        futs = [ex.calls.call(w, _remote_dp_iterate, ex.iteration) for w in self.learners]
        ex.__dict__["learner_futs"] = (futs, self.learners)
        try:
            return self.placed(*args)
        except Exception:
            # A learner that failed (its actor raised, say) leaves this one in the all-reduce
            # until the process group's timeout: report the failure itself, not the timeout.
            for fut, worker in zip(futs, self.learners):
                if fut.done():
                    ex.calls.wait_one(fut, worker, count_bytes=False)
            raise


def finish_learners_iteration(ex: RpcExecutor, out: Any) -> Any:
    """Waits for the learner workers' iteration; counts their frames and actor traffic.

    Every learner's output of the iteration (the driver's first) is kept in
    ``ex.learner_outputs`` (``RunResult.extra["learner_outputs"]`` after the run); the
    driver's output is returned unchanged.
    """
    futs, learners = ex.__dict__.pop("learner_futs", ([], []))
    results = ex.calls.wait(futs, learners, count_bytes=False)
    add_replica_frames(ex, results)
    for r in results:
        comm = r.get("comm") or {}
        ex.stats.bytes_sent += int(comm.get("sent", 0))
        ex.stats.bytes_received += int(comm.get("received", 0))
        ex.stats.calls += int(comm.get("calls", 0))
    ex.__dict__["learner_outputs"] = [out, *[r["metrics"] for r in results]]
    return out


def _remote_learner_setup(policy: Any, chain: list[str], actors: list[str], envs: int) -> bool:
    """On a learner worker: puts the stub calling its own ``actors`` in its loop's rollout."""
    graph = WORKER["graph"]
    # A view of the RPC world with no processes of its own: waits are bounded by the timeout.
    cluster = Cluster(0, timeout=policy.timeout, addr=policy.master_addr)
    stats = CommStats()
    ex = RpcExecutor(policy, graph, None, cluster, Calls(cluster, policy.timeout, stats), stats)
    replace: dict[str, nn.Module] = {}
    install_actors(ex, chain, actors, envs, "replicated_rollout", replace)
    ex.reduce_produced = reduce_produced
    WORKER["placed"] = graph_module_with(graph, replace)
    WORKER["executor"] = ex
    return True


def prepare_replicated_learners(ex: RpcExecutor, placement: Any, replace: dict[str, nn.Module]) -> Any:
    """Sets up the learner workers, every learner's actors and the learners' process group."""
    from torchfrag.policies.factory import EnvSlice

    policy, graph, calls = ex.policy, ex.graph, ex.calls
    workers = ex.cluster.workers
    n_learners, per = int(policy.learners), int(policy.actors_per_learner)
    learners, groups = learner_layout(workers, n_learners, per)
    chain = actor_chain(placement)
    sizes = actor_sizes(ex, chain[0], per)
    envs = sum(sizes)  # one learner's envs
    offsets = [sum(sizes[:i]) for i in range(per)]
    replicate = bool(policy.replicate_envs)
    loop_envs = total_envs(ex, chain[0])
    all_envs = envs if replicate else envs * n_learners
    actor_extra = worker_extra(ex, placement)
    learner_extra = {**actor_extra, "device": policy.device("learner")}
    futs, who = [], []
    for r, w in enumerate(learners, start=1):
        sl = None if replicate else EnvSlice(r * loop_envs, loop_envs, loop_envs * n_learners, r, r)
        futs.append(calls.call(w, _remote_setup, ex.factory, sl, "replica", None, None if replicate else r,
                               learner_extra, timeout=policy.timeout))
        who.append(w)
    for r, group in enumerate(groups):
        base = 0 if replicate else r * envs
        for i, w in enumerate(group):
            index = i if replicate else r * per + i  # actor index among all actors: its seed
            sl = EnvSlice(base + offsets[i], sizes[i], all_envs, index, workers.index(w) + 1)
            futs.append(setup_actor(ex, w, chain, sl, index + 1, actor_extra))
            who.append(w)
    calls.wait(futs, who, count_bytes=False)
    futs = [calls.call(w, _remote_learner_setup, policy, chain, groups[r], envs, timeout=policy.timeout)
            for r, w in enumerate(learners, start=1)]
    calls.wait(futs, learners, count_bytes=False)
    install_actors(ex, chain, groups[0], envs, "replicated_rollout", replace)
    ex.reduce_produced = reduce_produced
    # The learners' own process group (the actors are not in it).
    pg_init = ex.cluster.process_group_init("learners_group")
    futs = [calls.call(w, _remote_dp_setup, r, n_learners, pg_init, policy.backend, policy.timeout)
            for r, w in enumerate(learners, start=1)]
    import torch.distributed as dist

    dist.init_process_group(policy.backend, init_method=pg_init, rank=0, world_size=n_learners,
                            timeout=datetime.timedelta(seconds=policy.timeout))
    ex.dp_opts = install_gradient_sync(graph, n_learners)
    calls.wait(futs, learners, count_bytes=False)
    calls.stats.calls = 0
    calls.stats.bytes_sent = 0
    calls.stats.bytes_received = 0
    return _LearnersIteration(ex, graph_module_with(graph, replace), learners)
