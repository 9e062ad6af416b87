"""What every RPC executor shares: byte counting, the call/wait helper, env splitting.

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
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
from tensordict import TensorDictBase
from torch import nn

from torchfrag.graph import FragmentGraph
from torchfrag.runtime.launcher import Cluster, WorkerDied, WorkerError, WorkerTimeout

logger = logging.getLogger(__name__)

__all__ = ["Calls", "CommStats", "Passthrough", "add_replica_frames", "cat_raw", "envs_of", "graph_module_with",
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


def add_replica_frames(graph: FragmentGraph, last: list[dict[str, int]],
                       results: Sequence[dict[str, Any]]) -> None:
    """Adds the frames other replicas (or learners) collected since their last report to the
    driver's rollouts, each to the rollout of the same node.

    Args:
        graph: The driver's graph.
        last: Per replica, node -> the total it last reported (kept by the executor, updated here).
        results: One :func:`~torchfrag.runtime.worker._remote_dp_iterate` answer per replica,
            in a fixed replica order; ``"frames"`` maps a node to its running total there.
    """
    while len(last) < len(results):
        last.append({})
    for seen, answer in zip(last, results):
        for node, total in answer["frames"].items():
            frag = graph.fragment(node)
            frag.frames += int(total) - seen.get(node, 0)
            seen[node] = int(total)


def split_sizes(n: int, parts: int) -> list[int]:
    base, extra = divmod(n, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def total_envs(ex: Any, node: str) -> int:
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
