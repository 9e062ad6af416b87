"""Executors as classes: one class per way of running a placed loop, one registry of them.

A :class:`~torchfrag.policies.Placement` names its executor (:attr:`~torchfrag.policies.Placement.kind`);
:func:`executor_class` returns the class registered for it. Each class owns everything that
way of running needs: its driver half (what stands in for the placed fragments on the driver),
its worker half (the remote functions it calls), how it slices the envs over its workers
(:meth:`Executor.first_slice`, :meth:`Executor.check`), what its crossings are for
:func:`~torchfrag.policies.explain` (:meth:`Executor.crossings`) and its own state (an
instance per run: no state shared between executors).

Adding an executor kind touches two files: a module with the class (decorated with
:func:`register_executor`) and the module map :data:`BUILTIN` below (or an import of that
module before the run, for a user's executor).

Example:
    >>> from torchfrag.runtime.executor import executor_class
    >>> executor_class("in_process").kind
    'in_process'
    >>> executor_class("replicated_rollout").__name__
    'ReplicatedRollout'
"""
from __future__ import annotations

import contextlib
import importlib
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import torch
from tensordict import TensorDictBase
from torch import nn

from torchfrag.fragments.replica_state import buffer_digests, differing_buffers
from torchfrag.graph import FragmentGraph
from torchfrag.runtime.comm import Calls, CommStats
from torchfrag.runtime.launcher import Cluster, WorkerError
from torchfrag.runtime.state_sync import pack_state, rebase

logger = logging.getLogger(__name__)

__all__ = ["BUILTIN", "EXECUTORS", "Executor", "RpcExecutor", "executor_class", "register_executor"]

#: Executor kind -> its class (filled by :func:`register_executor` when the module is imported).
EXECUTORS: dict[str, type[Executor]] = {}

#: Executor kind -> the module that registers it (imported the first time the kind is asked for).
BUILTIN: dict[str, str] = {
    "in_process": "torchfrag.runtime.placed",
    "fused": "torchfrag.runtime.placed",
    "replicated_rollout": "torchfrag.runtime.replicated_rollout",
    "async_replicated_rollout": "torchfrag.runtime.replicated_rollout",
    "env_calls": "torchfrag.runtime.env_calls",
    "replicated_loop": "torchfrag.runtime.replicated_loop",
    "replicated_learners": "torchfrag.runtime.replicated_learners",
    "replay": "torchfrag.runtime.replay",
    "actor_pools": "torchfrag.runtime.actor_pools",
}


def register_executor(cls: type[Executor]) -> type[Executor]:
    """Class decorator: makes an :class:`Executor` subclass the one run for its ``kind``."""
    if not cls.kind:
        raise TypeError(f"{cls.__name__}: an executor needs a `kind`")
    EXECUTORS[cls.kind] = cls
    return cls


def executor_class(kind: str) -> type[Executor]:
    """The executor class registered for ``kind`` (importing its module on first use).

    Raises:
        PolicyError: No executor is registered for ``kind``.
    """
    if kind not in EXECUTORS and kind in BUILTIN:
        importlib.import_module(BUILTIN[kind])
    cls = EXECUTORS.get(kind)
    if cls is None:
        from torchfrag.policies.base import PolicyError

        raise PolicyError(f"no executor runs placements of kind {kind!r}; known: "
                          f"{sorted(set(EXECUTORS) | set(BUILTIN))} (register one with "
                          "torchfrag.runtime.executor.register_executor)")
    return cls


class Executor:
    """One way of running a placed loop (subclasses are registered per :attr:`kind`)."""

    #: The :attr:`~torchfrag.policies.Placement.kind` this class runs.
    kind: ClassVar[str] = ""
    #: Whether it runs every fragment in this process (no worker, no factory needed).
    runs_in_process: ClassVar[bool] = False

    # -- what is known before anything starts (class level: no instance, no process) -----
    @classmethod
    def crossings(cls, placement: Any) -> list[Any]:
        """The edges that cross processes, per iteration (:func:`torchfrag.policies.crossings`)."""
        return []

    @classmethod
    def first_slice(cls, placement: Any, total: int) -> Any:
        """The env slice the first worker gets (``None``: workers get no slice)."""
        return None

    @classmethod
    def check(cls, graph: FragmentGraph, placement: Any, factory: Any) -> None:
        """Raises :class:`~torchfrag.policies.PolicyError` when the envs cannot be split (before any start)."""

    @classmethod
    def run(cls, graph: FragmentGraph, placement: Any, factory: Any, iterations: int,
            hooks: Sequence[Any], inputs: Sequence[Any], start: int) -> Any:
        """Runs ``graph`` for ``iterations``; returns a :class:`~torchfrag.runtime.RunResult`."""
        raise NotImplementedError


