"""Shared state on the wire (packed per dtype) and produced state merged as deltas.

The driver sends the :meth:`~torchfrag.fragments.Fragment.shared_state` of the fragments an
actor runs with every request that syncs them. Packed, that is one copy per dtype on the
driver (instead of one clone per tensor), one tensor per dtype for the RPC layer to pickle
and TensorPipe to send (instead of one per parameter and buffer), and always CPU tensors,
whatever the learner's device. The actor, which built the same fragments from the same
factory, cuts the buffers back into views shaped like its own live tensors.

Example:
    >>> import torch
    >>> from torchfrag.runtime.state_sync import pack_state, unpack_state
    >>> driver = [{"w": torch.ones(2, 2), "n": torch.tensor(3)}, {"b": torch.zeros(3)}]
    >>> packed = pack_state(driver)
    >>> sorted(str(d) for d in packed), packed[torch.float32].shape
    (['torch.float32', 'torch.int64'], torch.Size([7]))
    >>> actor = [{"w": torch.empty(2, 2), "n": torch.tensor(0)}, {"b": torch.empty(3)}]
    >>> unpack_state(packed, actor)[0]["n"]
    tensor(3)

State a fragment produces where it runs (:meth:`~torchfrag.fragments.Fragment.produced_state`:
running statistics, counters) travels back as a *delta*: what this run added to the state
the worker held when it started (:func:`produced_delta`). A worker that started from an
older version (``async_actors``, ``sync_every > 1``) so still contributes exactly what it
produced; the owner rebases every delta on its current state (:func:`rebase`) before it
merges.

    >>> before = {"n": torch.tensor(5), "mu": torch.tensor(1.0), "ok": torch.tensor(False)}
    >>> after = {"n": torch.tensor(9), "mu": torch.tensor(1.5), "ok": torch.tensor(True)}
    >>> delta = produced_delta(before, after)
    >>> rebase({"n": torch.tensor(100), "mu": torch.tensor(2.0), "ok": torch.tensor(False)}, delta)
    {'n': tensor(104), 'mu': tensor(2.5000), 'ok': tensor(True)}
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["allreduce_produced", "pack_state", "produced_bases", "produced_delta", "rebase", "snapshot",
           "unpack_state"]


def pack_state(groups: Sequence[Mapping[str, torch.Tensor]]) -> dict[torch.dtype, torch.Tensor]:
    """Copies every tensor of ``groups`` (in order) into one flat CPU buffer per dtype.

    Args:
        groups: One ``{key: tensor}`` per fragment (its ``shared_state()``), any devices.

    Returns:
        ``{dtype: 1-D CPU tensor}``; a new copy (later in-place updates of the live tensors
        do not reach a request already sent).
    """
    flat: dict[torch.dtype, list[torch.Tensor]] = {}
    for group in groups:
        for t in group.values():
            flat.setdefault(t.dtype, []).append(t.detach().reshape(-1).to("cpu"))
    return {d: torch.cat(ts) if len(ts) > 1 else ts[0].clone() for d, ts in flat.items()}


def unpack_state(packed: Mapping[torch.dtype, torch.Tensor],
                 templates: Sequence[Mapping[str, torch.Tensor]]) -> list[dict[str, torch.Tensor]]:
    """Cuts what :func:`pack_state` made back into ``{key: tensor}`` per group, shaped as ``templates``.

    Args:
        packed: The buffers :func:`pack_state` returned on the other side.
        templates: This side's live tensors (same groups, keys, order, shapes and dtypes).

    Returns:
        One dict of views into ``packed`` per group.

    Raises:
        ValueError: The two sides' state does not have the same layout (a fragment built
            differently on the driver and on the actor).
    """
    offsets = dict.fromkeys(packed, 0)
    out: list[dict[str, torch.Tensor]] = []
    for i, group in enumerate(templates):
        views: dict[str, torch.Tensor] = {}
        for key, t in group.items():
            buf = packed.get(t.dtype)
            start, n = offsets.get(t.dtype, 0), t.numel()
            if buf is None or start + n > buf.numel():
                raise ValueError(f"shared state of fragment {i} ({key!r}: {t.dtype}, shape "
                                 f"{list(t.shape)}) is missing from what the driver sent: the driver's "
                                 "and the actor's fragments differ; build both from the same factory")
            views[key] = buf[start:start + n].view(t.shape)
            offsets[t.dtype] = start + n
        out.append(views)
    extra = {str(d): int(b.numel()) - offsets[d] for d, b in packed.items() if offsets[d] != b.numel()}
    if extra:
        raise ValueError(f"the driver sent more shared state than the actor's fragments hold ({extra} "
                         "elements left over per dtype): the driver's and the actor's fragments differ")
    return out


def snapshot(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A detached CPU copy of ``state`` (later in-place updates of the live tensors do not reach it)."""
    return {k: v.detach().to("cpu", copy=True) for k, v in state.items()}


