"""Fragments: the base class, one-line wrapping, and the TorchRL-backed built-ins."""
from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.objectives.value import GAE

from torchfrag import Fragment
from torchfrag.algos.ppo import make_actor_critic, make_env
from torchfrag.fragments import (Act, Advantage, Collect, EnvReset, EnvStep, EpisodeStats, Learn,
                                 ReplaySample, ReplayWrite, Rollout, Wrap, wrap)


@pytest.fixture
def cartpole():
    env = make_env("CartPole-v1", 4, seed=0)
    yield env
    env.close()


class Double(Fragment):
    def __init__(self):
        super().__init__(in_keys=["x"], out_keys=["y"])

    def forward(self, td):
        return td.set("y", td["x"] * 2)


def test_subclass_declares_keys_and_defaults():
    f = Double()
    assert f.in_keys == ["x"] and f.out_keys == ["y"]
    assert f.impure is False and f._is_impure is False and f.passthrough
    out = f(TensorDict(x=torch.ones(2), batch_size=[2]))
    assert out["y"].tolist() == [2.0, 2.0]
    assert f.output_keys(frozenset({"x"})) == [frozenset({"x", "y"})]


def test_owned_and_read_parameters():
    a, b = nn.Linear(2, 2), nn.Linear(2, 1)
    f = Fragment(["x"], ["y"], impure=True, owns=a, reads=[a, b])
    assert f.impure and f._is_impure
    assert [id(p) for p in f.owned_parameters()] == [id(p) for p in a.parameters()]
    assert len(f.read_parameters()) == 4  # deduplicated


def test_wrap_any_tensordict_module_in_one_line():
    mod = TensorDictModule(nn.Linear(3, 1), ["obs"], ["value"])
    f = wrap(mod)
    assert isinstance(f, Wrap) and f.in_keys == ["obs"] and f.out_keys == ["value"]
    assert f.read_parameters() and not f.owned_parameters()
    assert wrap(f) is f
    assert wrap(mod, owns=True).owned_parameters()
    with pytest.raises(TypeError, match="pass in_keys= and out_keys="):
        wrap(nn.Linear(2, 2))


def test_act_and_exploration(cartpole):
    actor, _ = make_actor_critic(cartpole, [16])
    act = Act(actor)
    td = act(cartpole.reset())
    assert td["action"].shape == (4,) and "action_log_prob" in td.keys()
    det = Act(actor, exploration="deterministic")
    td0 = cartpole.reset()
    assert torch.equal(det(td0.clone())["action"], det(td0.clone())["action"])
    with pytest.raises(ValueError, match="exploration"):
        Act(actor, exploration="greedy")


def test_env_step_and_reset(cartpole):
    reset = EnvReset(cartpole)
    assert reset.impure and reset.out_keys[0] == "observation"
    step = EnvStep(cartpole)
    assert step.impure and step.in_keys == ["action"] and step.num_outputs() == 2
    td = reset()
    td["action"] = cartpole.action_spec.rand()
    transition, carry = step(td)
    assert transition["next", "reward"].shape == (4, 1)
    assert torch.equal(carry["observation"], transition["next", "observation"]) or \
        bool(transition["next", "done"].any())
    plain = EnvStep(cartpole, auto_reset=False)
    carry["action"] = cartpole.action_spec.rand()
    assert "next" in plain(carry).keys()


def test_rollout_shapes_body_and_carry(cartpole):
    actor, _ = make_actor_critic(cartpole, [16])
    rollout = Rollout(actor, cartpole, steps=10)
    assert rollout.impure and not rollout.passthrough
    assert [n.name for n in rollout.body_graph.nodes] == ["act", "env_step"]
    b1 = rollout()
    assert b1.batch_size == (4, 10)
    b2 = rollout()
    # the env state carries over: the second rollout starts where the first stopped
    not_done = ~b1["next", "done"][:, -1, 0]
    assert torch.equal(b2["observation"][:, 0][not_done], b1["next", "observation"][:, -1][not_done])
    assert rollout.frames == 80
    assert rollout.read_parameters()


def test_episode_stats():
    s = EpisodeStats()
    s.update(torch.ones(2, 3, 1), torch.tensor([[[0], [0], [1]], [[0], [0], [0]]]).bool())
    s.update(torch.ones(2, 2, 1), torch.tensor([[[0], [0]], [[1], [0]]]).bool())
    out = s.pop()
    assert out["episodes"] == 2 and out["episode_return"] == 3.5
    assert s.pop() == {}


def test_advantage_wraps_gae(cartpole):
    actor, critic = make_actor_critic(cartpole, [16])
    batch = Rollout(actor, cartpole, steps=8)()
    adv = Advantage(GAE(gamma=0.99, lmbda=0.95, value_network=critic))
    assert set(adv.out_keys) == {"advantage", "value_target"} and not adv.impure
    out = adv(batch)
    assert out["advantage"].shape == (4, 8, 1) and not out["advantage"].requires_grad


