"""Native env pools: build, inspect, and use them from NumPy, Gymnasium or TorchRL.

Example:
    >>> import numpy as np
    >>> from torchfrag.envs import make, list_envs
    >>> pool = make("CartPole-v1", num_envs=8, batch_size=4, seed=0)
    >>> pool.async_reset()
    >>> obs, reward, terminated, truncated, info = pool.recv()
    >>> ids = info["env_id"].tolist()  # the first 4 envs ready, in any order
    >>> len(ids), all(0 <= i < 8 for i in ids)
    (4, True)
"""
from __future__ import annotations

import importlib
from typing import Any

from torchfrag.envs.dm_adapter import PoolDmEnv, make_dm
from torchfrag.envs.gymnasium_adapter import (
    PoolSingleEnv,
    PoolVectorEnv,
    make_gymnasium,
    register_gymnasium_envs,
)
from torchfrag.envs.pool import EnvError, EnvPool, PoolClosedError, make, per_env_seeds
from torchfrag.envs.spec import ArrayInfo, EnvSpec, OptionInfo, list_envs, spec

register_gymnasium_envs()

__all__ = [
    "ArrayInfo",
    "EnvError",
    "EnvPool",
    "EnvSpec",
    "OptionInfo",
    "PoolClosedError",
    "PoolDmEnv",
    "PoolSingleEnv",
    "PoolVectorEnv",
    "list_envs",
    "make",
    "make_dm",
    "make_gymnasium",
    "per_env_seeds",
    "register_gymnasium_envs",
    "spec",
    "PoolEnv",
]


def __getattr__(name: str) -> Any:
    # TorchRL is heavy to import; PoolEnv loads it on first use.
    if name == "PoolEnv":
        return importlib.import_module("torchfrag.envs.torchrl_env").PoolEnv
    raise AttributeError(f"module 'torchfrag.envs' has no attribute {name!r}")
