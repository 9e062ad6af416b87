"""Discrete action specs of ``PoolEnv`` beside TorchRL's ``GymEnv``, batched (``num_envs=N``, GymEnv
over a Gymnasium vector env) and unbatched, on a classic-control id and an Atari one.

The default is GymEnv's (``OneHot``) in both modes; ``categorical_action_encoding=True`` gives
``Categorical`` indices, what torchfrag's algorithms ask for and what keeps
``PoolCollector(PoolEnv(...))`` on its async fast path.
"""
from __future__ import annotations

import pytest
import torch
from torchrl.data import Categorical, OneHot
from torchrl.envs import GymEnv

from torchfrag.envs import PoolEnv

_DEFAULT = object()  # the argument left out


def _same_action_spec(ours, theirs) -> None:
    assert type(ours) is type(theirs), (ours, theirs)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    assert ours.space.n == theirs.space.n


class _Expanded:
    """An unbatched GymEnv seen as N of itself: its action spec expanded to ``[N]``; steps
    take env 0's action."""

    def __init__(self, env: GymEnv, n: int) -> None:
        self.env = env
        self.action_spec = env.action_spec.expand(n, *env.action_spec.shape)
        self.action_spec_unbatched = env.action_spec

    def reset(self):
        return self.env.reset()

    def step(self, td):
        td["action"] = td["action"][0]
        out = self.env.step(td)
        return out.expand(self.action_spec.shape[0])

    def close(self) -> None:
        self.env.close()


@pytest.mark.parametrize("env_id", ["CartPole-v1", "ALE/Pong-v5"])
@pytest.mark.parametrize("encoding", [_DEFAULT, True, False], ids=["default", "True", "False"])
@pytest.mark.parametrize("num_envs", [None, 2], ids=["unbatched", "batched"])
def test_action_spec_and_actions_match_gymenv(env_id, encoding, num_envs):
    kwargs = {} if num_envs is None else {"num_envs": num_envs}
    if encoding is not _DEFAULT:
        kwargs["categorical_action_encoding"] = encoding
    if env_id.startswith("ALE/") and num_envs is not None:
        # GymEnv(num_envs=N) builds an AsyncVectorEnv whose spawned workers have not registered
        # ALE's ids (NamespaceNotFound): compare with the unbatched GymEnv's spec, expanded to
        # [N] as GymEnv does for CartPole below.
        theirs = _Expanded(GymEnv(env_id, **{k: v for k, v in kwargs.items() if k != "num_envs"}),
                           num_envs)
    else:
        theirs = GymEnv(env_id, **kwargs)
    ours = PoolEnv(env_id, seed=0, **kwargs)
    try:
        _same_action_spec(ours.action_spec, theirs.action_spec)
        _same_action_spec(ours.action_spec_unbatched, theirs.action_spec_unbatched)
        assert isinstance(ours.action_spec, Categorical if encoding is True else OneHot)
        lead = () if num_envs is None else (num_envs,)
        # An action drawn from either spec steps both envs.
        for action in (theirs.action_spec.rand(), ours.action_spec.rand()):
            for env in (ours, theirs):
                td = env.reset()
                td["action"] = action
                assert env.step(td)["next", "reward"].shape == (*lead, 1)
    finally:
        ours.close()
        theirs.close()


def test_wrong_encoding_of_action_is_refused_by_name():
    env = PoolEnv("CartPole-v1", num_envs=3, seed=0)  # OneHot [3, 2]
    td = env.reset()
    td["action"] = torch.zeros(3, 2, dtype=torch.int64)  # no 1 in a row
    with pytest.raises(ValueError, match="one-hot actions of shape"):
        env.step(td)
    env.close()


def test_pool_conventions_need_index_actions():
    one_hot = PoolEnv("CartPole-v1", num_envs=3, seed=0)
    index = PoolEnv("CartPole-v1", num_envs=3, seed=0, categorical_action_encoding=True)
    # What keeps PoolCollector(PoolEnv(...)) on its async fast path.
    assert not one_hot.pool_conventions and index.pool_conventions
    one_hot.close()
    index.close()