class _MSE(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(2, 1)
        self.in_keys, self.out_keys = ["x", "y"], ["loss_mse"]

    def forward(self, td):
        return TensorDict(loss_mse=((self.net(td["x"]) - td["y"]) ** 2).mean())


def test_learn_trains_and_returns_metrics():
    torch.manual_seed(0)
    x = torch.randn(256, 2)
    data = TensorDict(x=x, y=x @ torch.tensor([[1.0], [-2.0]]), batch_size=[256])
    loss = _MSE()
    learn = Learn(loss, lr=0.05, epochs=4, minibatch_size=64, max_grad_norm=10.0, anneal_steps=10)
    assert learn.impure and not learn.passthrough
    assert [id(p) for p in learn.owned_parameters()] == [id(p) for p in loss.parameters()]
    first = learn(data)
    assert set(first.keys()) == {"loss_mse", "loss", "grad_norm", "lr"}
    for _ in range(5):
        last = learn(data)
    assert float(last["loss"]) < 0.1 * float(first["loss"])
    assert float(last["lr"]) == pytest.approx(0.05 * (1 - 5 / 10))
    assert learn.calls == 6
    state = learn.state_dict_extra()
    learn2 = Learn(_MSE(), lr=0.05)
    learn2.load_state_dict_extra(state)
    assert learn2.calls == 6
    with pytest.raises(ValueError, match="not both"):
        Learn(loss, minibatch_size=4, num_minibatches=2)


def test_replay_write_then_sample():
    rb = ReplayBuffer(storage=LazyTensorStorage(100))
    write, sample = ReplayWrite(rb), ReplaySample(rb, batch_size=8, out_keys=["x"])
    assert write.impure and sample.impure
    td = TensorDict(x=torch.arange(20.0).reshape(4, 5), batch_size=[4, 5])
    assert write(td) is td and len(rb) == 20
    assert sample(td)["x"].shape == (8,)
    assert write.state_objects()[0] is sample.state_objects()[0]


def test_collect_from_any_iterable():
    batches = [TensorDict(x=torch.full((2,), float(i)), batch_size=[2]) for i in range(3)]
    c = Collect(batches, out_keys=["x"])
    assert c()["x"][0] == 0 and c()["x"][0] == 1 and c.frames == 4


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_act_fast_path_equals_actor(env_id):
    env = make_env(env_id, 5, seed=3)
    actor, _ = make_actor_critic(env, [16])
    fast, slow = Act(actor), Act(actor, fast=False)
    # the fast path covers torch.distributions (CartPole's Categorical), not TorchRL's TanhNormal
    assert (fast._fast is not None) == (env_id == "CartPole-v1") and slow._fast is None
    td = env.reset()
    torch.manual_seed(11)
    a = fast(td.clone())
    torch.manual_seed(11)
    b = slow(td.clone())
    assert set(a.keys()) == set(b.keys())
    for k in actor.out_keys:
        assert torch.equal(a[k], b[k]), k
    env.close()



@pytest.mark.parametrize("env_id", ["Pendulum-v1", "HalfCheetah-v5"])
def test_act_fast_path_equals_sac_actor(env_id):
    """SAC's TanhNormal actor (no log-probability): the fast path draws the same actions."""
    from torchfrag.algos.sac import make_sac_networks

    env = make_env(env_id, 5, seed=3)
    actor, _ = make_sac_networks(env, [16])
    fast, slow = Act(actor), Act(actor, fast=False)
    assert fast._fast is not None and slow._fast is None
    td = env.reset()
    torch.manual_seed(11)
    a = fast(td.clone())
    torch.manual_seed(11)
    b = slow(td.clone())
    assert set(a.keys()) == set(b.keys()) == {*td.keys(), "loc", "scale", "action"}
    for k in actor.out_keys:
        assert torch.equal(a[k], b[k]), k
    # the box is honoured (Pendulum's is [-2, 2])
    high = env.action_spec_unbatched.space.high
    assert (a["action"].abs() <= high).all()
    env.close()

@pytest.mark.parametrize(("envs", "steps", "blocks", "p_done"), [(5, 7, 4, 0.3), (3, 1, 200, 0.05)])
def test_episode_stats_match_a_step_by_step_count(envs: int, steps: int, blocks: int, p_done: float):
    """Blocks of several steps, and one-step blocks (SAC's rollout: the no-episode-end shortcut and
    the general case in turn), give the returns, lengths and running sums of a step-by-step count."""
    g = torch.Generator().manual_seed(0)
    stats = EpisodeStats()
    ret, length = torch.zeros(envs, dtype=torch.float64), torch.zeros(envs, dtype=torch.int64)
    want_r, want_l = [], []
    for _ in range(blocks):
        r = torch.randn(envs, steps, 1, generator=g)
        d = torch.rand(envs, steps, 1, generator=g) < p_done
        stats.update(r, d)
        for i in range(envs):  # the reference: env by env, step by step
            for t in range(steps):
                ret[i] += r[i, t, 0].double()
                length[i] += 1
                if d[i, t, 0]:
                    want_r.append((i, t, float(ret[i])))
                    want_l.append(int(length[i]))
                    ret[i], length[i] = 0, 0
        # stats records episodes env by env within one block; compare as multisets
        assert sorted(round(x, 9) for x in stats.returns) == sorted(round(x[2], 9) for x in want_r)
        assert sorted(stats.lengths) == sorted(want_l)
    assert len(want_r) > 3
    torch.testing.assert_close(stats._ret, ret, rtol=0, atol=1e-9)
    assert torch.equal(stats._len, length)
