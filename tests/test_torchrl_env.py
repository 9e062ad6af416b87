"""PoolEnv: specs, TorchRL compatibility, equivalence with the raw pool and Gymnasium."""
from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("torchrl")

from tensordict.nn import TensorDictModule  # noqa: E402
from torchrl.data import Bounded, Categorical, OneHot, Unbounded  # noqa: E402
from torchrl.envs import EnvBase, TransformedEnv  # noqa: E402
from torchrl.envs.utils import check_env_specs  # noqa: E402

from torchfrag.envs import PoolEnv, list_envs, make  # noqa: E402

ALL_IDS = list_envs()
CLASSIC = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0",
           "Pendulum-v1", "Debug-v0"]


def _family_sample() -> list[str]:
    """Every classic-control id, plus one Atari and one MuJoCo id when built."""
    ids = [i for i in CLASSIC if i in ALL_IDS]
    for want in ("Pong-v5", "HalfCheetah-v5"):
        if want in ALL_IDS:
            ids.append(want)
    return ids


def _cartpole_policy() -> TensorDictModule:
    """Deterministic CartPole controller (episodes of tens to hundreds of steps)."""
    return TensorDictModule(lambda o: (o[..., 2] > 0).long(),
                            in_keys=["observation"], out_keys=["action"])


@pytest.mark.parametrize("env_id", _family_sample())
def test_check_env_specs_sample(env_id: str) -> None:
    env = PoolEnv(env_id, num_envs=3, seed=1)
    check_env_specs(env, seed=0)
    env.close()


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ALL_IDS)
def test_check_env_specs_all(env_id: str) -> None:
    try:  # Failures of the env itself belong to the pool's own tests; flag them here.
        with make(env_id, 1) as pool:
            pool.reset()
    except RuntimeError as err:
        pytest.xfail(f"the pool itself cannot run {env_id}: {err}")
    env = PoolEnv(env_id, num_envs=2, seed=1)
    check_env_specs(env, seed=0)
    env.close()


def test_specs_and_make() -> None:
    # GymEnv's default: one-hot actions; indices when asked for.
    env = PoolEnv.make("CartPole-v1", 5)
    assert isinstance(env.action_spec, OneHot) and env.action_spec.shape == (5, 2)
    env.close()
    env = PoolEnv.make("CartPole-v1", 5, categorical_action_encoding=True)
    assert env.batch_size == (5,)
    assert isinstance(env.action_spec, Categorical) and env.action_spec.shape == (5,)
    assert env.action_spec_unbatched.shape == ()
    obs = env.observation_spec["observation"]
    assert obs.shape == (5, 4) and obs.dtype == torch.float32
    assert env.reward_spec.shape == (5, 1) and env.reward_spec.dtype == torch.float32
    for key in ("done", "terminated", "truncated"):
        assert env.full_done_spec[key].shape == (5, 1)
        assert env.full_done_spec[key].dtype == torch.bool
    assert set(env.observation_spec.keys()) == {"observation", "elapsed_step", "state"}
    env.close()

    env = PoolEnv("Pendulum-v1", 2)
    assert isinstance(env.action_spec, Bounded)
    assert env.action_spec.shape == (2, 1)
    assert torch.allclose(env.action_spec.space.high, torch.full((2, 1), 2.0))
    assert isinstance(env.observation_spec["observation"], Bounded)
    env.close()

    env = PoolEnv("CartPole-v1", 2, info_keys=[])
    assert list(env.observation_spec.keys()) == ["observation"]
    # Finite bounds kept per dimension, +-inf elsewhere (GymEnv's convention).
    obs = env.observation_spec["observation"]
    assert isinstance(obs, Bounded)
    assert torch.isinf(obs.space.high[0, 1]) and torch.isfinite(obs.space.high[0, 0])
    env.close()
    with pytest.raises(ValueError, match="unknown info key"):
        PoolEnv("CartPole-v1", 2, info_keys=["nope"])


