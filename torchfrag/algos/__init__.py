"""RL algorithms written as loops of fragments.

Example:
    >>> from torchfrag.algos import ALGOS
    >>> sorted(ALGOS)
    ['ppo']
"""
from __future__ import annotations

ALGOS = {"ppo": "torchfrag.algos.ppo"}

__all__ = ["ALGOS"]
