"""PoolCollector takes what TorchRL's collectors take: env ids, PoolEnv, TransformedEnv, env factories, collector kwargs."""
from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("torchrl")

from tensordict.nn import TensorDictModule  # noqa: E402
from torchrl.collectors import MultiSyncCollector  # noqa: E402
from torchrl.envs import Compose, DoubleToFloat, RewardSum, StepCounter, TransformedEnv  # noqa: E402

from torchfrag.collectors import PoolCollector  # noqa: E402
from torchfrag.envs import PoolEnv, list_envs  # noqa: E402


def _linear_policy(n_obs: int, n_act: int) -> TensorDictModule:
    torch.manual_seed(0)
    return TensorDictModule(nn.Sequential(nn.Linear(n_obs, n_act), nn.Tanh()),
                            ["observation"], ["action"])


def test_transformed_env_float32_policy() -> None:
    env_id = "HalfCheetah-v5" if "HalfCheetah-v5" in list_envs() else "Pendulum-v1"
    base = PoolEnv(env_id, 4, seed=0, info_keys=[])
    n_obs = base.observation_spec["observation"].shape[-1]
    n_act = base.action_spec.shape[-1]
    env = TransformedEnv(base, Compose(DoubleToFloat(), RewardSum(), StepCounter()))
    seen = []
    c = PoolCollector(env, _linear_policy(n_obs, n_act), frames_per_batch=64, total_frames=128,
                      postproc=lambda b: seen.append(b.batch_size) or b)
    batches = list(c)
    assert len(batches) == 2 and seen == [torch.Size([4, 16])] * 2
    for b in batches:
        assert b["observation"].dtype == torch.float32
        assert "episode_reward" in b["next"].keys() and "step_count" in b.keys()
    assert c.env is env
    c.shutdown()


def test_env_factory_and_subclass_go_through_torchrl_collector() -> None:
    calls = []

    class Sub(PoolEnv):
        def _step(self, td):
            calls.append(1)
            return super()._step(td)

    c = PoolCollector(lambda: Sub("CartPole-v1", 2, seed=0), None, frames_per_batch=20,
                      total_frames=20)
    (b,) = list(c)
    assert b.batch_size == (2, 10) and len(calls) == 10
    c.shutdown()


@pytest.mark.parametrize("split", [False, True])
def test_split_trajs_on_the_pool_path(split: bool) -> None:
    c = PoolCollector("CartPole-v1", None, num_envs=4, frames_per_batch=400, total_frames=400,
                      seed=0, split_trajs=split)
    (b,) = list(c)
    assert c.pool is not None  # the fast path
    if split:
        mask = b["collector", "mask"]
        assert b.ndim == 2 and b.shape[0] > 4  # one row per trajectory
        assert int(mask.sum()) == 400
        ids = b["collector", "traj_ids"]
        assert bool((ids[mask].reshape(-1) >= 0).all())
    else:
        assert b.batch_size == (4, 100)
    c.shutdown()


def test_reset_at_each_iter_and_device_kwargs() -> None:
    c = PoolCollector("CartPole-v1", None, num_envs=2, frames_per_batch=20, total_frames=40,
                      reset_at_each_iter=True, device="cpu", seed=0, info_keys=["elapsed_step"])
    with pytest.raises(AttributeError, match="no async pool"):
        c.pool  # noqa: B018  (TorchRL's Collector runs a PoolEnv for this argument)
    batches = list(c)
    assert [b.batch_size for b in batches] == [torch.Size([2, 10])] * 2
    for b in batches:  # every batch starts from fresh episodes
        assert bool((b["elapsed_step"][:, 0] == 0).all())
    c.shutdown()


def test_plain_poolenv_uses_the_pool_path_with_its_arguments() -> None:
    env = PoolEnv("Pendulum-v1", 4, seed=5, info_keys=["elapsed_step"])
    c = PoolCollector(env, None, frames_per_batch=40, total_frames=40)
    assert c.pool.spec.id == "Pendulum-v1" and c.num_envs == 4 and c.info_keys == ["elapsed_step"]
    (b,) = list(c)
    assert b.batch_size == (4, 10) and "elapsed_step" in b.keys()
    c.shutdown()
    env.close()


def test_bad_arguments_are_named() -> None:
    with pytest.raises(TypeError, match="create_env_fn"):
        PoolCollector(3, None, frames_per_batch=8)
    with pytest.raises(ValueError, match="env options"):
        PoolCollector(lambda: PoolEnv("CartPole-v1", 2), None, frames_per_batch=8,
                      max_episode_steps=5)


def test_multisync_collector_with_poolenv_instances() -> None:
    envs = [PoolEnv("CartPole-v1", 2, seed=i, info_keys=[]) for i in range(2)]
    c = MultiSyncCollector(envs, None, frames_per_batch=40, total_frames=40)
    try:
        batches = list(c)
    finally:
        c.shutdown()
    assert sum(b.numel() for b in batches) == 40
    for e in envs:
        e.close()


def test_env_id_with_float32_observations() -> None:
    env_id = "HalfCheetah-v5" if "HalfCheetah-v5" in list_envs() else "Pendulum-v1"
    probe = PoolEnv(env_id, 1, info_keys=[])
    n_obs = probe.observation_spec["observation"].shape[-1]
    n_act = probe.action_spec.shape[-1]
    probe.close()
    c = PoolCollector(env_id, _linear_policy(n_obs, n_act), num_envs=2, frames_per_batch=20,
                      total_frames=20, observation_dtype=torch.float32)
    (b,) = list(c)
    assert b["observation"].dtype == b["next", "observation"].dtype == torch.float32
    assert b.batch_size == (2, 10)
    c.shutdown()