def test_rollout_no_extra_boundary_transition() -> None:
    env = PoolEnv("CartPole-v1", 8, seed=0)
    td = env.rollout(300, break_when_any_done=False)
    assert td.batch_size == (8, 300)
    assert td["next", "done"].any()
    # Next-step auto-reset would leave reward-0 transitions at every boundary.
    assert (td["next", "reward"] == 1).all()
    # Every transition's observation continues the previous "next" or starts anew.
    done = td["next", "done"][:, :-1, 0]
    assert torch.equal(td["observation"][:, 1:][~done], td["next", "observation"][:, :-1][~done])
    assert (td["elapsed_step"][:, 1:][done] == 0).all()
    assert (td["next", "elapsed_step"] == td["elapsed_step"] + 1).all()
    env.close()


@pytest.mark.parametrize("use_policy", [True, False])
def test_fast_rollout_equals_generic_rollout(use_policy: bool) -> None:
    policy = _cartpole_policy() if use_policy else None
    a_env, b_env = (PoolEnv("CartPole-v1", 6, seed=3, categorical_action_encoding=True)
                    for _ in range(2))
    torch.manual_seed(0)
    a = a_env.rollout(250, policy, break_when_any_done=False)
    torch.manual_seed(0)
    b = EnvBase.rollout(b_env, 250, policy, break_when_any_done=False)
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    assert a.names == b.names
    assert (a == b).all()
    # Continuing from the last step (finished envs reset from the pool's cache).
    torch.manual_seed(1)
    a2 = a_env.rollout(60, policy, auto_reset=False, tensordict=a_env.step_mdp(a[:, -1]),
                       break_when_any_done=False)
    torch.manual_seed(1)
    b2 = EnvBase.rollout(b_env, 60, policy, auto_reset=False,
                         tensordict=b_env.step_mdp(b[:, -1]), break_when_any_done=False)
    assert (a2 == b2).all()


def test_break_when_any_done_uses_generic_path() -> None:
    env = PoolEnv("CartPole-v1", 4, seed=0)
    td = env.rollout(1000)
    assert td["next", "done"][:, -1].any()
    assert not td["next", "done"][:, :-1].any()
    env.close()


@pytest.mark.parametrize("path", ["fast", "generic", "step_and_maybe_reset"])
def test_same_seed_rollout_equals_raw_pool(path: str) -> None:
    n, steps, seed = 5, 400, 11
    env = PoolEnv("CartPole-v1", n, seed=seed, categorical_action_encoding=True)
    policy = _cartpole_policy()
    if path == "fast":
        td = env.rollout(steps, policy, break_when_any_done=False)
    elif path == "generic":
        td = EnvBase.rollout(env, steps, policy, break_when_any_done=False)
    else:
        cur, out = env.reset(), []
        for _ in range(steps):
            cur = policy(cur)
            data, cur = env.step_and_maybe_reset(cur)
            out.append(data)
        td = torch.stack(out, 1)
    pool = make("CartPole-v1", n, seed=seed, autoreset="same_step")
    obs, _ = pool.reset()
    for t in range(steps):
        assert np.array_equal(td["observation"][:, t].numpy(), obs)
        action = (obs[:, 2] > 0).astype(np.int64)
        assert np.array_equal(td["action"][:, t].numpy(), action)
        obs, rew, term, trunc, info = pool.step(action)
        assert np.array_equal(td["next", "observation"][:, t].numpy(), info["final_obs"])
        assert np.array_equal(td["next", "reward"][:, t, 0].numpy(), rew.astype(np.float32))
        assert np.array_equal(td["next", "terminated"][:, t, 0].numpy(), term)
        assert np.array_equal(td["next", "truncated"][:, t, 0].numpy(), trunc)
        obs = obs.copy()
    assert td["next", "done"].sum() > 0
    pool.close()
    env.close()


