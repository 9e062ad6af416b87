"""Executors for ``replicated_rollout`` / ``async_replicated_rollout`` placements (``actors``, ``async_actors``).

One rollout (and the chain of fragments placed with it) runs on every actor, each over its
slice of the envs; the driver runs the rest of the loop with a stub in the rollout's place.
The state of the actors' fragments (:meth:`~torchfrag.fragments.Fragment.shared_state`:
parameters, buffers, produced state) travels with the request every ``sync_every``
iterations; the state the actors produce (running statistics) is merged back.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
from tensordict import TensorDictBase
from torch import nn

from torchfrag.runtime.comm import Passthrough, cat_raw, graph_module_with, split_sizes, total_envs
from torchfrag.runtime.executor import RpcExecutor, continue_on_failure, register_executor
from torchfrag.runtime.launcher import WorkerError, WorkerTimeout
from torchfrag.runtime.worker import REWARD as _REWARD
from torchfrag.runtime.worker import _remote_rollout, _remote_setup, worker_extra

logger = logging.getLogger(__name__)

__all__ = ["AsyncReplicatedRollout", "ReplicatedRollout", "actor_chain", "actor_sizes", "setup_actor"]


class _ActorsStub(nn.Module):
    """Stands in for the rollout fragment under ``actors``: one RPC per actor per iteration."""

    def __init__(self, ex: ReplicatedRollout, node: str) -> None:
        super().__init__()
        self.ex = ex
        self.node = node

    def forward(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        ex = self.ex
        weights = ex.weights_for_sync()
        actors = list(ex.actors)
        futs = [ex.request(w, weights) for w in actors]
        arrived: queue.SimpleQueue[int] = queue.SimpleQueue()
        for j, f in enumerate(futs):
            f.add_done_callback(lambda _f, j=j: arrived.put(j))
        batches: list[TensorDictBase | None] = [None] * len(actors)
        raws: list[torch.Tensor | None] = [None] * len(actors)
        answered: set[int] = set()
        produced: list[list[list[torch.Tensor]]] = []
        for _ in range(len(actors)):
            # In arrival order: the per-env fragments run on one batch while the others travel.
            j = self._next_arrival(arrived, [w for k, w in enumerate(actors) if k not in answered])
            answered.add(j)
            try:
                batch, _, raw, made = ex.calls.wait_one(futs[j], actors[j])
            except WorkerError as err:
                if not continue_on_failure(ex, ex.actors, actors[j], err):
                    raise
                continue
            produced.append(made)
            if ex.arrival_chain:
                batch, raw = _run_chain(ex.arrival_chain, batch, raw)
            batches[j], raws[j] = batch, raw
        got = [b for b in batches if b is not None]
        if not got:
            raise WorkerError("every actor failed")
        kept = [r for b, r in zip(batches, raws) if b is not None]
        ex.merge_produced(produced)
        batch = torch.cat(got, dim=0) if len(got) > 1 else got[0]
        if not ex.failed and not ex.full_frames:
            ex.full_frames = batch.numel()
        elif ex.full_frames:
            # Fewer actors than asked answer (on_failure=continue): fewer frames.
            ex.frames_missing += max(0, ex.full_frames - batch.numel())
        ex.account(batch, cat_raw(kept))
        return batch

    def _next_arrival(self, arrived: queue.SimpleQueue[int], pending: list[str]) -> int:
        """Index of the next actor whose answer (or failure) arrived; watches the pending workers."""
        ex = self.ex
        deadline = time.monotonic() + ex.calls.timeout + 10.0
        while True:
            try:
                return arrived.get(timeout=0.2)
            except queue.Empty:
                ex.cluster.check_alive(list(pending))
                if time.monotonic() > deadline:
                    raise WorkerTimeout(f"{', '.join(pending)} did not answer within "
                                        f"{ex.calls.timeout:.1f}s (policy.timeout)",
                                        pending[0] if pending else None) from None


def _run_chain(chain: Sequence[nn.Module], batch: TensorDictBase,
               raw: torch.Tensor | None) -> tuple[TensorDictBase, torch.Tensor | None]:
    """Runs per-env fragments on one actor's batch; keeps its raw reward if a fragment rescales it."""
    before = batch.get(_REWARD, None) if raw is None else raw
    for frag in chain:
        batch = frag(batch)
    if raw is None and before is not None and batch.get(_REWARD, None) is not before:
        raw = before
    return batch, raw


