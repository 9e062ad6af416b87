"""Gradient averaging over the replicas of a ``replicated_loop`` placement (``data_parallel``).

Every fragment that declares :meth:`~torchfrag.fragments.Fragment.has_gradient_sync` gets its
optimizer steps preceded by an all-reduce of its gradients (its own hook decides how).
"""
from __future__ import annotations

from typing import Any

import torch

from torchfrag.graph import FragmentGraph

__all__ = ["allreduce_mean", "install_gradient_sync"]


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
