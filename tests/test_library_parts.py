"""Library parts in place of hand-written ones (issue 16, item 7), each against what it replaced.

The reference implementations the package used to ship are written out here, so that a
replacement that changes behaviour fails: same weights and outputs for the Nature CNN, same
random actions, same scaled rewards, and EpisodeStats (kept) against TorchRL's
RewardSum + StepCounter; TorchRL's EndOfLifeTransform on a PoolEnv against the same
transform on Gymnasium's ALE env.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch import nn

pytest.importorskip("torchrl")

from torchrl.envs import (Compose, EndOfLifeTransform, RewardSum, StepCounter,  # noqa: E402
                          TransformedEnv)

from torchfrag.algos.fragments import RewardScale  # noqa: E402
from torchfrag.algos.networks import NatureCNN, make_cnn_actor_critic, ortho_init  # noqa: E402
from torchfrag.algos.replay import RandomActor  # noqa: E402
from torchfrag.envs import PoolEnv, list_envs  # noqa: E402
from torchfrag.fragments import EpisodeStats  # noqa: E402


# -- the hand-written versions the library parts replaced ---------------------------------------
class HandWrittenNatureCNN(nn.Module):
    """torchfrag's NatureCNN before it was built from TorchRL's ConvNet + MLP."""

    def __init__(self, in_channels: int = 4, features: int = 512) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
            nn.Linear(64 * 7 * 7, features), nn.ReLU(),
        )
        for m in self.net:
            ortho_init(m, math.sqrt(2))
        self.out_features = features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-3]
        y = self.net(x.reshape(-1, *x.shape[-3:]).float() / 255.0)
        return y.reshape(*lead, self.out_features)


def hand_written_random_actions(env, td):
    """RandomActor before it wrapped TorchRL's RandomPolicy."""
    return td.update(env.full_action_spec_unbatched.rand(td.batch_size))


def hand_written_reward_scale(td, scale: float):
    """RewardScale before it computed with TorchRL's RewardScaling."""
    return td.set(("next", "reward"), td.get(("next", "reward")) * float(scale))


# -- NatureCNN ---------------------------------------------------------------------------------
@pytest.mark.parametrize("in_channels, features", [(4, 512), (1, 256)])
def test_nature_cnn_same_parameters_init_and_outputs(in_channels: int, features: int) -> None:
    torch.manual_seed(7)
    old = HandWrittenNatureCNN(in_channels, features)
    after_old = torch.rand(3)
    torch.manual_seed(7)
    new = NatureCNN(in_channels, features)
    after_new = torch.rand(3)
    # the layers are built and initialised in the same order: the same random stream
    assert torch.equal(after_old, after_new)
    old_p, new_p = list(old.parameters()), list(new.parameters())
    assert [p.shape for p in old_p] == [p.shape for p in new_p]
    assert sum(p.numel() for p in new_p) == sum(p.numel() for p in old_p)
    if (in_channels, features) == (4, 512):
        assert sum(p.numel() for p in new_p) == 1_684_128  # the Nature DQN torso
    for a, b in zip(old_p, new_p):
        assert torch.equal(a, b)
    # biases zero, weights orthogonal with gain sqrt(2) (as the hand-written init)
    fc = new.fc[0].weight
    assert torch.allclose(fc @ fc.T, 2 * torch.eye(features), atol=1e-4)
    assert all(float(m.bias.detach().abs().max()) == 0 for m in new.modules() if hasattr(m, "bias")
               and isinstance(m.bias, torch.Tensor))
    for shape in [(in_channels, 84, 84), (5, in_channels, 84, 84), (2, 3, in_channels, 84, 84)]:
        x = torch.randint(0, 256, shape, dtype=torch.uint8)
        y_old, y_new = old(x), new(x)
        assert y_new.shape == (*shape[:-3], features)
        assert torch.equal(y_old, y_new)


def test_nature_cnn_gradients_match_and_actor_critic_builds() -> None:
    torch.manual_seed(1)
    old = HandWrittenNatureCNN()
    torch.manual_seed(1)
    new = NatureCNN()
    x = torch.randint(0, 256, (6, 4, 84, 84), dtype=torch.uint8)
    old(x).square().mean().backward()
    new(x).square().mean().backward()
    for a, b in zip(old.parameters(), new.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-7)

    from torchrl.data import Categorical, Composite, Unbounded

    class FakeEnv:
        batch_size = torch.Size([2])
        observation_spec = Composite(observation=Unbounded((2, 4, 84, 84)), shape=(2,))
        action_spec_unbatched = Categorical(6)

    actor, critic = make_cnn_actor_critic(FakeEnv())
    td = TensorDict(observation=torch.zeros(2, 4, 84, 84, dtype=torch.uint8), batch_size=[2])
    assert actor(td)["action"].shape == (2,) and critic(td)["state_value"].shape == (2, 1)