def produced_delta(before: Mapping[str, torch.Tensor], after: Mapping[str, torch.Tensor]
                   ) -> list[torch.Tensor]:
    """What one run added to a fragment's produced state, in ``after``'s key order.

    Args:
        before: The state when the run started (:func:`snapshot`).
        after: The state when it ended (any device).

    Returns:
        One CPU tensor per entry: ``after - before``; a flag (``bool``) is not a quantity
        and travels as its value.
    """
    out = []
    for key, value in after.items():
        now = value.detach().to("cpu", copy=True)
        out.append(now if now.dtype == torch.bool else now - before[key].to(now.dtype))
    return out


def rebase(base: Mapping[str, torch.Tensor], delta: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state a worker would hold had it started from ``base``: ``base + delta`` per entry.

    Args:
        base: The owner's current produced state (its key order is the worker's).
        delta: What :func:`produced_delta` returned on the worker.

    Raises:
        ValueError: The two sides' produced state has a different number of entries.
    """
    if len(delta) != len(base):
        raise ValueError(f"a worker returned {len(delta)} produced-state entries where its owner has "
                         f"{len(base)} ({list(base)}): the fragments differ; build both from the same factory")
    out = {}
    for (key, b), d in zip(base.items(), delta):
        d = d.to(b.device)
        out[key] = d.clone() if b.dtype == torch.bool else b + d.to(b.dtype)
    return out


def allreduce_produced(frag: Any, base: Mapping[str, torch.Tensor]) -> None:
    """Merges a fragment's produced state over the default process group, from a common ``base``.

    Every rank started from ``base`` (the previous merge) and ran on its own data. Every rank
    gathers every rank's state and merges them in rank order with the fragment's own rule
    (:meth:`~torchfrag.fragments.Fragment.merge_produced_state`: the rule the driver applies
    to its actors' deltas), so every rank ends with the same state and the same rules hold
    under every policy; flags keep this rank's value.
    """
    import torch.distributed as dist

    world = dist.get_world_size()
    mine = frag.produced_state()
    if not mine:
        return
    replicas: list[dict[str, torch.Tensor]] = [{} for _ in range(world)]
    for key, value in mine.items():
        t = value.detach().contiguous()
        parts = [torch.empty_like(t) for _ in range(world)]
        dist.all_gather(parts, t)
        for rank, part in enumerate(parts):
            replicas[rank][key] = part
    flags = {k: v.detach().clone() for k, v in mine.items() if v.dtype == torch.bool}
    start = {k: v.to(mine[k].device) for k, v in base.items()}
    frag.merge_produced_state(start, replicas)
    if flags:
        frag.load_produced_state(flags)


def produced_bases(fragments: Sequence[Any]) -> list[tuple[Any, dict[str, torch.Tensor]]]:
    """``(fragment, snapshot of its produced state)`` for each distinct fragment that has some.

    Taken when an iteration starts, these are the common ``base`` of
    :func:`allreduce_produced` when it ends.
    """
    out, seen = [], set()
    for frag in fragments:
        state = frag.produced_state()
        if state and id(frag) not in seen:
            seen.add(id(frag))
            out.append((frag, snapshot(state)))
    return out
