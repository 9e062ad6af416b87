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

import logging
from typing import Any, ClassVar

from torch import nn

from torchfrag.runtime.comm import add_replica_frames, graph_module_with, total_envs
from torchfrag.runtime.gradsync import GradientGroup
from torchfrag.runtime.launcher import Cluster
from torchfrag.runtime.replicated_rollout import ReplicatedRollout, actor_chain, actor_sizes, setup_actor
from torchfrag.runtime.state_sync import allreduce_produced
from torchfrag.runtime.executor import register_executor
from torchfrag.runtime.worker import WORKER, _remote_dp_iterate, _remote_dp_setup, _remote_setup, worker_extra

logger = logging.getLogger(__name__)

__all__ = ["LearnerActors", "ReplicatedLearners", "actor_group", "learner_layout"]


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


def actor_group(placement: Any) -> str:
    """The group the learners' actors form (the group of the nodes placed off the learners)."""
    return next(r for r in placement.roles.values() if r != "learner")


class LearnerActors(ReplicatedRollout):
    """A learner worker's own half: its actors called as under ``replicated_rollout``, the
    state they produce merged over the learners too.

    Every learner starts the iteration from the same state ``base`` (the previous merge) and
    has folded its own actors' state in before :func:`~torchfrag.runtime.state_sync.allreduce_produced`.
    """

    kind: ClassVar[str] = "learner_actors"

    def reduce_produced(self, frag: Any, base: dict[str, Any]) -> None:
        allreduce_produced(frag, base)


def _remote_learner_setup(policy: Any, options: dict[str, Any], chain: list[str], actors: list[str],
                          envs: int) -> bool:
    """On a learner worker: puts the stub calling its own ``actors`` in its loop's rollout
    (``options``: the driver's executor's, :attr:`~torchfrag.runtime.executor.RpcExecutor.options`)."""
    graph = WORKER["graph"]
    # A view of the RPC world with no processes of its own: waits are bounded by the timeout.
    cluster = Cluster(0, timeout=policy.timeout, addr=policy.master_addr)
    ex = LearnerActors(policy, graph, None, cluster)
    ex.options = dict(options)
    replace: dict[str, nn.Module] = {}
    ex.install(chain, actors, envs, replace)
    WORKER["placed"] = graph_module_with(graph, replace)
    WORKER["executor"] = ex
    return True