# -- RandomActor -------------------------------------------------------------------------------
@pytest.mark.parametrize("env_id, num_envs", [("CartPole-v1", 3), ("Pendulum-v1", 4),
                                              ("MountainCarContinuous-v0", 1)])
def test_random_actor_draws_what_the_hand_written_one_drew(env_id: str, num_envs: int) -> None:
    env = PoolEnv(env_id, num_envs, seed=0)
    actor = RandomActor(env)
    for seed in range(3):
        td = env.reset()
        torch.manual_seed(seed)
        want = hand_written_random_actions(env, td.clone())["action"]
        torch.manual_seed(seed)
        got = actor(td.clone())["action"]
        assert got.dtype == want.dtype and torch.equal(got, want)
        assert env.action_spec.is_in(got)
    assert actor.out_keys == ["action"] and actor.in_keys == ["observation"]
    env.close()


# -- RewardScale -------------------------------------------------------------------------------
@pytest.mark.parametrize("scale", [0.1, 0.5, 3.0, 1e-3])
def test_reward_scale_equals_the_hand_written_product(scale: float) -> None:
    g = torch.Generator().manual_seed(0)
    reward = torch.randn(8, 16, 1, generator=g) * 100
    reward[0, 0] = 0.0
    td = TensorDict({("next", "reward"): reward.clone()}, batch_size=[8, 16])
    want = hand_written_reward_scale(td.clone(), scale)[("next", "reward")]
    frag = RewardScale(scale)
    got = frag(td.clone())[("next", "reward")]
    assert torch.equal(got, want)
    # a fragment declaring per_env, with no state of its own (checkpoints unchanged)
    assert frag.per_env and "per_env" in frag.tags()
    assert dict(frag.state_dict()) == {}


@pytest.mark.parametrize("scale", [0, -1.0, float("nan"), "0.1", True])
def test_reward_scale_refuses_what_reward_scaling_would_change(scale) -> None:
    with pytest.raises(ValueError, match="scale must be a number > 0"):
        RewardScale(scale)


