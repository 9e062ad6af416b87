"""Discrete action specs of ``PoolEnv`` beside TorchRL's ``GymEnv``: ``categorical_action_encoding``
means what it means there (``True``: ``Categorical`` indices, ``False``: ``OneHot``), batched
(``num_envs=N``, GymEnv over a Gymnasium vector env) and unbatched.

The one difference is deliberate and documented: a batched ``PoolEnv`` with the argument left out
is ``Categorical`` (the pool's conventions, which its algorithms and ``PoolCollector``'s async fast
path use), where ``GymEnv(id, num_envs=N)`` is ``OneHot``; the unbatched ``PoolEnv(id)`` follows
GymEnv's default.
"""
from __future__ import annotations

import pytest
import torch
from torchrl.data import Categorical, OneHot
from torchrl.envs import GymEnv

from torchfrag.envs import PoolEnv


def _same_action_spec(ours, theirs) -> None:
    assert type(ours) is type(theirs), (ours, theirs)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    assert ours.space.n == theirs.space.n


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1"])
@pytest.mark.parametrize("encoding", [True, False])
@pytest.mark.parametrize("num_envs", [None, 3])
def test_categorical_action_encoding_matches_gymenv(env_id, encoding, num_envs):
    batch = {} if num_envs is None else {"num_envs": num_envs}
    theirs = GymEnv(env_id, categorical_action_encoding=encoding, **batch)
    ours = PoolEnv(env_id, categorical_action_encoding=encoding, seed=0, **batch)
    try:
        _same_action_spec(ours.action_spec, theirs.action_spec)
        assert isinstance(ours.action_spec, Categorical if encoding else OneHot)
        # an action drawn from GymEnv's spec steps ours
        td = ours.reset()
        td["action"] = theirs.action_spec.rand()
        out = ours.step(td)
        assert out["next", "reward"].shape == (*((num_envs,) if num_envs else ()), 1)
    finally:
        ours.close()
        theirs.close()


def test_defaults_unbatched_as_gymenv_batched_the_pools_categorical():
    theirs, ours = GymEnv("CartPole-v1"), PoolEnv("CartPole-v1", seed=0)
    _same_action_spec(ours.action_spec, theirs.action_spec)  # OneHot [2]
    batched = PoolEnv("CartPole-v1", num_envs=3, seed=0)
    assert isinstance(batched.action_spec, Categorical) and batched.action_spec.shape == torch.Size([3])
    assert batched.pool_conventions  # what keeps PoolCollector(PoolEnv(...)) on its fast path
    for env in (theirs, ours, batched):
        env.close()
