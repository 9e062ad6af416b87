"""PoolCollector in TorchRL sota-script shapes: float32 observations by default, transforms kept."""
from __future__ import annotations

import pytest
import torch
from torch import nn

pytest.importorskip("torchrl")

from tensordict.nn import TensorDictModule  # noqa: E402
from torchrl.envs import DoubleToFloat, RewardSum, StepCounter, TransformedEnv  # noqa: E402

from torchfrag.collectors import PoolCollector  # noqa: E402
from torchfrag.envs import PoolEnv, list_envs  # noqa: E402

ENV = "HalfCheetah-v5" if "HalfCheetah-v5" in list_envs() else "Pendulum-v1"


def _actor(env_id: str) -> TensorDictModule:
    torch.manual_seed(0)
    probe = PoolEnv(env_id, 1, info_keys=[])
    n_obs = probe.observation_spec["observation"].shape[-1]
    n_act = probe.action_spec.shape[-1]
    probe.close()
    return TensorDictModule(nn.Sequential(nn.Linear(n_obs, 32), nn.Tanh(), nn.Linear(32, n_act),
                                          nn.Tanh()), ["observation"], ["action"])


def test_env_id_gives_float32_observations_a_float32_actor_runs_on() -> None:
    # Before: float64 MuJoCo observations, and "mat1 and mat2 must have the same dtype".
    if ENV == "Pendulum-v1":
        pytest.skip("needs an env with float64 observations (MuJoCo)")
    c = PoolCollector(ENV, _actor(ENV), frames_per_batch=64, total_frames=128, num_envs=4)
    for batch in c:
        assert batch["observation"].dtype == batch["next", "observation"].dtype == torch.float32
    assert c.observation_spec["observation"].dtype == torch.float32
    c.shutdown()
    raw = PoolCollector(ENV, None, frames_per_batch=16, total_frames=16, num_envs=2,
                        observation_dtype=None)
    assert next(iter(raw))["observation"].dtype == torch.float64  # the env's own, on request
    raw.shutdown()
    with pytest.raises(ValueError, match="observation_dtype 'float33' is not a torch dtype"):
        PoolCollector(ENV, None, frames_per_batch=16, observation_dtype="float33")


def test_sota_make_env_transforms_are_kept() -> None:
    """TorchRL's ppo_mujoco ``make_env``/``make_collector`` with GymEnv -> PoolEnv and
    SyncDataCollector -> PoolCollector: ``episode_reward`` and ``step_count`` arrive."""

    def make_env(env_name: str = ENV, device: str = "cpu") -> TransformedEnv:
        env = PoolEnv(env_name, 4, device=device)
        env = TransformedEnv(env)
        env.append_transform(RewardSum())
        env.append_transform(StepCounter())
        env.append_transform(DoubleToFloat(in_keys=["observation"]))
        return env

    actor = _actor(ENV)
    for source in (make_env(ENV, "cpu"), make_env):
        c = PoolCollector(create_env_fn=source, policy=actor, frames_per_batch=64,
                          total_frames=128, device="cpu", storing_device="cpu",
                          max_frames_per_traj=-1)
        n = 0
        for batch in c:
            assert "episode_reward" in batch["next"].keys()
            assert "step_count" in batch["next"].keys()
            assert batch["observation"].dtype == torch.float32
            n += batch.numel()
        assert n == 128
        c.shutdown()