def test_terminal_observation_equals_gymnasium() -> None:
    gym = pytest.importorskip("gymnasium")
    n = 4
    env = PoolEnv("CartPole-v1", n, seed=5, categorical_action_encoding=True)
    td = env.rollout(200, _cartpole_policy(), break_when_any_done=False)
    ref = gym.make("CartPole-v1").unwrapped
    checked = 0
    for i in range(n):
        done = td["next", "done"][i, :, 0]
        starts = [0] + (torch.nonzero(done).flatten() + 1).tolist()
        for s, e in zip(starts, torch.nonzero(done).flatten().tolist()):
            ref.reset(seed=0)
            ref.state = td["observation"][i, s].double().numpy().copy()
            for t in range(s, e + 1):
                obs, reward, terminated, truncated, _ = ref.step(int(td["action"][i, t]))
                np.testing.assert_allclose(td["next", "observation"][i, t].numpy(), obs,
                                           rtol=1e-5, atol=1e-5)
            assert terminated == bool(td["next", "terminated"][i, e])
            checked += 1
    assert checked > 0
    env.close()


def test_terminal_observation_debug_env() -> None:
    env = PoolEnv("Debug-v0", 3, episode_length=4, info_keys=["elapsed_step"])
    td = env.rollout(12, break_when_any_done=False)
    done = td["next", "done"][..., 0]
    # The terminal "next" observation is the episode's 4th step, not the reset one.
    assert (td["next", "observation"][..., 1][done] == 4).all()
    assert (td["observation"][:, 1:, 1][done[:, :-1]] == 0).all()
    assert (td["next", "elapsed_step"][done] == 4).all()
    env.close()


def test_partial_reset() -> None:
    env = PoolEnv("Debug-v0", 4, episode_length=3, info_keys=[])
    td = env.reset()
    for _ in range(3):
        td["action"] = torch.zeros(4, dtype=torch.int64)
        td = env.step_mdp(env.step(td))
    assert td["done"].all()
    # Reset only envs 0 and 2 (from the pool's cached auto-reset: no pool call).
    td["_reset"] = torch.tensor([True, False, True, False])[:, None]
    out = env.reset(td)
    assert (out["observation"][[0, 2], 1] == 0).all()
    assert (out["observation"][[1, 3], 1] == 3).all()  # untouched terminal obs
    assert not out["done"][[0, 2]].any()
    # Resetting an env that is mid-episode resets it for real.
    td = env.reset()
    td["action"] = torch.zeros(4, dtype=torch.int64)
    td = env.step_mdp(env.step(td))
    assert (td["observation"][:, 1] == 1).all()
    episodes = td["observation"][:, 3].clone()
    td["_reset"] = torch.tensor([False, True, False, False])[:, None]
    out = env.reset(td)
    assert out["observation"][:, 1].tolist() == [1, 0, 1, 1]
    assert out["observation"][1, 3] == episodes[1] + 1  # a new episode
    env.close()


def test_set_seed_does_not_rebuild_pool() -> None:
    env = PoolEnv("CartPole-v1", 3, seed=0)
    native = env.pool._pool
    env.set_seed(42)
    a = env.reset()["observation"].clone()
    env.rollout(30, break_when_any_done=False)
    env.set_seed(42)
    b = env.reset()["observation"]
    assert torch.equal(a, b)
    env.set_seed(43)
    assert not torch.equal(a, env.reset()["observation"])
    assert env.pool._pool is native
    other = PoolEnv("CartPole-v1", 3, seed=42)
    assert torch.equal(a, other.reset()["observation"])
    env.close()