# -- EpisodeStats (kept) against RewardSum + StepCounter ----------------------------------------
@pytest.mark.parametrize("env_id, exact", [("CartPole-v1", True), ("Pendulum-v1", False)])
def test_episode_stats_equals_reward_sum_and_step_counter(env_id: str, exact: bool) -> None:
    env = TransformedEnv(PoolEnv(env_id, 4, seed=3), Compose(RewardSum(), StepCounter()))
    torch.manual_seed(0)
    batch = env.rollout(450, break_when_any_done=False)
    nxt = batch.get("next")
    done = nxt["done"][..., 0]
    assert int(done.sum()) >= 4
    # TorchRL's: the running sums at each episode's last step, env by env then by time
    want_returns = nxt["episode_reward"][..., 0][done].double()
    want_lengths = nxt["step_count"][..., 0][done]
    stats = EpisodeStats()
    for lo in range(0, 450, 150):  # in blocks, carrying the unfinished episodes over
        stats.update(nxt["reward"][:, lo:lo + 150], nxt["done"][:, lo:lo + 150])
    got_r, got_l = torch.tensor(stats.returns, dtype=torch.float64), torch.tensor(stats.lengths)
    # EpisodeStats lists each block's episodes env by env; order both by (env, end step)
    env_idx, step_idx = done.nonzero(as_tuple=True)
    order = np.lexsort((env_idx.numpy(), step_idx.numpy() // 150))
    assert torch.equal(got_l, want_lengths[order])
    if exact:
        assert torch.equal(got_r, want_returns[order])
    else:  # float32 running sums (RewardSum) against float64 ones
        assert torch.allclose(got_r, want_returns[order], rtol=1e-5, atol=1e-3)
    env.close()


# -- EndOfLifeTransform on an Atari PoolEnv ----------------------------------------------------
ALIGN = {"noop_max": 0, "use_fire_reset": False}


def _gym_breakout():
    """TorchRL's GymWrapper over Gymnasium's ALE Breakout, preprocessed as the pool's."""
    import gymnasium
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation
    from torchrl.envs import GymWrapper

    ale_py = pytest.importorskip("ale_py")
    gymnasium.register_envs(ale_py)
    env = gymnasium.make("ALE/Breakout-v5", frameskip=1, repeat_action_probability=0.0)
    env = AtariPreprocessing(env, noop_max=0, frame_skip=4, screen_size=84)
    env = FrameStackObservation(env, 4)
    return GymWrapper(env, categorical_action_encoding=True)


@pytest.mark.skipif("Breakout-v5" not in list_envs(), reason="Atari envs not built")
@pytest.mark.filterwarnings("ignore:The base_env is not a gym env")
@pytest.mark.parametrize("num_envs", [2, None])
def test_end_of_life_transform_on_pool_env_matches_gymenv_on_ale(num_envs: int | None) -> None:
    """TorchRL's own EndOfLifeTransform: a PoolEnv (auto-resets included) vs GymWrapper on ALE.

    Batched (``[2]``, the pool's conventions) and unbatched (GymEnv's conventions).
    """
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    n, steps = num_envs or 1, 700 if num_envs else 400
    ours = TransformedEnv(PoolEnv("Breakout-v5", num_envs, seed=0, categorical_action_encoding=True,
                                  **ALIGN), EndOfLifeTransform())
    refs = [TransformedEnv(_gym_breakout(), EndOfLifeTransform()) for _ in range(n)]
    actions = torch.from_numpy(np.random.default_rng(0).integers(0, 4, size=(steps, n)))

    def row(x: torch.Tensor, i: int) -> torch.Tensor:
        return (x if num_envs is None else x[i]).reshape(-1).to(torch.float64)

    td = ours.reset()
    ref_tds = [r.reset() for r in refs]
    keys = ["lives", "end-of-life"]
    for i in range(n):
        for k in keys:
            assert torch.equal(row(td[k], i), row(ref_tds[i][k], None)), k
    eol_seen, games = 0, 0
    for t in range(steps):
        td["action"] = actions[t] if num_envs else actions[t, 0]
        step, td = ours.step_and_maybe_reset(td)
        for i in range(n):
            ref_tds[i]["action"] = actions[t, i]
            ref_step, ref_tds[i] = refs[i].step_and_maybe_reset(ref_tds[i])
            for k in [*keys, "done", "reward"]:
                want = row(ref_step["next", k], None)
                assert torch.equal(row(step["next", k], i), want), (t, i, k)
            for k in keys:  # after the auto-reset: the new game's values
                assert torch.equal(row(td[k], i), row(ref_tds[i][k], None)), (t, i, k)
        eol_seen += int(step["next", "end-of-life"].sum())
        games += int(step["next", "done"].sum())
    assert games >= n and eol_seen >= 5 * games  # lives lost, game overs and new games covered
    ours.close()
    for r in refs:
        r.close()


@pytest.mark.skipif("Breakout-v5" not in list_envs(), reason="Atari envs not built")
def test_ale_lives_follow_the_fast_paths_and_only_atari_has_them() -> None:
    """``env.unwrapped.ale.lives()`` after the fused step/rollout paths equals the lives info."""
    env = PoolEnv("Breakout-v5", 3, seed=1, **ALIGN)
    assert env.unwrapped is env
    td = env.reset()
    assert torch.equal(env.ale.lives(), td["lives"].long())
    for _ in range(300):
        td["action"] = torch.randint(0, 4, (3,))
        step, td = env.step_and_maybe_reset(td)
        # after the step: the step's lives; the carried root holds the new game's after a reset
        assert torch.equal(env.unwrapped.ale.lives(), td["lives"].long())
    out = env.rollout(200, break_when_any_done=False)
    assert torch.equal(env.ale.lives(), out["next", "lives"][:, -1].long())
    single = PoolEnv("Breakout-v5", seed=1, **ALIGN)  # unbatched: a 0-dim count, as ale.lives()
    single.reset()
    assert env.ale.lives().dtype == torch.int64 and single.ale.lives().shape == ()
    cart = PoolEnv("CartPole-v1", 2)
    assert cart.unwrapped is cart
    with pytest.raises(AttributeError, match="ale"):
        cart.ale  # noqa: B018
    for e in (env, single, cart):
        e.close()


def test_nature_cnn_loads_checkpoints_of_the_hand_written_one() -> None:
    torch.manual_seed(2)
    old = HandWrittenNatureCNN()
    new = NatureCNN()
    new.load_state_dict(old.state_dict())  # strict: every old key maps onto a new one
    x = torch.randint(0, 256, (2, 4, 84, 84), dtype=torch.uint8)
    assert torch.equal(new(x), old(x))
    # and inside a larger module (prefixed keys), as in an actor-critic checkpoint
    outer_old, outer_new = nn.Sequential(HandWrittenNatureCNN()), nn.Sequential(NatureCNN())
    outer_new.load_state_dict(outer_old.state_dict())
    assert torch.equal(outer_new(x), outer_old(x))