@register_executor
class ReplicatedLearners(LearnerActors):
    """``replicated_learners``: several learners (the driver is learner 0), each with its own actors.

    The driver half is :class:`LearnerActors`' stub for the driver's own actors plus one
    :func:`~torchfrag.runtime.worker._remote_dp_iterate` call per learner worker per iteration;
    the learners all-reduce their gradients (:class:`~torchfrag.runtime.gradsync.GradientGroup`).
    Learner ``r`` owns global envs ``r*num_envs ... (r+1)*num_envs - 1``, split over its actors.
    """

    kind: ClassVar[str] = "replicated_learners"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group = GradientGroup()
        self.replica_frames: list[dict[str, int]] = []
        self.learners: list[str] = []
        self.learner_outputs: list[Any] = []
        self._futs: list[Any] = []
        self._placed: nn.Module | None = None

    @classmethod
    def crossings(cls, placement: Any) -> list[Any]:
        from torchfrag.policies.explain import gradient_crossings, replicated_rollout_crossings

        learners = placement.workers("learner")
        return [*replicated_rollout_crossings(placement),
                *gradient_crossings(placement.graph, f"learner[{learners}]", learners)]

    @classmethod
    def first_slice(cls, placement: Any, total: int) -> Any:
        """Learner 0's first actor's slice."""
        from torchfrag.policies.factory import EnvSlice

        per = placement.option("envs_per_actor")
        n_learners = placement.workers("learner")
        k = placement.workers(actor_group(placement)) // n_learners
        count = int(per) if per is not None else total // k + (1 if total % k else 0)
        envs = int(per) * k if per is not None else total
        return EnvSlice(0, count, envs * (1 if placement.option("replicate_envs", False) else n_learners), 0,
                        n_learners)

    def setup(self, placement: Any, replace: dict[str, nn.Module]) -> Any:
        """Sets up the learner workers, every learner's actors and the learners' process group."""
        from torchfrag.policies.contract import slice_node
        from torchfrag.policies.factory import EnvSlice

        policy, calls = self.policy, self.calls
        workers = self.cluster.workers
        n_learners = placement.workers("learner")
        per = placement.workers(actor_group(placement)) // n_learners
        learners, groups = learner_layout(workers, n_learners, per)
        chain = actor_chain(placement)
        node = slice_node(self.graph, chain[0])  # learners' and actors' slices divide the actors' rollout
        sizes = actor_sizes(self, chain[0], per)
        envs = sum(sizes)  # one learner's envs
        offsets = [sum(sizes[:i]) for i in range(per)]
        replicate = bool(self.option("replicate_envs", False))
        backend = str(self.option("backend", "gloo"))
        loop_envs = total_envs(self, chain[0])
        all_envs = envs if replicate else envs * n_learners
        actor_extra = worker_extra(self, placement)
        learner_extra = {**actor_extra, "device": policy.device("learner")}
        futs, who = [], []
        for r, w in enumerate(learners, start=1):
            sl = None if replicate else EnvSlice(r * loop_envs, loop_envs, loop_envs * n_learners, r, r, node)
            futs.append(calls.call(w, _remote_setup, self.factory, sl, "replica", None, None if replicate else r,
                                   learner_extra, timeout=policy.timeout))
            who.append(w)
        for r, group in enumerate(groups):
            base = 0 if replicate else r * envs
            for i, w in enumerate(group):
                index = i if replicate else r * per + i  # actor index among all actors: its seed
                sl = EnvSlice(base + offsets[i], sizes[i], all_envs, index, workers.index(w) + 1, node)
                futs.append(setup_actor(self, w, chain, sl, index + 1, actor_extra))
                who.append(w)
        self.wait_setup(futs, who)
        futs = [calls.call(w, _remote_learner_setup, policy, self.options, chain, groups[r], envs,
                           timeout=policy.timeout)
                for r, w in enumerate(learners, start=1)]
        calls.wait(futs, learners, count_bytes=False)
        self.install(chain, groups[0], envs, replace)
        # The learners' own process group (the actors are not in it).
        pg_init = self.cluster.process_group_init("learners_group")
        futs = [calls.call(w, _remote_dp_setup, r, n_learners, pg_init, backend, policy.timeout)
                for r, w in enumerate(learners, start=1)]
        self.group.join(self.graph, backend, pg_init, n_learners, policy.timeout)
        calls.wait(futs, learners, count_bytes=False)
        self.reset_counts()
        self.learners = learners
        self._placed = graph_module_with(self.graph, replace)
        return self._iterate

    def _iterate(self, *args: Any) -> Any:
        """One iteration: the learner workers start theirs, the driver runs its own placed loop."""
        futs = [self.calls.call(w, _remote_dp_iterate, self.iteration) for w in self.learners]
        self._futs = futs
        try:
            return self._placed(*args)
        except Exception:
            # A learner that failed (its actor raised, say) leaves this one in the all-reduce
            # until the process group's timeout: report the failure itself, not the timeout.
            for fut, worker in zip(futs, self.learners):
                if fut.done():
                    self.calls.wait_one(fut, worker, count_bytes=False)
            raise

    def finish(self, out: Any) -> Any:
        """Waits for the learner workers' iteration; counts their frames and actor traffic.

        Every learner's output of the iteration (the driver's first) is kept in
        ``learner_outputs`` (``RunResult.extra["learner_outputs"]`` after the run); the
        driver's output is returned unchanged.
        """
        futs, self._futs = self._futs, []
        results = self.calls.wait(futs, self.learners, count_bytes=False)
        add_replica_frames(self.graph, self.replica_frames, results)
        for r in results:
            comm = r.get("comm") or {}
            self.stats.bytes_sent += int(comm.get("sent", 0))
            self.stats.bytes_received += int(comm.get("received", 0))
            self.stats.calls += int(comm.get("calls", 0))
        self.learner_outputs = [out, *[r["metrics"] for r in results]]
        return out

    def close(self) -> None:
        self.group.close()

    def report(self, extra: dict[str, Any], done: int) -> None:
        if self.learner_outputs:
            extra["learner_outputs"] = self.learner_outputs
        self.group.report(extra, done)