def test_transforms() -> None:
    from torchrl.envs.transforms import (
        Compose,
        ObservationNorm,
        RewardSum,
        StepCounter,
        VecNormV2,
    )

    env = TransformedEnv(
        PoolEnv("CartPole-v1", 4, seed=0),
        Compose(StepCounter(max_steps=50), RewardSum(),
                ObservationNorm(in_keys=["observation"], standard_normal=True)),
    )
    env.transform[-1].init_stats(num_iter=20, reduce_dim=(0, 1), cat_dim=1)
    check_env_specs(env)
    td = env.rollout(120, break_when_any_done=False)
    assert td["next", "step_count"].max() <= 50
    assert (td["next", "episode_reward"] <= 50).all()
    ended = td["next", "done"][..., 0]
    assert (td["next", "episode_reward"][ended] == td["next", "step_count"][ended]).all()
    assert td["observation"].abs().mean() < 5
    env.close()

    env = TransformedEnv(PoolEnv("Pendulum-v1", 4, seed=0), VecNormV2(in_keys=["observation"]))
    check_env_specs(env)
    td = env.rollout(100, break_when_any_done=False)
    assert td["next", "observation"].isfinite().all()
    env.close()


def test_atari_transforms_if_available() -> None:
    if "Pong-v5" not in ALL_IDS:
        pytest.skip("Atari envs not built")
    from torchrl.envs.transforms import Compose, RewardSum, StepCounter, ToTensorImage

    base = PoolEnv("Pong-v5", 2, seed=0)
    obs_spec = base.observation_spec["observation"]
    assert obs_spec.dtype == torch.uint8
    env = TransformedEnv(base, Compose(
        ToTensorImage(from_int=True, in_keys=["observation"], shape_tolerant=True),
        StepCounter(), RewardSum()))
    check_env_specs(env)
    td = env.rollout(10, break_when_any_done=False)
    assert td["observation"].dtype == torch.float32
    assert td["observation"].max() <= 1.0
    env.close()


def test_mujoco_dtypes_if_available() -> None:
    if "HalfCheetah-v5" not in ALL_IDS:
        pytest.skip("MuJoCo envs not built")
    env = PoolEnv("HalfCheetah-v5", 2, seed=0)
    assert env.observation_spec["observation"].dtype == torch.float64
    assert env.action_spec.shape == (2, 6) and env.action_spec.dtype == torch.float32
    td = env.rollout(20, break_when_any_done=False)
    assert td["next", "observation"].dtype == torch.float64
    env.close()


def test_under_torchrl_collectors() -> None:
    from torchrl.collectors import Collector

    env = PoolEnv("CartPole-v1", 4, seed=0)
    collector = Collector(env, _cartpole_policy(), frames_per_batch=80, total_frames=240)
    batches = list(collector)
    assert len(batches) == 3
    b = torch.cat(batches, 1)
    assert b.batch_size == (4, 60)
    assert (b["next", "reward"] == 1).all()
    assert ("collector", "traj_ids") in b.keys(True)
    collector.shutdown()


@pytest.mark.slow
def test_under_multisync_collector() -> None:
    from torchrl.collectors import MultiSyncCollector

    def make_env() -> PoolEnv:
        return PoolEnv("CartPole-v1", 2, info_keys=[])

    collector = MultiSyncCollector([make_env, make_env], None, frames_per_batch=40,
                                   total_frames=80)
    n = sum(b.numel() for b in collector)
    assert n == 80
    collector.shutdown()


