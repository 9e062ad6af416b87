"""Gradient averaging over the replicas of a ``replicated_loop`` placement (``data_parallel``).

Every fragment that declares :meth:`~torchfrag.fragments.Fragment.has_gradient_sync` gets its
optimizer steps preceded by an all-reduce of its gradients (its own hook decides how).
"""
from __future__ import annotations

import contextlib
import datetime
from typing import Any

import torch

from torchfrag.graph import FragmentGraph

__all__ = ["GradientGroup", "allreduce_mean", "install_gradient_sync"]


def allreduce_mean(world: int) -> Any:
    import torch.distributed as dist

    def reduce(flat: torch.Tensor) -> None:
        dist.all_reduce(flat)
        flat.div_(world)

    return reduce


def install_gradient_sync(graph: FragmentGraph, world: int) -> list[tuple[Any, Any]]:
    """Broadcasts rank 0's state, installs the gradient sync of every learner; ``[(optimizer, undo)]``."""
    import torch.distributed as dist

    from torchfrag.policies.base import PolicyError

    # Every rank starts from rank 0's state (parameters and buffers), in the graph's node order.
    seen: set[int] = set()
    with torch.no_grad():
        for n in graph.nodes:
            for k, t in n.module.shared_state().items():
                if k.startswith("produced.") or id(t) in seen or t.dtype == torch.bool:
                    continue
                seen.add(id(t))
                dist.broadcast(t.data, src=0)
    out = []
    for n in graph.nodes:
        frag = n.module
        if frag.has_gradient_sync():
            undo = frag.install_gradient_sync(allreduce_mean(world))
            out.append((getattr(frag, "optimizer", None), undo))
    if not out:
        raise PolicyError("data_parallel needs a fragment that owns an optimizer and declares "
                          "gradient sync (Fragment.has_gradient_sync)")
    return out


class GradientGroup:
    """The driver's membership of a gradient all-reduce group (rank 0), owned by one executor.

    Example:
        >>> from torchfrag.runtime.gradsync import GradientGroup
        >>> GradientGroup().opts
        []
    """

    def __init__(self) -> None:
        self.opts: list[tuple[Any, Any]] = []

    def join(self, graph: FragmentGraph, backend: str, init_method: str, world: int, timeout: float) -> None:
        """Joins the process group as rank 0 and installs the gradient sync of the driver's learners."""
        import torch.distributed as dist

        dist.init_process_group(backend, init_method=init_method, rank=0, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout))
        self.opts = install_gradient_sync(graph, world)

    def close(self) -> None:
        """Leaves the process group; gives the driver's learners their optimizers back."""
        import torch.distributed as dist

        if dist.is_initialized():
            with contextlib.suppress(Exception):
                dist.destroy_process_group()
        for _opt, undo in self.opts:
            undo()

    def report(self, extra: dict[str, Any], done: int) -> None:
        """Gradient bytes and all-reduce calls per iteration, into ``extra["comm"]``."""
        if not self.opts:
            return
        opts = [o for o, _ in self.opts if o is not None]
        extra["comm"]["allreduce_bytes"] = sum(getattr(o, "reduced_bytes", 0) for o in opts) / max(1, done)
        extra["comm"]["allreduce_calls"] = sum(getattr(o, "reduce_calls", 0) for o in opts) / max(1, done)
