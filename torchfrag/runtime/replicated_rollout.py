"""Executor for ``replicated_rollout`` placements (``actors``, ``async_actors``).

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
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from torchfrag.runtime.comm import (Passthrough, RpcExecutor, cat_raw, graph_module_with, split_sizes,
                                    total_envs)
from torchfrag.runtime.launcher import WorkerError, WorkerTimeout
from torchfrag.runtime.worker import REWARD as _REWARD
from torchfrag.runtime.worker import _remote_rollout, _remote_setup, worker_extra

logger = logging.getLogger(__name__)

__all__ = ["actor_chain", "actor_sizes", "install_actors", "prepare_replicated_rollout", "setup_actor"]


class _ActorsStub(nn.Module):
    """Stands in for the rollout fragment under ``actors``: one RPC per actor per iteration."""

    def __init__(self, ex: RpcExecutor, node: str) -> None:
        super().__init__()
        self.__dict__["ex"] = ex
        self.node = node

    def forward(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        ex = self.ex
        weights = ex.weights_for_sync()
        actors = list(ex.actors)
        futs = [ex.calls.call(w, _remote_rollout, weights, ex.version) for w in actors]
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
                if not ex.continue_on_failure(actors[j], err):
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

    def __init__(self, ex: RpcExecutor, node: str) -> None:
        super().__init__()
        self.__dict__["ex"] = ex
        self.node = node
        self.__dict__["inflight"] = []  # (future, worker, version)
        self.__dict__["ready"] = deque()
        self.__dict__["cv"] = threading.Condition()

    def _issue(self, worker: str) -> None:
        ex = self.ex
        weights = ex.weights_for_sync(force=True)
        fut = ex.calls.call(worker, _remote_rollout, weights, ex.version)
        entry = (fut, worker)

        def done(_f: Any, entry: Any = entry) -> None:
            with self.cv:
                self.ready.append(entry)
                self.cv.notify_all()

        fut.add_done_callback(done)

    def start(self) -> None:
        for _ in range(int(self.ex.policy.prefetch)):
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
        if not self.__dict__.get("started"):
            self.__dict__["started"] = True
            self.start()
        need = int(ex.policy.batches_per_learn or len(ex.actors))
        batches, lags, raws, produced = [], [], [], []
        while len(batches) < need:
            fut, worker = self._next()
            try:
                batch, version, raw, made = ex.calls.wait_one(fut, worker)
            except WorkerError as err:
                if not ex.continue_on_failure(worker, err):
                    raise
                need = min(need, len(ex.actors)) if ex.actors else need
                continue
            lag = ex.version - int(version)
            if worker in ex.actors:
                self._issue(worker)
            if lag > int(ex.policy.staleness):
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


def actor_sizes(ex: RpcExecutor, node: str, actors: int) -> list[int]:
    """Envs of each of ``actors`` actors: ``policy.envs_per_actor`` each, or the loop's envs split."""
    policy = ex.policy
    if getattr(policy, "envs_per_actor", None) is not None:
        return [int(policy.envs_per_actor)] * actors
    total = total_envs(ex, node)
    if total < actors:
        from torchfrag.policies.base import PolicyError

        raise PolicyError(f"policy {policy.name}: {actors} actors but the loop has only {total} envs")
    return split_sizes(total, actors)


def setup_actor(ex: RpcExecutor, worker: str, chain: list[str], env_slice: Any, seed_offset: int,
                extra: dict[str, Any]) -> Any:
    """Asks ``worker`` to build its loop for ``env_slice`` and keep ``chain``; returns the future."""
    return ex.calls.call(worker, _remote_setup, ex.factory, env_slice, "actor", chain, seed_offset, extra,
                         timeout=ex.policy.timeout)


def install_actors(ex: RpcExecutor, chain: list[str], actors: list[str], envs: int, kind: str,
                   replace: dict[str, nn.Module]) -> None:
    """Puts the stub that calls ``actors`` in the rollout's place (and passthroughs for its chain).

    Args:
        ex: The executor of this learner (the driver's, or a learner replica's).
        chain: The nodes on the actors (the rollout first).
        actors: RPC names of this learner's actors (already set up).
        envs: Envs over all of them (frames per iteration: ``envs * steps``).
        kind: ``replicated_rollout`` or ``async_replicated_rollout``.
        replace: Fragment target -> stand-in, filled here.
    """
    from torchfrag.policies.base import rollout_nodes

    policy, graph = ex.policy, ex.graph
    node = chain[0]
    ex.rollout_node = node if node in rollout_nodes(graph) else None
    ex.actors = list(actors)
    ex.state_frags = [graph.fragment(n) for n in chain]
    steps = getattr(graph.fragment(node), "steps", None)
    ex.full_frames = int(steps) * envs if isinstance(steps, int) else 0
    stub = _ActorsStub(ex, node) if kind != "async_replicated_rollout" else _AsyncActorsStub(ex, node)
    replace[graph.node(node).target] = stub
    for other in chain[1:]:  # ran on the actors: the stub's batch already went through them
        replace[graph.node(other).target] = Passthrough()
    if kind != "async_replicated_rollout" and getattr(policy, "advantage", "learner") == "on_arrival":
        # The per-env fragments left on the learner right after the actors' chain run on
        # each actor's batch as it arrives (in the stub), not on the gathered batch.
        from torchfrag.policies.base import per_env_chain

        following = per_env_chain(graph, node)
        if following[:len(chain) - 1] == chain[1:]:
            rest = following[len(chain) - 1:]
            ex.arrival_chain = [graph.fragment(n) for n in rest]
            for other in rest:
                replace[graph.node(other).target] = Passthrough()


def prepare_replicated_rollout(ex: RpcExecutor, placement: Any, replace: dict[str, nn.Module]) -> Any:
    """Sets the actors up; returns the driver's placed graph module."""
    from torchfrag.policies.factory import EnvSlice

    graph, calls = ex.graph, ex.calls
    workers = ex.cluster.workers
    extra = worker_extra(ex, placement)
    chain = actor_chain(placement)
    sizes = actor_sizes(ex, chain[0], len(workers))
    all_envs = sum(sizes)
    offsets = [sum(sizes[:i]) for i in range(len(workers))]
    futs = [setup_actor(ex, w, chain, EnvSlice(o, s, all_envs, i, i + 1), i + 1, extra)
            for i, (w, o, s) in enumerate(zip(workers, offsets, sizes))]
    calls.wait(futs, workers, count_bytes=False)
    install_actors(ex, chain, workers, all_envs, placement.kind, replace)
    calls.stats.calls = 0
    calls.stats.bytes_sent = 0
    return graph_module_with(graph, replace)