class _AsyncActorsStub(nn.Module):
    """Stands in for the rollout fragment under ``async_actors``: requests stay in flight."""

    def __init__(self, ex: AsyncReplicatedRollout, node: str) -> None:
        super().__init__()
        self.ex = ex
        self.node = node
        self.ready: deque[tuple[Any, str]] = deque()
        self.cv = threading.Condition()
        self.started = False

    def _issue(self, worker: str) -> None:
        ex = self.ex
        weights = ex.weights_for_sync(force=True)
        fut = ex.request(worker, weights)
        entry = (fut, worker)

        def done(_f: Any, entry: Any = entry) -> None:
            with self.cv:
                self.ready.append(entry)
                self.cv.notify_all()

        fut.add_done_callback(done)

    def start(self) -> None:
        for _ in range(int(self.ex.option("prefetch", 1))):
            for w in self.ex.actors:
                self._issue(w)

    def _next(self) -> tuple[Any, str]:
        ex = self.ex
        deadline = time.monotonic() + ex.calls.timeout + 10.0
        with self.cv:
            while not self.ready:
                self.cv.wait(0.2)
                ex.cluster.check_alive(list(ex.actors))
                if time.monotonic() > deadline:
                    raise WorkerTimeout(f"no rollout arrived within {ex.calls.timeout:.1f}s (policy.timeout)")
            return self.ready.popleft()

    def forward(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        ex = self.ex
        if not self.started:
            self.started = True
            self.start()
        need = int(ex.option("batches_per_learn") or len(ex.actors))
        batches, lags, raws, produced = [], [], [], []
        while len(batches) < need:
            fut, worker = self._next()
            try:
                batch, version, raw, made = ex.calls.wait_one(fut, worker)
            except WorkerError as err:
                if not continue_on_failure(ex, ex.actors, worker, err):
                    raise
                need = min(need, len(ex.actors)) if ex.actors else need
                continue
            lag = ex.version - int(version)
            if worker in ex.actors:
                self._issue(worker)
            if lag > int(ex.option("staleness", 0)):
                ex.dropped += 1
                continue
            batches.append(batch)
            raws.append(raw)
            lags.append(lag)
            produced.append(made)
        ex.lags.extend(lags)
        ex.last_lag = lags
        ex.merge_produced(produced)
        batch = torch.cat(batches, dim=0) if len(batches) > 1 else batches[0]
        ex.account(batch, cat_raw(raws))
        return batch


def actor_chain(placement: Any) -> list[str]:
    """The nodes a placement puts on its actors: the rollout first, then the chain after it."""
    chain = [n for n, r in placement.roles.items() if r != "learner"]
    if not chain:
        from torchfrag.policies.base import PolicyError

        raise PolicyError(f"policy {placement.policy.name} places no fragment on the actors; a rollout "
                          "fragment is needed")
    return chain


def actor_sizes(ex: Any, node: str, actors: int) -> list[int]:
    """Envs of each of ``actors`` actors: option ``envs_per_actor`` each, or the loop's envs split."""
    policy = ex.policy
    per = ex.option("envs_per_actor")
    if per is not None:
        return [int(per)] * actors
    total = total_envs(ex, node)
    if total < actors:
        from torchfrag.policies.base import PolicyError

        raise PolicyError(f"policy {policy.name}: {actors} actors but the loop has only {total} envs")
    return split_sizes(total, actors)


def setup_actor(ex: Any, worker: str, chain: list[str], env_slice: Any, seed_offset: int,
                extra: dict[str, Any]) -> Any:
    """Asks ``worker`` to build its loop for ``env_slice`` and keep ``chain``; returns the future."""
    return ex.calls.call(worker, _remote_setup, ex.factory, env_slice, "actor", chain, seed_offset, extra,
                         timeout=ex.policy.timeout)


@register_executor
class ReplicatedRollout(RpcExecutor):
    """``replicated_rollout``: a rollout (and the chain placed with it) on every actor, the rest here.

    The driver half is a stub in the rollout's place (one RPC per actor per iteration), the
    worker half :func:`~torchfrag.runtime.worker._remote_rollout`; the actors' fragments'
    state travels with the request every ``sync_every`` iterations and what they produce is
    merged back. Each actor steps its slice of the envs (:func:`actor_sizes`).

    Attributes:
        actors: RPC names of the actors still in the run.
        full_frames: Frames one iteration collects with every actor answering.
        arrival_chain: Per-env fragments run on each actor's batch as it arrives
            (``advantage="on_arrival"``).
    """

    kind: ClassVar[str] = "replicated_rollout"
    #: The stub class that stands in for the rollout on the driver.
    stub: ClassVar[type[nn.Module]] = _ActorsStub

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.actors: list[str] = []
        self.full_frames = 0
        self.arrival_chain: list[nn.Module] = []

    @classmethod
    def crossings(cls, placement: Any) -> list[Any]:
        from torchfrag.policies.explain import replicated_rollout_crossings

        return replicated_rollout_crossings(placement)

    @classmethod
    def first_slice(cls, placement: Any, total: int) -> Any:
        from torchfrag.policies.factory import EnvSlice

        per = placement.option("envs_per_actor")
        n = placement.policy.num_workers
        if per is not None:
            return EnvSlice(0, int(per), int(per) * n, 0, 1)
        count = total // n + (1 if total % n else 0)
        return EnvSlice(0, count, total, 0, 1)

    @classmethod
    def check(cls, graph: Any, placement: Any, factory: Any) -> None:
        from torchfrag.policies.base import PolicyError, rollout_nodes
        from torchfrag.runtime.comm import envs_of

        policy = placement.policy
        nodes = [n for n, r in placement.roles.items() if r != "learner"]
        if not nodes or nodes[0] not in rollout_nodes(graph):
            raise PolicyError(f"policy {policy.name} places {nodes} on the actors; a rollout fragment "
                              "(and the chain after it) is needed")
        if placement.option("envs_per_actor") is None:
            total = envs_of(graph, factory, nodes[0])
            # every learner splits the loop's envs over its own actors
            actors = placement.workers(placement.roles[nodes[0]]) // max(1, placement.workers("learner"))
            if total < actors:
                raise PolicyError(f"policy {policy.name}: {actors} actors per learner but the loop has only "
                                  f"{total} envs (set policy.envs_per_actor or use fewer actors)")

    def setup(self, placement: Any, replace: dict[str, nn.Module]) -> Any:
        """Sets the actors up; returns the driver's placed graph module."""
        self.start_actors(placement, self.cluster.workers, replace)
        self.reset_counts()
        return graph_module_with(self.graph, replace)

    def start_actors(self, placement: Any, workers: list[str], replace: dict[str, nn.Module],
                     seed_base: int = 0, name_slices: bool = False) -> None:
        """Sets ``workers`` up as this executor's actors; puts their stub in ``replace``.

        Args:
            placement: The placement (its ``actor`` role holds the chain).
            workers: RPC names of the actors.
            replace: Fragment target -> stand-in, filled here.
            seed_base: Added to every actor's seed offset (actors of other pools come first).
            name_slices: Name the rollout in every env slice (as it is whenever the loop has
                several rollouts with an env: :func:`~torchfrag.policies.contract.slice_node`).
        """
        from torchfrag.policies.contract import slice_node
        from torchfrag.policies.factory import EnvSlice

        extra = worker_extra(self, placement)
        chain = actor_chain(placement)
        sizes = actor_sizes(self, chain[0], len(workers))
        all_envs = sum(sizes)
        offsets = [sum(sizes[:i]) for i in range(len(workers))]
        node = chain[0] if name_slices else slice_node(self.graph, chain[0])
        ranks = [self.cluster.workers.index(w) + 1 for w in workers]
        futs = [setup_actor(self, w, chain, EnvSlice(o, s, all_envs, i, r, node), seed_base + i + 1, extra)
                for i, (w, o, s, r) in enumerate(zip(workers, offsets, sizes, ranks))]
        self.wait_setup(futs, workers)
        self.install(chain, workers, all_envs, replace)

    def request(self, worker: str, weights: dict[torch.dtype, torch.Tensor] | None) -> Any:
        """Asks ``worker`` for one run of its chain (after loading ``weights`` when given); the future."""
        return self.calls.call(worker, _remote_rollout, weights, self.version)

    def install(self, chain: list[str], actors: list[str], envs: int, replace: dict[str, nn.Module]) -> None:
        """Puts the stub that calls ``actors`` in the rollout's place (and passthroughs for its chain).

        Args:
            chain: The nodes on the actors (the rollout first).
            actors: RPC names of this learner's actors (already set up).
            envs: Envs over all of them (frames per iteration: ``envs * steps``).
            replace: Fragment target -> stand-in, filled here.
        """
        from torchfrag.policies.base import rollout_nodes

        graph = self.graph
        node = chain[0]
        self.rollout_node = node if node in rollout_nodes(graph) else None
        self.actors = list(actors)
        self.state_frags = [graph.fragment(n) for n in chain]
        steps = getattr(graph.fragment(node), "steps", None)
        self.full_frames = int(steps) * envs if isinstance(steps, int) else 0
        replace[graph.node(node).target] = self.stub(self, node)
        for other in chain[1:]:  # ran on the actors: the stub's batch already went through them
            replace[graph.node(other).target] = Passthrough()
        if self.stub is _ActorsStub and self.option("advantage", "learner") == "on_arrival":
            # The per-env fragments left on the learner right after the actors' chain run on
            # each actor's batch as it arrives (in the stub), not on the gathered batch.
            from torchfrag.policies.base import per_env_chain

            following = per_env_chain(graph, node)
            if following[:len(chain) - 1] == chain[1:]:
                rest = following[len(chain) - 1:]
                self.arrival_chain = [graph.fragment(n) for n in rest]
                for other in rest:
                    replace[graph.node(other).target] = Passthrough()


@register_executor
class AsyncReplicatedRollout(ReplicatedRollout):
    """``async_replicated_rollout``: as :class:`ReplicatedRollout`, requests stay in flight.

    Attributes:
        lags: Policy lag of every batch consumed.
        last_lag: The lags of the last iteration's batches.
        dropped: Batches dropped as staler than option ``staleness``.
    """

    kind: ClassVar[str] = "async_replicated_rollout"
    stub: ClassVar[type[nn.Module]] = _AsyncActorsStub

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lags: list[int] = []
        self.last_lag: list[int] = []
        self.dropped = 0

    def after_iteration(self, out: Any) -> None:
        """Puts this iteration's policy lag into a scalar output (a batched one, a collection-only
        loop's batch, keeps its keys: the lag is in ``RunResult.extra["policy_lag"]`` after the run)."""
        if self.last_lag and isinstance(out, TensorDictBase) and out.batch_dims == 0:
            out.set("policy_lag", torch.tensor(sum(self.last_lag) / len(self.last_lag)))
            out.set("policy_lag_max", torch.tensor(float(max(self.last_lag))))

    def report(self, extra: dict[str, Any], done: int) -> None:
        if self.lags:
            extra["policy_lag"] = {"mean": sum(self.lags) / len(self.lags), "max": max(self.lags),
                                   "dropped": self.dropped, "batches": len(self.lags)}
