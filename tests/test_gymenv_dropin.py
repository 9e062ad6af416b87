"""PoolEnv as a one-line replacement for TorchRL's GymEnv.

The loops below are written the way TorchRL's sota-implementations write them
(dqn_cartpole, ppo_mujoco), on TorchRL's own components; each runs once with
``GymEnv`` and once with ``PoolEnv`` where only the env line differs, and with
``PoolCollector`` in place of TorchRL's ``Collector``.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

pytest.importorskip("torchrl")

from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential  # noqa: E402
from torchrl.collectors import Collector  # noqa: E402
from torchrl.data import LazyTensorStorage, ReplayBuffer, TensorDictReplayBuffer  # noqa: E402
from torchrl.data.replay_buffers import SamplerWithoutReplacement  # noqa: E402
from torchrl.envs import (  # noqa: E402
    ClipTransform,
    Compose,
    DoubleToFloat,
    GymEnv,
    RewardSum,
    StepCounter,
    TransformedEnv,
    VecNorm,
)
from torchrl.modules import MLP, EGreedyModule, ProbabilisticActor, QValueActor, TanhNormal  # noqa: E402
from torchrl.modules import ValueOperator  # noqa: E402
from torchrl.objectives import ClipPPOLoss, DQNLoss, SoftUpdate  # noqa: E402
from torchrl.objectives.value import GAE  # noqa: E402

from torchfrag.collectors import PoolCollector  # noqa: E402
from torchfrag.envs import PoolEnv, list_envs  # noqa: E402

HAVE_MUJOCO = "HalfCheetah-v5" in list_envs()
HAVE_ATARI = "Pong-v5" in list_envs()


# -- dqn_cartpole, as TorchRL writes it ---------------------------------------------------
def _dqn_cartpole(env_line, collector_cls) -> dict:
    torch.manual_seed(0)

    def make_env():
        env = env_line("CartPole-v1")  # the only line that differs
        return TransformedEnv(env, Compose(StepCounter(), RewardSum()))

    env = make_env()
    qnet = QValueActor(MLP(in_features=4, out_features=2, num_cells=[32, 32]),
                       in_keys=["observation"], spec=env.action_spec)
    explore = TensorDictSequential(qnet, EGreedyModule(env.action_spec, eps_init=1.0,
                                                      annealing_num_steps=1000))
    collector = collector_cls(make_env, explore, frames_per_batch=50, total_frames=300)
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000), batch_size=32)
    loss = DQNLoss(qnet, loss_function="l2", delay_value=True)
    loss.make_value_estimator(gamma=0.99)
    updater = SoftUpdate(loss, eps=0.995)
    optim = torch.optim.Adam(loss.parameters(), lr=1e-3)
    losses, frames, episode_rewards = [], 0, []
    for data in collector:
        frames += data.numel()
        rb.extend(data.reshape(-1))
        done = data["next", "done"]
        episode_rewards += data["next", "episode_reward"][done].tolist()
        for _ in range(4):
            value = loss(rb.sample())["loss"]
            optim.zero_grad()
            value.backward()
            optim.step()
            updater.step()
            losses.append(float(value))
        explore[1].step(data.numel())
    collector.shutdown()
    env.close()
    return {"frames": frames, "losses": losses, "episode_rewards": episode_rewards,
            "keys": sorted(map(str, data.keys(True, True)))}


@pytest.mark.parametrize("collector_cls", [Collector, PoolCollector], ids=["Collector",
                                                                             "PoolCollector"])
def test_dqn_cartpole_loop(collector_cls) -> None:
    ref = _dqn_cartpole(GymEnv, Collector)
    ours = _dqn_cartpole(PoolEnv, collector_cls)
    assert ours["frames"] == ref["frames"] == 300
    assert ours["keys"] == ref["keys"]
    assert all(np.isfinite(ours["losses"])) and len(ours["losses"]) == len(ref["losses"])
    # Random-ish CartPole episodes: ~10-60 steps, as with GymEnv.
    assert ours["episode_rewards"] and 5 <= np.mean(ours["episode_rewards"]) <= 100


# -- ppo_mujoco, as TorchRL writes it ---------------------------------------------------
def _ppo_mujoco(env_line, collector_cls, env_name: str) -> dict:
    torch.manual_seed(0)

    def make_env():
        env = env_line(env_name)  # the only line that differs
        env = TransformedEnv(env)
        env.append_transform(VecNorm(in_keys=["observation"], decay=0.99999, eps=1e-2))
        env.append_transform(ClipTransform(in_keys=["observation"], low=-10, high=10))
        env.append_transform(RewardSum())
        env.append_transform(StepCounter())
        env.append_transform(DoubleToFloat(in_keys=["observation"]))
        return env

    env = make_env()
    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    actor_net = nn.Sequential(MLP(in_features=n_obs, out_features=2 * n_act, num_cells=[32, 32]),
                              NormalParamExtractor())
    actor = ProbabilisticActor(
        TensorDictModule(actor_net, ["observation"], ["loc", "scale"]), in_keys=["loc", "scale"],
        spec=env.action_spec, distribution_class=TanhNormal,
        distribution_kwargs={"low": env.action_spec.space.low, "high": env.action_spec.space.high},
        return_log_prob=True)
    critic = ValueOperator(MLP(in_features=n_obs, out_features=1, num_cells=[32, 32]),
                           in_keys=["observation"])
    collector = collector_cls(make_env, actor, frames_per_batch=64, total_frames=128)
    buffer = ReplayBuffer(storage=LazyTensorStorage(64), sampler=SamplerWithoutReplacement(),
                          batch_size=16)
    adv = GAE(gamma=0.99, lmbda=0.95, value_network=critic, average_gae=False)
    loss = ClipPPOLoss(actor, critic, clip_epsilon=0.2, entropy_coeff=0.0)
    optim = torch.optim.Adam(loss.parameters(), lr=3e-4)
    losses, frames = [], 0
    for data in collector:
        frames += data.numel()
        with torch.no_grad():
            data = adv(data)
        buffer.extend(data.reshape(-1))
        for batch in buffer:
            out = loss(batch)
            total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
            optim.zero_grad()
            total.backward()
            optim.step()
            losses.append(float(total))
    collector.shutdown()
    env.close()
    return {"frames": frames, "losses": losses, "dtype": data["observation"].dtype,
            "keys": sorted(map(str, data.keys(True, True)))}


@pytest.mark.skipif(not HAVE_MUJOCO, reason="MuJoCo envs not built")
@pytest.mark.parametrize("collector_cls", [Collector, PoolCollector], ids=["Collector",
                                                                             "PoolCollector"])
def test_ppo_mujoco_loop(collector_cls) -> None:
    pytest.importorskip("mujoco")
    ref = _ppo_mujoco(GymEnv, Collector, "HalfCheetah-v5")
    ours = _ppo_mujoco(PoolEnv, collector_cls, "HalfCheetah-v5")
    assert ours["frames"] == ref["frames"] == 128
    assert ours["keys"] == ref["keys"] and ours["dtype"] == ref["dtype"] == torch.float32
    assert len(ours["losses"]) == len(ref["losses"]) and all(np.isfinite(ours["losses"]))


# -- specs, keys, dtypes and shapes against GymEnv ---------------------------------------
ATARI_RAW = dict(from_pixels=True, gray_scale=False, img_height=210, img_width=160, stack_num=1)
TABLE = [
    ("CartPole-v1", "CartPole-v1", {}),
    ("Acrobot-v1", "Acrobot-v1", {}),
    ("Pendulum-v1", "Pendulum-v1", {}),
    ("MountainCarContinuous-v0", "MountainCarContinuous-v0", {}),
    pytest.param("HalfCheetah-v5", "HalfCheetah-v5", {},
                 marks=pytest.mark.skipif(not HAVE_MUJOCO, reason="no MuJoCo")),
    pytest.param("Hopper-v5", "Hopper-v5", {},
                 marks=pytest.mark.skipif(not HAVE_MUJOCO, reason="no MuJoCo")),
    pytest.param("Pong-v5", "ALE/Pong-v5", ATARI_RAW,
                 marks=pytest.mark.skipif(not HAVE_ATARI, reason="no Atari")),
    pytest.param("Breakout-v5", "ALE/Breakout-v5", ATARI_RAW,
                 marks=pytest.mark.skipif(not HAVE_ATARI, reason="no Atari")),
]


def _leaf_summary(spec, image: bool) -> dict:
    out = {}
    for key in spec.keys(True, True):
        leaf = spec[key]
        shape = tuple(leaf.shape)
        # Our frames are [C, H, W], GymEnv's raw Atari frames [H, W, C] (documented).
        out[key] = (type(leaf).__name__, leaf.dtype, tuple(sorted(shape)) if image else shape)
    return out


@pytest.mark.parametrize("ours_id,gym_id,options", TABLE)
def test_specs_match_gymenv(ours_id: str, gym_id: str, options: dict) -> None:
    if gym_id.startswith("ALE/"):
        pytest.importorskip("ale_py")
        import ale_py
        import gymnasium
        gymnasium.register_envs(ale_py)
    if ours_id in ("HalfCheetah-v5", "Hopper-v5"):
        pytest.importorskip("mujoco")
    ref = GymEnv(gym_id)
    ours = PoolEnv(ours_id, **options)
    image = bool(options.get("from_pixels"))
    assert ours.batch_size == ref.batch_size == torch.Size([])
    assert _leaf_summary(ours.observation_spec, image) == _leaf_summary(ref.observation_spec, image)
    assert _leaf_summary(ours.full_action_spec, False) == _leaf_summary(ref.full_action_spec, False)
    assert _leaf_summary(ours.full_reward_spec, False) == _leaf_summary(ref.full_reward_spec, False)
    assert _leaf_summary(ours.full_done_spec, False) == _leaf_summary(ref.full_done_spec, False)
    obs_key = "pixels" if image else "observation"
    for attr in ("low", "high"):
        a = getattr(ours.observation_spec[obs_key].space, attr, None)
        b = getattr(ref.observation_spec[obs_key].space, attr, None)
        if a is not None and not image:
            torch.testing.assert_close(a, b)
    a_low = getattr(ours.action_spec.space, "low", None)
    if a_low is not None:
        torch.testing.assert_close(a_low, ref.action_spec.space.low)
        torch.testing.assert_close(ours.action_spec.space.high, ref.action_spec.space.high)
    # The same rollout layout.
    td_ours = ours.rollout(5, break_when_any_done=False)
    td_ref = ref.rollout(5, break_when_any_done=False)
    assert sorted(map(str, td_ours.keys(True, True))) == sorted(map(str, td_ref.keys(True, True)))
    for key in td_ref.keys(True, True):
        assert td_ours[key].dtype == td_ref[key].dtype, key
        if not image:
            assert td_ours[key].shape == td_ref[key].shape, key
    ours.close()
    ref.close()


def test_float32_observations_on_request() -> None:
    env_id = "HalfCheetah-v5" if HAVE_MUJOCO else "Pendulum-v1"
    env = PoolEnv(env_id, observation_dtype=torch.float32)
    td = env.rollout(3)
    assert td["observation"].dtype == td["next", "observation"].dtype == torch.float32
    assert env.observation_spec["observation"].dtype == torch.float32
    env.close()
    batched = PoolEnv(env_id, 3, observation_dtype="float32", info_keys=[])
    assert batched.rollout(4, break_when_any_done=False)["next", "observation"].dtype == \
        torch.float32
    batched.close()
    with pytest.raises(ValueError, match="observation_dtype"):
        PoolEnv(env_id, observation_dtype="nope")
    with pytest.raises(ValueError, match="num_envs"):
        PoolEnv(env_id, 0)


def test_one_hot_batched_fast_rollout_matches_generic() -> None:
    env = PoolEnv("CartPole-v1", 4, categorical_action_encoding=False, info_keys=[], seed=0)
    assert env.action_spec.shape == (4, 2)
    policy = TensorDictModule(
        lambda o: torch.nn.functional.one_hot((o[..., 2] > 0).long(), 2), ["observation"],
        ["action"])
    fast = env.rollout(60, policy, break_when_any_done=False)
    env.set_seed(0)
    slow = TorchRLRollout.generic(env, 60, policy)
    assert torch.equal(fast["action"], slow["action"])
    assert torch.equal(fast["next", "observation"], slow["next", "observation"])
    env.close()


class TorchRLRollout:
    """TorchRL's own rollout loop (the EnvBase method, bypassing PoolEnv's fast path)."""

    @staticmethod
    def generic(env, steps, policy):
        from torchrl.envs import EnvBase
        return EnvBase.rollout(env, steps, policy, break_when_any_done=False)


@pytest.mark.skipif(not HAVE_MUJOCO, reason="MuJoCo envs not built")
def test_next_infos_are_the_terminal_steps() -> None:
    pytest.importorskip("mujoco")

    def run(limit: int):
        env = PoolEnv("HalfCheetah-v5", 2, seed=3, info_keys=["x_position"],
                      max_episode_steps=limit)
        td = env.rollout(5, lambda td: td.set("action", torch.full((2, 6), 0.5)),
                         break_when_any_done=False)
        env.close()
        return td

    ended, going = run(5), run(100)
    assert bool(ended["next", "done"][:, 4].all()) and not bool(going["next", "done"].any())
    torch.testing.assert_close(ended["next", "x_position"], going["next", "x_position"])
    torch.testing.assert_close(ended["next", "observation"], going["next", "observation"])


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_unbatched_env_passes_torchrl_checks(env_id: str) -> None:
    import pickle

    from torchrl.envs import ObservationNorm
    from torchrl.envs.utils import check_env_specs

    env = PoolEnv(env_id, seed=0)
    check_env_specs(env)
    td = env.rollout(400)  # stops at the first done, as GymEnv's
    assert td.ndim == 1 and (bool(td["next", "done"][-1]) or td.shape[0] == 400)
    copy = pickle.loads(pickle.dumps(env))
    assert copy.batch_size == torch.Size([]) and copy.action_spec == env.action_spec
    norm = TransformedEnv(PoolEnv(env_id, seed=0), ObservationNorm(in_keys=["observation"]))
    norm.transform.init_stats(64)  # TorchRL's defaults work on the unbatched env
    assert norm.transform.loc.shape == env.observation_spec["observation"].shape
    for e in (env, copy, norm):
        e.close()