class RpcExecutor(Executor):
    """An executor with worker processes: the driver half's run loop and the state every such half has.

    A subclass implements :meth:`setup` (start its workers, return the per-iteration callable)
    and may override :meth:`finish` (end an iteration), :meth:`close` and :meth:`report`.

    Attributes:
        policy: The policy.
        graph: The driver's captured loop.
        factory: The picklable loop factory workers call.
        cluster: The worker processes.
        calls: Issues and awaits RPCs, counting bytes into ``stats``.
        stats: Bytes and calls of this run.
        version: Iterations completed (the version of the driver's state).
        iteration: Index of the current iteration from the run's start.
        state_frags: The fragments whose state travels to the workers and whose produced
            state comes back.
        rollout_node: The rollout whose frames and episodes the driver accounts.
        options: The settings this executor reads (:meth:`option`): its placement's group
            options (:meth:`~torchfrag.policies.Placement.options`), set before :meth:`setup`.
    """

    #: The role whose device the driver's fragments use.
    driver_role: ClassVar[str] = "learner"

    def __init__(self, policy: Any, graph: FragmentGraph, factory: Any, cluster: Cluster,
                 calls: Calls | None = None, stats: CommStats | None = None) -> None:
        self.policy = policy
        self.graph = graph
        self.factory = factory
        self.cluster = cluster
        self.stats = stats if stats is not None else CommStats()
        self.calls = calls if calls is not None else Calls(cluster, policy.timeout, self.stats)
        self.version = 0
        self.iteration = 0
        self.state_frags: list[Any] = []
        self.rollout_node: str | None = None
        self.failed: list[str] = []
        self.frames_missing = 0
        self.options: dict[str, Any] = {}
        self._synced_version = -1
        self._state_cached: dict[torch.dtype, torch.Tensor] | None = None

    def wait_setup(self, futs: Sequence[Any], workers: Sequence[str]) -> list[Any]:
        """Waits for the workers' ``_remote_setup`` calls; says once which synced buffers differ.

        A worker's factory may build a buffer differently from the driver's loop (Ape-X's
        per-actor epsilon). Unless marked :func:`~torchfrag.fragments.per_replica`, the first
        sync overwrites it with the driver's value: a warning names the buffers and workers.
        """
        results = self.calls.wait(futs, workers, count_bytes=False)
        mine = buffer_digests(self.graph)
        differ: dict[str, list[str]] = {}
        for worker, result in zip(workers, results):
            theirs = result.get("buffers") if isinstance(result, dict) else None
            for name in differing_buffers(mine, theirs or {}):
                differ.setdefault(name, []).append(worker)
        if differ:
            listing = "; ".join(f"{name} on {', '.join(ws)}" for name, ws in sorted(differ.items()))
            logger.warning(
                "policy %s: the loop factory built buffers differently on workers than on the "
                "driver (%s); placement syncs buffers like weights, so they will take the driver's "
                "values. If each worker should keep its own, mark them: "
                "torchfrag.fragments.per_replica(module, name, ...)", self.policy.name, listing)
        return results

    def option(self, key: str, default: Any = None) -> Any:
        """A setting from the groups' ``options`` (a policy class without them: its field ``key``)."""
        return self.options[key] if key in self.options else getattr(self.policy, key, default)

    # -- the driver half --------------------------------------------------------------------
    def setup(self, placement: Any, replace: dict[str, nn.Module]) -> Callable[..., Any]:
        """Starts this executor's workers; returns what runs one iteration on the driver."""
        raise NotImplementedError

    def finish(self, out: Any) -> Any:
        """Ends an iteration on the driver (waits for the other replicas); returns its output."""
        return out

    def after_iteration(self, out: Any) -> None:
        """Called once per iteration after :meth:`finish` and the version bump."""

    def close(self) -> None:
        """Releases what :meth:`setup` took besides the worker processes."""

    def report(self, extra: dict[str, Any], done: int) -> None:
        """Adds this executor's own figures to ``RunResult.extra``."""

    def reset_counts(self) -> None:
        """Forgets the start-up's traffic: what a run reports is its iterations'."""
        self.stats.calls = 0
        self.stats.bytes_sent = 0
        self.stats.bytes_received = 0

    # -- state that travels: the same rules for every executor -----------------------------
    def weights_for_sync(self, force: bool = False) -> dict[torch.dtype, torch.Tensor] | None:
        """The workers' chain state to send with this request (``None``: no sync this iteration).

        The :meth:`~torchfrag.fragments.Fragment.shared_state` of every fragment the workers
        run, packed into one CPU buffer per dtype (:func:`~torchfrag.runtime.state_sync.pack_state`);
        built once per version and sent to every worker.
        """
        every = int(self.option("sync_every", 1))
        if self._synced_version == self.version:
            return None if not force else self._state_cached
        if not force and self._synced_version >= 0 and self.iteration % every != 0:
            return None
        self._state_cached = pack_state([f.shared_state() for f in self.state_frags])
        self._synced_version = self.version
        return self._state_cached

    def merge_produced(self, produced: Sequence[list[list[torch.Tensor]]]) -> None:
        """Folds the workers' produced state (running statistics) into the driver's fragments.

        Args:
            produced: Per worker, per fragment of the chain, what its run added to the state
                it started from (:func:`~torchfrag.runtime.state_sync.produced_delta`). Each is
                rebased on the driver's current state, so every fragment merges replicas that
                all started from ``base``, whatever version each worker actually held.
        """
        if not produced:
            return
        for i, frag in enumerate(self.state_frags):
            base = {k: v.detach().clone() for k, v in frag.produced_state().items()}
            if not base:
                continue
            frag.merge_produced_state(base, [rebase(base, p[i]) for p in produced])
            self.reduce_produced(frag, base)

    def reduce_produced(self, frag: Any, base: dict[str, Any]) -> None:
        """Merges a fragment's produced state further after the workers' deltas (several learners)."""

    def account(self, batch: TensorDictBase, reward: torch.Tensor | None = None) -> None:
        """Frames and episode stats of a gathered batch, kept on the driver's rollout fragment.

        Args:
            batch: The gathered batch.
            reward: The rollout's own rewards when the batch's were rescaled on the workers.
        """
        if self.rollout_node is None:
            return
        ro = self.graph.fragment(self.rollout_node)
        if hasattr(ro, "frames"):
            ro.frames += batch.numel()
        stats = getattr(ro, "stats", None)
        if stats is not None and batch.ndim == 2 and "next" in batch.keys():
            nxt = batch.get("next")
            stats.update(nxt.get("reward") if reward is None else reward, nxt.get("done"))

    # -- the run ----------------------------------------------------------------------------
    @classmethod
    def run(cls, graph: FragmentGraph, placement: Any, factory: Any, iterations: int,
            hooks: Sequence[Any], inputs: Sequence[Any], start: int) -> Any:
        from torchfrag.runtime.local import RunResult

        policy = placement.policy
        cluster = Cluster(policy.num_workers, timeout=policy.timeout, addr=policy.master_addr,
                          port=policy.master_port)
        ex = cls(policy, graph, factory, cluster)
        ex.options = placement.options()
        replace: dict[str, nn.Module] = {}
        hooks = list(hooks or ())
        out: Any = None
        done = 0
        stopped = False
        t0 = time.perf_counter()
        stack = contextlib.ExitStack()
        driver_device = policy.device(cls.driver_role)
        try:
            if driver_device != "cpu":  # the driver's fragments on their role's device
                from torchfrag.runtime.placed import on_device

                stack.enter_context(on_device(graph, driver_device))
            cluster.start()
            fn = ex.setup(placement, replace)
            args = tuple(inputs)
            for i in range(start, start + iterations):
                ex.iteration = i - start
                out = fn(*args) if fn is not None else None
                out = ex.finish(out)
                ex.version += 1
                ex.after_iteration(out)
                done += 1
                if hooks and any([bool(h(i, out, graph)) for h in hooks]):
                    stopped = True
                    break
        finally:
            stack.close()
            cluster.shutdown()
            ex.close()
        seconds = time.perf_counter() - t0
        if ex.frames_missing:
            logger.warning("policy %s: %d frames fewer than asked were collected (failed actors: %s; "
                           "on_failure=continue)", policy.name, ex.frames_missing, ", ".join(ex.failed))
        extra = {"comm": ex.stats.per_iteration(done), "comm_total": ex.stats, "failed": list(ex.failed),
                 "frames_missing": ex.frames_missing, "policy": policy.name, "executor": cls.kind}
        ex.report(extra, done)
        return RunResult(graph, done, out, seconds, stopped, extra)


def continue_on_failure(ex: Any, workers: list[str], worker: str, err: WorkerError) -> bool:
    """Whether the run goes on without ``worker`` (option ``on_failure == "continue"``); drops it."""
    if ex.option("on_failure", "raise") != "continue":
        return False
    logger.warning("actor %s failed (%s); continuing with %d actor(s)", worker,
                   str(err).splitlines()[0], len(workers) - 1)
    if worker in workers:
        workers.remove(worker)
    ex.failed.append(worker)
    return bool(workers)
