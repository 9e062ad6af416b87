"""One picklable loop factory for every algorithm, shipped or the user's own.

Under a distribution policy no fragment is pickled: every worker calls the
same *factory* and keeps the fragments placed on it, so a factory must be
picklable and rebuild the same loop from plain data. :class:`AlgoFactory`
is that factory for every algorithm:

* it seeds torch with ``seed`` (every worker starts from the driver's weights),
* makes the training env with :func:`torchfrag.algos.envs.make_env` (float32
  observations everywhere) for all envs, or for a worker's
  :class:`~torchfrag.policies.factory.EnvSlice` with each env seeded as in the full pool,
* and builds the loop on it with the algorithm's ``build_<algo>(env, cfg)``.

A shipped algorithm is named by ``algo``. A user's algorithm subclasses
:class:`AlgoFactory` and overrides :meth:`~AlgoFactory.config_class` and
:meth:`~AlgoFactory.build`; ``python -m torchfrag.train`` instantiates it from
the algo config's ``_target_`` (see :func:`factory_from_config`).

Example:
    >>> from torchfrag.algos.factory import AlgoFactory
    >>> loop = AlgoFactory("CartPole-v1", {"num_envs": 2, "steps": 4}, algo="impala")()
    >>> type(loop).__name__
    'IMPALALoop'
    >>> loop.close()
"""
from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from torchfrag.algos.config import AlgoConfig

logger = logging.getLogger(__name__)

__all__ = ["ALGOS", "AlgoFactory", "PPOFactory", "factory_from_config", "get_algo"]

#: Shipped algorithms: name -> (module, config class). The module defines ``build_<name>(env, cfg)``
#: and ``make_<name>(env_id, cfg, seed, env_options)``.
ALGOS: dict[str, tuple[str, str]] = {
    "ppo": ("torchfrag.algos.ppo", "PPOConfig"),
    "a2c": ("torchfrag.algos.a2c", "A2CConfig"),
    "dqn": ("torchfrag.algos.dqn", "DQNConfig"),
    "sac": ("torchfrag.algos.sac", "SACConfig"),
    "impala": ("torchfrag.algos.impala", "IMPALAConfig"),
}


def _algo_module(name: str) -> Any:
    if name not in ALGOS:
        raise ValueError(f"unknown algo {name!r}; shipped: {sorted(ALGOS)} (your own algorithm: "
                         "give its config a `_target_` naming an AlgoFactory subclass)")
    return importlib.import_module(ALGOS[name][0])


def get_algo(name: str) -> tuple[type, Any]:
    """``(config class, make function)`` of the shipped algorithm ``name``.

    ``make_<name>(env_id, cfg=None, seed=0, env_options=None)`` builds the loop
    for all envs (it is ``AlgoFactory(env_id, cfg, seed, env_options, algo=name)()``).

    Example:
        >>> from torchfrag.algos.factory import get_algo
        >>> [f.__name__ for f in get_algo("dqn")]
        ['DQNConfig', 'make_dqn']

    Raises:
        ValueError: Unknown name.
    """
    module = _algo_module(name)
    return getattr(module, ALGOS[name][1]), getattr(module, f"make_{name}")


