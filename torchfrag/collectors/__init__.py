"""TorchRL collectors over the native env pool.

Example:
    >>> from torchfrag.collectors import PoolCollector
    >>> collector = PoolCollector("CartPole-v1", None, num_envs=4, frames_per_batch=40,
    ...                           total_frames=80)
    >>> [batch.batch_size for batch in collector]
    [torch.Size([4, 10]), torch.Size([4, 10])]
    >>> collector.shutdown()
"""
from __future__ import annotations

from torchfrag.collectors.pool_collector import PoolCollector

__all__ = ["PoolCollector"]
