"""The private TorchRL/tensordict APIs fenced in torchfrag.envs._torchrl_compat still exist and work.

A failure here after a TorchRL or tensordict upgrade names the API that moved.
"""
from __future__ import annotations

import importlib

import pytest
import torch

pytest.importorskip("torchrl")

from tensordict import TensorDict  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402

from torchfrag.envs import PoolEnv  # noqa: E402
from torchfrag.envs import _torchrl_compat as compat  # noqa: E402


@pytest.mark.parametrize("owner,name", compat.PRIVATE_APIS)
def test_private_api_exists(owner: str, name: str) -> None:
    module_name, _, attr = owner.rpartition(".")
    try:
        obj = importlib.import_module(owner)
    except ModuleNotFoundError:
        obj = getattr(importlib.import_module(module_name), attr)
    assert hasattr(obj, name), (
        f"{owner}.{name} is gone: a TorchRL/tensordict upgrade broke torchfrag.envs._torchrl_compat")


def test_new_tensordict_matches_public_constructor() -> None:
    data = {"a": torch.arange(6).reshape(2, 3), "b": torch.ones(2, 1)}
    fast = compat.new_tensordict(data, torch.Size([2]))
    slow = TensorDict(data, batch_size=[2])
    assert fast.batch_size == slow.batch_size
    assert set(fast.keys()) == set(slow.keys())
    assert (fast == slow).all()


def test_step_mdp_matches_public_step_mdp() -> None:
    from torchrl.envs.utils import step_mdp as public_step_mdp

    env = PoolEnv("CartPole-v1", 3, seed=0)
    td = env.reset()
    td["action"] = torch.zeros(3, dtype=torch.int64)
    td = env.step(td)
    ours = compat.step_mdp(env, td)
    ref = public_step_mdp(td, keep_other=True, exclude_action=True)
    assert set(ours.keys(True, True)) == set(ref.keys(True, True)) - {"action"} | (
        set(ours.keys(True, True)) & {"action"})
    assert torch.equal(ours["observation"], td["next", "observation"])
    env.close()


def test_make_compatible_policy_wraps_plain_callables() -> None:
    env = PoolEnv("CartPole-v1", 2, seed=0, info_keys=[])
    wrapped = compat.make_compatible_policy(lambda observation: (observation[..., 2] > 0).long(),
                                            env.observation_spec, env)
    out = wrapped(env.reset())
    assert out["action"].shape == (2,)
    module = TensorDictModule(lambda o: o[..., 0].long() * 0, ["observation"], ["action"])
    assert compat.make_compatible_policy(module, env.observation_spec, env) is module
    env.close()