@dataclass
class AlgoFactory:
    """Picklable factory of an algorithm's loop: ``factory(env_slice=None) -> loop``.

    Args:
        env_id: A registered env id.
        cfg: The algorithm's hyper-parameters (a mapping of its config's fields, or the config).
        seed: Seeds torch and the envs.
        env_options: Extra options for the env (e.g. ``{"num_threads": 1}``).
        exploration: Exploration type of the rollout's act fragment (``"random"``;
            ``"mode"`` gives deterministic rollouts).
        algo: Name of a shipped algorithm (ignored by subclasses that override
            :meth:`config_class` and :meth:`build`).

    Example:
        >>> from torchfrag.algos.factory import AlgoFactory
        >>> from torchfrag.policies.factory import EnvSlice
        >>> f = AlgoFactory("HalfCheetah-v5", {"num_envs": 4, "steps": 4}, algo="sac")
        >>> loop = f(EnvSlice(offset=2, count=2, total=4))
        >>> loop.env.batch_size, loop.env.observation_spec["observation"].dtype
        (torch.Size([2]), torch.float32)
        >>> loop.close()
    """

    env_id: str
    cfg: Any = field(default_factory=dict)
    seed: int = 0
    env_options: dict[str, Any] = field(default_factory=dict)
    exploration: str = "random"
    algo: str = "ppo"

    def config_class(self) -> type[AlgoConfig]:
        """The algorithm's config dataclass."""
        return get_algo(self.algo)[0]

    def build(self, env: Any, cfg: Any) -> nn.Module:
        """Builds the networks and the loop on ``env`` (torch is already seeded)."""
        return getattr(_algo_module(self.algo), f"build_{self.algo}")(env, cfg)

    def config(self) -> Any:
        """The config object (``cfg`` coerced into :meth:`config_class`)."""
        cfg = self.cfg
        if isinstance(cfg, Mapping):
            cfg = dict(cfg)
        return self.config_class().coerce(cfg)

    @property
    def num_envs(self) -> int:
        """Envs of the whole run."""
        return int(self.config().num_envs)

    def make_env(self, cfg: Any, num_envs: int, seed: int | list[int]) -> Any:
        """The training env: float32 observations, normalised when the config has ``obs_norm``."""
        from torchfrag.algos.envs import make_env

        return make_env(self.env_id, num_envs, seed=seed, obs_norm=bool(getattr(cfg, "obs_norm", False)),
                        **dict(self.env_options))

    def __call__(self, env_slice: Any = None) -> nn.Module:
        import torch

        cfg = self.config()
        torch.manual_seed(int(self.seed))
        if env_slice is None:
            env = self.make_env(cfg, int(cfg.num_envs), int(self.seed))
        else:
            from torchfrag._native import C

            # env `offset + j` gets the seed it has in the whole run's pool, wherever it runs
            seeds = [C.env_seed(int(self.seed), i)
                     for i in range(int(env_slice.offset), int(env_slice.offset) + int(env_slice.count))]
            env = self.make_env(cfg, int(env_slice.count), seeds)
        loop = self.build(env, cfg)
        if self.exploration != "random":
            from torchfrag.fragments import Rollout

            rollout = getattr(loop, "rollout", None)
            if not isinstance(rollout, Rollout):
                raise ValueError(f"exploration={self.exploration!r} needs a loop with a `rollout` "
                                 f"Rollout fragment; {type(loop).__name__} has none")
            loop.rollout = Rollout(rollout.body.act.actor, rollout.env, steps=rollout.steps,
                                   exploration=self.exploration)
        return loop


#: The PPO factory's historical name (``PPOFactory(env_id, cfg, ...)``); the same class.
PPOFactory = AlgoFactory


def factory_from_config(algo: Mapping[str, Any], env_id: str, seed: int = 0,
                        env_options: Mapping[str, Any] | None = None) -> AlgoFactory:
    """The factory an algo config node names: its ``_target_``, else the shipped ``name``.

    ``_target_`` is the dotted path of an :class:`AlgoFactory` subclass (any
    importable module); it is built with ``env_id``, ``cfg`` (the other keys of
    the node), ``seed``, ``env_options`` and ``algo`` (the node's ``name``).

    Example:
        >>> from torchfrag.algos.factory import factory_from_config
        >>> f = factory_from_config({"name": "dqn", "num_envs": 2}, "CartPole-v1")
        >>> f.algo, f.config().num_envs
        ('dqn', 2)
        >>> factory_from_config({"_target_": "torchfrag.algos.AlgoFactory", "name": "a2c"},
        ...                     "CartPole-v1").algo
        'a2c'

    Raises:
        ValueError: Neither a ``_target_`` nor a shipped ``name``, or a ``_target_`` that is
            not an :class:`AlgoFactory` subclass.
    """
    node = dict(algo)
    target = node.pop("_target_", None)
    name = str(node.get("name", ""))
    kwargs = {"env_id": env_id, "cfg": node, "seed": int(seed),
              "env_options": dict(env_options or {}), "algo": name}
    if target is None:
        get_algo(name)
        return AlgoFactory(**kwargs)
    from hydra.utils import get_class

    try:
        cls = get_class(str(target))
    except Exception as err:  # ImportError or Hydra's wrapping of it
        raise ValueError(f"algo._target_={target!r} could not be imported: {err}") from err
    if not (isinstance(cls, type) and issubclass(cls, AlgoFactory)):
        raise ValueError(f"algo._target_={target!r} must name a subclass of "
                         f"torchfrag.algos.AlgoFactory, got {cls!r}")
    return cls(**kwargs)
