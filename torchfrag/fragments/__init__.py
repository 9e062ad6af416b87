"""Fragments: the TensorDict-in/TensorDict-out steps a training loop is made of.

Built-ins wrap TorchRL pieces: :class:`EnvStep`/:class:`EnvReset` (envs),
:class:`Act` (actors), :class:`Rollout` (act + env step over time, its body
captured), :class:`Collect` (collectors), :class:`Advantage` (value
estimators), :class:`Learn` (loss + optimizer), :class:`ReplayWrite` and
:class:`ReplaySample` (replay buffers). :func:`wrap` turns any TensorDict
module into a fragment in one line; subclass :class:`Fragment` for your own.

Example:
    >>> import torch
    >>> from tensordict.nn import TensorDictModule
    >>> from torchfrag.fragments import wrap
    >>> wrap(TensorDictModule(torch.nn.Linear(2, 1), ["x"], ["y"])).impure
    False
"""
from __future__ import annotations

from torchfrag.fragments.act import Act
from torchfrag.fragments.advantage import Advantage
from torchfrag.fragments.base import Fragment, Wrap, wrap
from torchfrag.fragments.env import EnvReset, EnvStep
from torchfrag.fragments.learn import Learn
from torchfrag.fragments.replay import ReplaySample, ReplayWrite
from torchfrag.fragments.replica_state import per_replica
from torchfrag.fragments.rollout import Collect, EpisodeStats, Rollout, RolloutStep

__all__ = [
    "Act",
    "Advantage",
    "Collect",
    "EnvReset",
    "EnvStep",
    "EpisodeStats",
    "Fragment",
    "Learn",
    "ReplaySample",
    "ReplayWrite",
    "Rollout",
    "RolloutStep",
    "Wrap",
    "per_replica",
    "wrap",
]
