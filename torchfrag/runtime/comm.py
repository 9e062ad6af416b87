"""What every RPC executor shares: byte counting, the call/wait helper, the executor state.

Example:
    >>> from torchfrag.runtime.comm import CommStats
    >>> CommStats().per_iteration(1)
    {'bytes': 0.0, 'calls': 0.0}
"""
from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from tensordict import TensorDictBase
from torch import nn

from torchfrag.graph import FragmentGraph
from torchfrag.runtime.launcher import Cluster, WorkerDied, WorkerError, WorkerTimeout
from torchfrag.runtime.state_sync import pack_state, rebase

logger = logging.getLogger(__name__)

__all__ = ["Calls", "CommStats", "Passthrough", "RpcExecutor", "add_replica_frames", "cat_raw", "envs_of", "graph_module_with",
           "nbytes", "split_sizes", "total_envs"]


def nbytes(obj: Any) -> int:
    if obj is None:
        return 0
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, TensorDictBase):
        return sum(nbytes(v) for v in obj.values(True, True))
    if isinstance(obj, dict):
        return sum(nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(nbytes(v) for v in obj)
    return 0


@dataclass
class CommStats:
    """Bytes and RPC calls between the driver and its workers.

    Attributes:
        bytes_sent: Tensor bytes the driver sent.
        bytes_received: Tensor bytes the driver received.
        calls: RPC calls issued by the driver (start-up and shutdown excluded).
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    calls: int = 0

    def per_iteration(self, iterations: int) -> dict[str, float]:
        """Mean bytes (both ways) and calls per iteration."""
        n = max(1, iterations)
        return {"bytes": (self.bytes_sent + self.bytes_received) / n, "calls": self.calls / n}


def graph_module_with(graph: FragmentGraph, replace: dict[str, nn.Module]) -> fx.GraphModule:
    """A copy of the graph's fx module with some fragment submodules swapped for stubs."""
    gm = graph.module
    root: dict[str, Any] = {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            root[node.target] = replace.get(node.target, gm.get_submodule(node.target))
    return fx.GraphModule(root, copy.deepcopy(gm.graph), class_name="Placed" + type(gm).__name__)


class Calls:
    """Issues RPCs, counts them, waits on futures while watching the worker processes."""

    def __init__(self, cluster: Cluster, timeout: float, stats: CommStats) -> None:
        self.cluster = cluster
        self.timeout = float(timeout)
        self.stats = stats

    def call(self, worker: str, fn: Any, *args: Any, timeout: float | None = None) -> Any:
        from torch.distributed import rpc

        self.stats.calls += 1
        self.stats.bytes_sent += nbytes(args)
        fut = rpc.rpc_async(worker, fn, args=args, timeout=self.timeout if timeout is None else timeout)
        return fut

    def wait(self, futs: Sequence[Any], workers: Sequence[str], count_bytes: bool = True) -> list[Any]:
        """Results of all ``futs`` (raising the first failure as a WorkerError)."""
        return [self.wait_one(f, w, count_bytes) for f, w in zip(futs, workers)]

    def wait_one(self, fut: Any, worker: str, count_bytes: bool = True) -> Any:
        ev = threading.Event()
        fut.add_done_callback(lambda _f: ev.set())
        deadline = time.monotonic() + self.timeout + 10.0
        while not ev.wait(0.2):
            self.cluster.check_alive([worker])
            if time.monotonic() > deadline:
                self.cluster.lost.add(worker)
                raise WorkerTimeout(f"{self.cluster.where(worker)} did not answer within {self.timeout:.1f}s "
                                    f"(policy.timeout){self.cluster.stopped_hint(worker)}", worker)
        try:
            value = fut.wait()
        except Exception as err:  # noqa: BLE001 - translated
            raise self.translate(err, worker) from None
        if count_bytes:
            self.stats.bytes_received += nbytes(value)
        return value

    def translate(self, err: BaseException, worker: str) -> WorkerError:
        text = str(err)
        dead = self.cluster.dead()
        if worker in dead or (dead and ("connection" in text.lower() or "eof" in text.lower()
                                        or "pipe" in text.lower())):
            who = worker if worker in dead else dead[0]
            try:
                self.cluster.check_alive([who])
            except WorkerDied as died:
                return WorkerDied(f"{died} (while waiting for {worker})", who)
        first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
        if "timed out" in text.lower() or "timeout" in text.lower():
            hint = ("; its host may be down or cut off" if self.cluster.torchrun
                    else self.cluster.stopped_hint(worker))
            self.cluster.lost.add(worker)
            return WorkerTimeout(f"{self.cluster.where(worker)} did not answer within {self.timeout:.1f}s "
                                 f"(policy.timeout){hint}: {first}", worker)
        if self.cluster.torchrun and _connection_lost(text):
            self.cluster.lost.add(worker)
            return WorkerDied(f"{self.cluster.where(worker)} closed its connection: its process or its host "
                              f"died ({first})", worker)
        if not self.cluster.torchrun:
            # Wait briefly: a connection error is often the first sign of a death.
            time.sleep(0.3)
            if worker in self.cluster.dead():
                try:
                    self.cluster.check_alive([worker])
                except WorkerDied as died:
                    return died
        return WorkerError(f"{worker} raised:\n{text}", worker)


#: What TensorPipe and gloo say when the other end of a connection is gone.
_LOST = ("eof", "connection reset", "connection closed", "connection refused", "broken pipe", "pipe closed")


def _connection_lost(text: str) -> bool:
    """Whether an RPC error's text says the connection to the worker broke (not a remote exception)."""
    low = text.lower()
    return "traceback" not in low and any(m in low for m in _LOST)


def cat_raw(raws: Sequence[torch.Tensor | None]) -> torch.Tensor | None:
    """The actors' raw rewards concatenated along the env dimension (``None`` when none were sent)."""
    if not raws or any(r is None for r in raws):
        return None
    return torch.cat(list(raws), dim=0) if len(raws) > 1 else raws[0]


class Passthrough(nn.Module):
    """Stands in on the driver for a fragment that ran on the actors after their rollout."""

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict


@dataclass
class RpcExecutor:
    policy: Any
    graph: FragmentGraph
    factory: Any
    cluster: Cluster
    calls: Calls = None  # type: ignore[assignment]
    stats: CommStats = field(default_factory=CommStats)
    version: int = 0
    synced_version: int = -1
    actors: list[str] = field(default_factory=list)
    env_workers: list[str] = field(default_factory=list)
    lags: list[int] = field(default_factory=list)
    last_lag: list[int] = field(default_factory=list)
    dropped: int = 0
    failed: list[str] = field(default_factory=list)
    frames_missing: int = 0
    full_frames: int = 0
    rollout_node: str | None = None
    arrival_chain: list[nn.Module] = field(default_factory=list)
    iteration: int = 0
    dp_opts: list[tuple[Any, Any]] = field(default_factory=list)
    state_frags: list[Any] = field(default_factory=list)
    #: Per replica (``data_parallel``) or learner (``multi_learner``): node -> frames it last reported.
    replica_frames: list[dict[str, int]] = field(default_factory=list)
    #: ``reduce(fragment, base)``: merges a fragment's produced state over several learners
    #: after its own actors' were folded in (``multi_learner``); ``None``: one learner.
    reduce_produced: Any = None

    def weights_for_sync(self, force: bool = False) -> dict[torch.dtype, torch.Tensor] | None:
        """The actors' chain state to send with this request (``None``: no sync this iteration).

        The :meth:`~torchfrag.fragments.Fragment.shared_state` of every fragment the actors
        run, packed into one CPU buffer per dtype (:func:`~torchfrag.runtime.state_sync.pack_state`);
        built once per version and sent to every actor.
        """
        every = int(getattr(self.policy, "sync_every", 1))
        if self.synced_version == self.version:
            return None if not force else self._state_cached
        if not force and self.synced_version >= 0 and self.iteration % every != 0:
            return None
        self._state_cached = pack_state([f.shared_state() for f in self.state_frags])
        self.synced_version = self.version
        return self._state_cached

    def merge_produced(self, produced: Sequence[list[list[torch.Tensor]]]) -> None:
        """Folds the actors' produced state (running statistics) into the driver's fragments.

        Args:
            produced: Per actor, per fragment of the chain, what its run added to the state it
                started from (:func:`~torchfrag.runtime.state_sync.produced_delta`). Each is
                rebased on the driver's current state, so every fragment merges replicas that
                all started from ``base``, whatever version each actor actually held.
        """
        if not produced:
            return
        for i, frag in enumerate(self.state_frags):
            base = {k: v.detach().clone() for k, v in frag.produced_state().items()}
            if not base:
                continue
            frag.merge_produced_state(base, [rebase(base, p[i]) for p in produced])
            if self.reduce_produced is not None:
                self.reduce_produced(frag, base)

    def account(self, batch: TensorDictBase, reward: torch.Tensor | None = None) -> None:
        """Frames and episode stats of a gathered batch, kept on the driver's rollout fragment.

        Args:
            batch: The gathered batch.
            reward: The rollout's own rewards when the batch's were rescaled on the actors.
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

    def continue_on_failure(self, worker: str, err: WorkerError) -> bool:
        if getattr(self.policy, "on_failure", "raise") != "continue":
            return False
        logger.warning("actor %s failed (%s); continuing with %d actor(s)", worker,
                       str(err).splitlines()[0], len(self.actors) - 1)
        if worker in self.actors:
            self.actors.remove(worker)
        self.failed.append(worker)
        if not self.actors:
            return False
        return True


def add_replica_frames(ex: RpcExecutor, results: Sequence[dict[str, Any]]) -> None:
    """Adds the frames other replicas (or learners) collected since their last report to the
    driver's rollouts, each to the rollout of the same node.

    Args:
        ex: The driver's executor; ``ex.replica_frames`` keeps each replica's last totals.
        results: One :func:`~torchfrag.runtime.worker._remote_dp_iterate` answer per replica,
            in a fixed replica order; ``"frames"`` maps a node to its running total there.
    """
    while len(ex.replica_frames) < len(results):
        ex.replica_frames.append({})
    for seen, answer in zip(ex.replica_frames, results):
        for node, total in answer["frames"].items():
            frag = ex.graph.fragment(node)
            frag.frames += int(total) - seen.get(node, 0)
            seen[node] = int(total)


def split_sizes(n: int, parts: int) -> list[int]:
    base, extra = divmod(n, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def total_envs(ex: RpcExecutor, node: str) -> int:
    return envs_of(ex.graph, ex.factory, node)


def envs_of(graph: FragmentGraph, factory: Any, node: str) -> int:
    frag = graph.fragment(node)
    env = getattr(frag, "env", None)
    if env is not None:
        return int(env.batch_size.numel())
    n = getattr(factory, "num_envs", None)
    if n is None:
        raise WorkerError(f"cannot tell how many envs {node} steps")
    return int(n)
