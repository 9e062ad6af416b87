"""RL algorithms written as loops of fragments.

Every algorithm module provides a config dataclass and a ``make_<name>(env_id,
cfg, seed, env_options)`` factory returning a loop module with ``rollout``,
``learn``, ``actor``, ``training_state``/``load_training_state`` and ``close``;
:func:`get_algo` returns both by name.

Example:
    >>> from torchfrag.algos import ALGOS, get_algo
    >>> sorted(ALGOS)
    ['a2c', 'dqn', 'impala', 'ppo', 'sac']
    >>> config_cls, make = get_algo("dqn")
    >>> config_cls.__name__, make.__name__
    ('DQNConfig', 'make_dqn')
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

ALGOS = {
    "ppo": "torchfrag.algos.ppo",
    "a2c": "torchfrag.algos.a2c",
    "dqn": "torchfrag.algos.dqn",
    "sac": "torchfrag.algos.sac",
    "impala": "torchfrag.algos.impala",
}

_ENTRY = {
    "ppo": ("PPOConfig", "make_ppo"),
    "a2c": ("A2CConfig", "make_a2c"),
    "dqn": ("DQNConfig", "make_dqn"),
    "sac": ("SACConfig", "make_sac"),
    "impala": ("IMPALAConfig", "make_impala"),
}


def get_algo(name: str) -> tuple[type, Callable[..., Any]]:
    """``(config class, make function)`` of the algorithm ``name``.

    Raises:
        ValueError: Unknown name.
    """
    if name not in ALGOS:
        raise ValueError(f"unknown algo {name!r}; available: {sorted(ALGOS)}")
    module = importlib.import_module(ALGOS[name])
    cfg_name, make_name = _ENTRY[name]
    return getattr(module, cfg_name), getattr(module, make_name)


def make_factory(name: str, env_id: str, cfg: Any, seed: int = 0,
                 env_options: dict[str, Any] | None = None) -> Any:
    """A picklable loop factory for the distribution policies (``factory(env_slice=None)``).

    PPO uses :class:`torchfrag.policies.PPOFactory`; the others
    :class:`torchfrag.algos.common.AlgoFactory`.

    Example:
        >>> from torchfrag.algos import make_factory
        >>> loop = make_factory("a2c", "CartPole-v1", {"num_envs": 2, "steps": 4})()
        >>> loop.env.batch_size
        torch.Size([2])
        >>> loop.close()
    """
    cfg_dict = cfg.to_dict() if hasattr(cfg, "to_dict") else dict(cfg)
    if name == "ppo":
        from torchfrag.policies import PPOFactory

        return PPOFactory(env_id, cfg_dict, seed=int(seed), env_options=dict(env_options or {}))
    from torchfrag.algos.common import AlgoFactory

    get_algo(name)
    return AlgoFactory(name, env_id, cfg_dict, seed=int(seed), env_options=dict(env_options or {}))


__all__ = ["ALGOS", "get_algo", "make_factory"]
