"""Shared state on the wire: the tensors of several fragments packed into one buffer per dtype.

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
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

__all__ = ["pack_state", "unpack_state"]


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
