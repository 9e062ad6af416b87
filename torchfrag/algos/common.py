"""Former home of the shared algorithm pieces; they now live in modules named for what they hold.

Kept so that existing imports keep working:

* :mod:`torchfrag.algos.config` - :class:`AlgoConfig`,
* :mod:`torchfrag.algos.envs` - ``is_discrete``, ``is_image``,
* :mod:`torchfrag.algos.networks` - ``mlp``, ``NatureCNN``, ``make_cnn_actor_critic``,
* :mod:`torchfrag.algos.fragments` - ``TargetUpdate``, ``Anneal``,
* :mod:`torchfrag.algos.replay` - ``RandomActor``, ``prefill``,
* :mod:`torchfrag.algos.loop` - ``LoopBase``,
* :mod:`torchfrag.algos.actor_critic` - ``actor_critic_learn``,
* :mod:`torchfrag.algos.factory` - ``AlgoFactory``.

Example:
    >>> from torchfrag.algos.common import mlp
    >>> from torchfrag.algos.networks import mlp as same
    >>> mlp is same
    True
"""
from __future__ import annotations

from torchfrag.algos.actor_critic import actor_critic_learn
from torchfrag.algos.config import AlgoConfig
from torchfrag.algos.envs import is_discrete, is_image
from torchfrag.algos.factory import AlgoFactory
from torchfrag.algos.fragments import Anneal, TargetUpdate
from torchfrag.algos.loop import LoopBase
from torchfrag.algos.networks import NatureCNN, make_cnn_actor_critic, mlp
from torchfrag.algos.replay import RandomActor, prefill

__all__ = [
    "AlgoConfig", "AlgoFactory", "Anneal", "LoopBase", "NatureCNN", "RandomActor", "TargetUpdate",
    "actor_critic_learn", "is_discrete", "is_image", "make_cnn_actor_critic", "mlp", "prefill",
]
