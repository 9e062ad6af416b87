"""RL algorithms written as loops of fragments, all in one shape.

Every algorithm module (``ppo``, ``a2c``, ``dqn``, ``sac``, ``impala``) holds:

* ``<Algo>Config`` - a dataclass extending :class:`AlgoConfig`, the single
  source of its defaults (``conf/algo/<name>.yaml`` only overrides),
* ``<Algo>Loop`` - the loop module of fragments (``forward()`` = one iteration),
* ``build_<algo>(env, cfg)`` - networks and loop on a training env,
* ``make_<algo>(env_id, cfg, seed, env_options)`` - the loop for all envs.

One picklable :class:`AlgoFactory` builds any of them, locally or on a
worker's slice of envs; a user's algorithm subclasses it (see
:mod:`torchfrag.algos.factory`). Shared pieces live in modules named for
what they hold: :mod:`~torchfrag.algos.config`, :mod:`~torchfrag.algos.envs`,
:mod:`~torchfrag.algos.networks`, :mod:`~torchfrag.algos.fragments`,
:mod:`~torchfrag.algos.replay`, :mod:`~torchfrag.algos.loop`,
:mod:`~torchfrag.algos.actor_critic` (A2C and IMPALA).

Example:
    >>> from torchfrag.algos import ALGOS, get_algo
    >>> sorted(ALGOS)
    ['a2c', 'dqn', 'impala', 'ppo', 'sac']
    >>> config_cls, make = get_algo("dqn")
    >>> config_cls.__name__, make.__name__
    ('DQNConfig', 'make_dqn')
"""
from __future__ import annotations

from typing import Any

from torchfrag.algos.config import AlgoConfig
from torchfrag.algos.factory import ALGOS, AlgoFactory, PPOFactory, factory_from_config, get_algo
from torchfrag.algos.loop import LoopBase


def make_factory(name: str, env_id: str, cfg: Any, seed: int = 0,
                 env_options: dict[str, Any] | None = None) -> AlgoFactory:
    """The picklable :class:`AlgoFactory` of the shipped algorithm ``name``.

    Example:
        >>> from torchfrag.algos import make_factory
        >>> loop = make_factory("a2c", "CartPole-v1", {"num_envs": 2, "steps": 4})()
        >>> loop.env.batch_size
        torch.Size([2])
        >>> loop.close()
    """
    get_algo(name)
    cfg_dict = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
    return AlgoFactory(env_id, cfg_dict, seed=int(seed), env_options=dict(env_options or {}), algo=name)


__all__ = ["ALGOS", "AlgoConfig", "AlgoFactory", "LoopBase", "PPOFactory", "factory_from_config",
           "get_algo", "make_factory"]
