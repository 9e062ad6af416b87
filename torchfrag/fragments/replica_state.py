"""Buffers that stay each replica's own when fragments are placed apart.

A placed loop keeps every copy of a fragment in step with its owner: parameters *and*
buffers (an epsilon, running statistics) travel with the weights (see
:meth:`torchfrag.fragments.Fragment.shared_state`). Some state is meant to differ between
replicas: Ape-X gives actor ``i`` of ``N`` its own exploration rate
``0.4 ** (1 + 7 i / (N - 1))``, built by the loop's factory from the actor's
:class:`~torchfrag.policies.factory.EnvSlice`. Mark such a buffer with :func:`per_replica`
and no sync overwrites it: it is left out of the state the owner sends, on every policy,
and out of the bytes :func:`~torchfrag.policies.explain` counts.

The driver's own copy of a marked buffer is checkpointed with its loop as before; a replica
keeps the value its factory gave it (and whatever its own fragments make of it).

A buffer the factory builds differently on a worker but leaves unmarked is overwritten by the
driver's at the first sync: the run says so once, naming the buffers and the workers
(:func:`buffer_digests` on each side, :func:`differing_buffers` on the driver).
"""
from __future__ import annotations

import hashlib
from typing import Any

import torch
from torch import nn

__all__ = ["buffer_digests", "differing_buffers", "per_replica", "per_replica_keys"]

_ATTR = "_torchfrag_per_replica"


def per_replica(module: nn.Module, *names: str) -> nn.Module:
    """Marks buffers of ``module`` as each replica's own: placement never syncs them.

    Args:
        module: The module holding the buffers (e.g. TorchRL's ``EGreedyModule``).
        *names: Buffer names, as in ``module.named_buffers()`` (dotted for a child's).

    Returns:
        ``module`` itself, so that the call can wrap a constructor.

    Raises:
        ValueError: No name is given, or a name is not a buffer of ``module``
            (a parameter is always synced: it is what the learner trains).

    Example:
        >>> import torch
        >>> from torchfrag.fragments import per_replica
        >>> m = torch.nn.Module()
        >>> m.register_buffer("eps", torch.tensor(0.4))
        >>> per_replica(m, "eps") is m, sorted(per_replica_keys(m))
        (True, ['eps'])
    """
    if not names:
        raise ValueError("per_replica: name at least one buffer of the module")
    buffers = dict(module.named_buffers())
    unknown = [n for n in names if n not in buffers]
    if unknown:
        raise ValueError(f"per_replica: {unknown} are not buffers of {type(module).__name__} "
                         f"(its buffers: {sorted(buffers) or 'none'})")
    setattr(module, _ATTR, frozenset(getattr(module, _ATTR, frozenset())) | frozenset(names))
    return module


def per_replica_keys(module: nn.Module) -> frozenset[str]:
    """The ``state_dict`` keys of ``module`` that :func:`per_replica` marked, in it or its children.

    Example:
        >>> import torch
        >>> from torchfrag.fragments import per_replica
        >>> outer = torch.nn.Sequential(torch.nn.Linear(1, 1), torch.nn.Module())
        >>> outer[1].register_buffer("eps", torch.tensor(0.1))
        >>> sorted(per_replica_keys(per_replica(outer[1], "eps") and outer))
        ['1.eps']
    """
    out: set[str] = set()
    for prefix, sub in module.named_modules():
        for name in getattr(sub, _ATTR, ()):
            out.add(f"{prefix}.{name}" if prefix else name)
    return frozenset(out)


def buffer_digests(graph: Any) -> dict[str, tuple[tuple[int, ...], str, str]]:
    """``{name: (shape, dtype, sha1 of the bytes)}`` of every buffer placement syncs in ``graph``.

    The buffers of the modules whose state a fragment shares (its
    :meth:`~torchfrag.fragments.Fragment.shared_state`), less those marked :func:`per_replica`,
    named by their path in the captured loop (``greedy.eps``), so that the driver's and a
    worker's copies of one loop name them alike.

    Args:
        graph: A captured loop (:func:`torchfrag.graph.capture`).

    Example:
        >>> import torch
        >>> from torchfrag.fragments import Fragment
        >>> from torchfrag.graph import capture
        >>> class Scale(Fragment):
        ...     def __init__(self):
        ...         holder = torch.nn.Module()
        ...         holder.register_buffer("k", torch.tensor(2.0))
        ...         super().__init__(in_keys=["x"], out_keys=["x"], reads=holder)
        ...         self.holder = holder
        ...     def forward(self, td):
        ...         return td.set("x", td["x"] * self.holder.k)
        >>> class Loop(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.scale = Scale()
        ...     def forward(self, td):
        ...         return self.scale(td)
        >>> sorted(buffer_digests(capture(Loop(), in_keys=["x"])))
        ['scale.holder.k']
    """
    names = {id(b): name for name, b in graph.loop.named_buffers()}  # the first path to each
    out: dict[str, tuple[tuple[int, ...], str, str]] = {}
    for node in (n.name for n in graph.nodes):
        for i, m in graph.fragment(node).state_modules():
            own = per_replica_keys(m)
            for k, v in m.named_buffers():
                if k in own or not isinstance(v, torch.Tensor):
                    continue
                raw = v.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                out[names.get(id(v), f"{node}.m{i}.{k}")] = (tuple(v.shape), str(v.dtype),
                                                             hashlib.sha1(raw).hexdigest())
    return out


def differing_buffers(mine: dict[str, tuple[tuple[int, ...], str, str]],
                      theirs: dict[str, tuple[tuple[int, ...], str, str]]) -> list[str]:
    """Names in both digests (same shape and dtype) whose values differ, sorted.

    Example:
        >>> differing_buffers({"a": ((), "f", "1"), "b": ((), "f", "2")},
        ...                   {"a": ((), "f", "1"), "b": ((), "f", "3")})
        ['b']
    """
    return sorted(k for k, (shape, dtype, digest) in mine.items()
                  if k in theirs and theirs[k][:2] == (shape, dtype) and theirs[k][2] != digest)