def test_bad_actions_give_clear_errors() -> None:
    env = PoolEnv("CartPole-v1", 3)
    td = env.reset()
    td["action"] = torch.zeros(3)
    with pytest.raises(TypeError, match="integer indices"):
        env.step(td)
    td["action"] = torch.zeros(3, 2, dtype=torch.int64)  # one-hot shape, not one-hot
    with pytest.raises(ValueError, match="single 1 per env"):
        env.step(td)
    td["action"] = torch.tensor([[0, 1], [1, 0], [0, 1]])  # one-hot is accepted
    assert env.step(td)["next", "observation"].shape == (3, 4)
    td["action"] = torch.zeros(4, dtype=torch.int64)[:3].reshape(3, 1, 1)
    with pytest.raises(ValueError, match=r"shape \[3\]"):
        env.step(td)
    td = env.reset()
    with pytest.raises(KeyError, match="action"):
        env.step(td)
    td["action"] = torch.zeros(3, 1, dtype=torch.int64)  # [n, 1] is accepted
    env.step(td)
    env.close()

    env = PoolEnv("Pendulum-v1", 2)
    td = env.reset()
    td["action"] = torch.zeros(2, 2)
    with pytest.raises(ValueError, match=r"continuous actions of shape \[2, 1\]"):
        env.step(td)
    td["action"] = torch.zeros(2, 1, dtype=torch.int64)
    with pytest.raises(TypeError, match="floating point"):
        env.step(td)
    td["action"] = torch.full((2, 1), float("nan"))
    with pytest.raises(ValueError, match="finite"):
        env.step(td)
    env.close()


def test_close() -> None:
    env = PoolEnv("CartPole-v1", 2)
    env.close()
    assert env.is_closed and env.pool.closed
    env.close()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_device() -> None:
    env = PoolEnv("CartPole-v1", 4, device="cuda", seed=0)
    check_env_specs(env)
    td = env.rollout(50, break_when_any_done=False)
    assert td.device.type == "cuda"
    assert td["next", "observation"].device.type == "cuda"
    ref = PoolEnv("CartPole-v1", 4, seed=0)
    policy = _cartpole_policy()
    a = env.rollout(80, policy, break_when_any_done=False)
    b = ref.rollout(80, policy, break_when_any_done=False)
    assert (a.cpu() == b).all()
    g = EnvBase.rollout(env, 80, policy, break_when_any_done=False)
    assert (g.cpu() == b).all()
    env.close()


@pytest.mark.slow
def test_ppo_learns_cartpole() -> None:
    """TorchRL's ClipPPOLoss + GAE on PoolEnv reach a mean return > 195."""
    from torch import nn
    from torchrl.envs.utils import ExplorationType, set_exploration_type
    from torchrl.modules import ProbabilisticActor, ValueOperator
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    torch.manual_seed(0)
    n_envs, steps = 16, 128
    env = PoolEnv("CartPole-v1", n_envs, seed=0, info_keys=["elapsed_step"],
                  categorical_action_encoding=True)  # the Categorical distribution's indices
    actor_net = nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                              nn.Linear(64, 2))
    actor = ProbabilisticActor(
        TensorDictModule(actor_net, ["observation"], ["logits"]), in_keys=["logits"],
        spec=env.full_action_spec_unbatched, distribution_class=torch.distributions.Categorical,
        return_log_prob=True)
    critic = ValueOperator(nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64),
                                         nn.Tanh(), nn.Linear(64, 1)), in_keys=["observation"])
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.2, entropy_coeff=0.0,
                       critic_coeff=0.5, normalize_advantage=True)
    gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic, average_gae=False)
    opt = torch.optim.Adam(loss.parameters(), lr=2.5e-3)
    td = env.reset()
    returns: list[float] = []
    for it in range(60):  # noqa: B007
        with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
            data = env.rollout(steps, actor, auto_reset=False, tensordict=td,
                               break_when_any_done=False)
            td = env.step_mdp(data[:, -1])
            gae(data)
        ended = data["next", "done"][..., 0]
        # Episode returns: elapsed steps at the end of an episode (CartPole reward = 1).
        returns += data["next", "elapsed_step"][ended].float().tolist()
        if len(returns) >= 20 and np.mean(returns[-20:]) > 195:
            break
        flat = data.reshape(-1)
        for _ in range(4):
            for idx in torch.randperm(flat.numel()).split(512):
                out = loss(flat[idx])
                total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
                opt.zero_grad()
                total.backward()
                nn.utils.clip_grad_norm_(loss.parameters(), 0.5)
                opt.step()
    env.close()
    assert len(returns) >= 20 and np.mean(returns[-20:]) > 195, (it, returns[-20:])
