"""The :class:`Act` fragment: runs a TorchRL actor to pick actions."""
from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType
from torch import nn
from torchrl.envs.utils import set_exploration_type

from torchfrag.fragments.base import Fragment

__all__ = ["Act"]

_EXPLORATION = {
    "random": InteractionType.RANDOM,
    "deterministic": InteractionType.DETERMINISTIC,
    "mode": InteractionType.MODE,
    "mean": InteractionType.MEAN,
}


class Act(Fragment):
    """Wraps any TorchRL actor (e.g. ``ProbabilisticActor``) as a fragment.

    The actor runs without gradients, with the given exploration type. Its
    parameters are *read* (the learn fragment that trains them owns them),
    which :func:`torchfrag.capture` records as a weight-sync edge.

    Args:
        actor: A TensorDict module with ``in_keys``/``out_keys``.
        exploration: ``"random"`` (sample), ``"deterministic"``, ``"mode"`` or ``"mean"``.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchfrag.fragments import Act
        >>> act = Act(TensorDictModule(torch.nn.Linear(4, 1), ["observation"], ["action"]))
        >>> act(TensorDict(observation=torch.zeros(3, 4), batch_size=[3]))["action"].shape
        torch.Size([3, 1])
    """

    def __init__(self, actor: nn.Module, exploration: str = "random") -> None:
        if exploration not in _EXPLORATION:
            raise ValueError(f"exploration must be one of {sorted(_EXPLORATION)}, got {exploration!r}")
        super().__init__(actor.in_keys, actor.out_keys, reads=actor)
        self.actor = actor
        self.exploration = exploration
        self._itype = _EXPLORATION[exploration]

    def describe(self) -> str:
        return f"Act({type(self.actor).__name__}, {self.exploration})"

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        with torch.no_grad(), set_exploration_type(self._itype):
            return self.actor(tensordict)
