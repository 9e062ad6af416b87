"""Replay-buffer fragments: :class:`ReplayWrite` and :class:`ReplaySample`."""
from __future__ import annotations

from collections.abc import Sequence

from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torchrl.data import ReplayBuffer

from torchfrag.fragments.base import Fragment

__all__ = ["ReplayWrite", "ReplaySample"]


class ReplayWrite(Fragment):
    """Extends a TorchRL replay buffer with the (flattened) input; returns the input.

    Returning the input lets a loop order a later :class:`ReplaySample` after
    the write by passing the result on (``td = self.write(td); batch = self.sample(td)``).

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, ReplayBuffer
        >>> from torchfrag.fragments import ReplayWrite
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(100))
        >>> _ = ReplayWrite(rb)(TensorDict(x=torch.zeros(4, 5), batch_size=[4, 5]))
        >>> len(rb)
        20
    """

    impure = True

    def __init__(self, buffer: ReplayBuffer, in_keys: Sequence[NestedKey] = ()) -> None:
        super().__init__(in_keys, (), state=[buffer])
        self.buffer = buffer

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.buffer.extend(tensordict.reshape(-1))
        return tensordict


class ReplaySample(Fragment):
    """Samples a batch from a TorchRL replay buffer.

    Args:
        buffer: The buffer (the same object a :class:`ReplayWrite` fills).
        batch_size: Sample size; the buffer's own when ``None``.
        out_keys: Keys the samples carry (for the graph's key check); unknown when empty.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import LazyTensorStorage, ReplayBuffer
        >>> from torchfrag.fragments import ReplaySample
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(100))
        >>> _ = rb.extend(TensorDict(x=torch.arange(10), batch_size=[10]))
        >>> ReplaySample(rb, batch_size=4)().batch_size
        torch.Size([4])
    """

    impure = True
    passthrough = False

    def __init__(self, buffer: ReplayBuffer, batch_size: int | None = None,
                 out_keys: Sequence[NestedKey] = ()) -> None:
        super().__init__((), out_keys, state=[buffer])
        self.buffer = buffer
        self.batch_size = batch_size

    def output_keys(self, available: frozenset | None) -> list[frozenset | None]:
        return [frozenset(self.out_keys) if self.out_keys else None]

    def forward(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        return self.buffer.sample(self.batch_size)
