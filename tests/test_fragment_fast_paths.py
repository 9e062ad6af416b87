"""The in-process fast paths give what the plain paths give.

* a Rollout's body runs its fragments' ``forward`` directly (:func:`torchfrag.graph.direct.direct_forward`):
  same transitions and carried env state as calling the fragments as modules, and a hook,
  a compiled call or a replaced forward still takes the module path;
* ``Learn``'s metrics summed by one stack per minibatch equal the per-minibatch means;
* key checks stay at capture time.
"""
from __future__ import annotations

import functools

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch import nn

from torchfrag import capture
from torchfrag.envs import PoolEnv
from torchfrag.fragments import Fragment, Learn, Rollout
from torchfrag.graph import MissingKeyError
from torchfrag.graph.direct import direct_forward


def _rollout(seed: int = 0) -> Rollout:
    torch.manual_seed(seed)
    env = PoolEnv("CartPole-v1", num_envs=3, seed=seed)
    logits = TensorDictModule(nn.Linear(4, 2), ["observation"], ["logits"])

    class Greedy(Fragment):  # a user act fragment written here: argmax of a linear layer
        def __init__(self) -> None:
            super().__init__(["observation"], ["action"], reads=logits)
            self.logits = logits

        def forward(self, td):
            return td.set("action", self.logits(td)["logits"].argmax(-1))

    return Rollout(Greedy(), env, steps=40)


def _module_path(gm) -> None:
    """Makes the body's fragments take nn.Module.__call__ (a hook that does nothing)."""
    for mod in gm.children():
        mod.register_forward_hook(lambda *_: None)


def test_rollout_direct_steps_equal_module_calls():
    fast, slow = _rollout(), _rollout()
    gm = slow.body_graph.module
    _module_path(gm)
    assert isinstance(direct_forward(fast.body_graph.module), functools.partial)  # the fast path is taken
    assert direct_forward(gm).args[0].act is gm.act  # a hooked fragment is called as a module
    for _ in range(3):  # the env state carries over between calls
        a, b = fast(), slow()
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        for key in a.keys(True, True):
            assert torch.equal(a[key], b[key]), key
    assert torch.equal(fast._carry["observation"], slow._carry["observation"])
    assert fast.frames == slow.frames == 3 * 3 * 40
    assert fast.stats.pop() == slow.stats.pop()
    fast.env.close()
    slow.env.close()


def test_direct_forward_keeps_hooks_compiled_calls_and_replaced_forwards():
    rollout = _rollout()
    gm = rollout.body_graph.module
    plain = direct_forward(gm)
    assert plain != gm.forward and plain.args[0].act == gm.act.forward  # bound forward, no dispatch
    calls = []
    handle = gm.act.register_forward_pre_hook(lambda mod, args: calls.append(1))
    rollout()
    assert len(calls) == rollout.steps  # a hook registered between calls runs on every step
    handle.remove()
    gm.env_step._compiled_call_impl = gm.env_step._call_impl  # what single_device's compile sets
    assert direct_forward(gm).args[0].env_step is gm.env_step  # called as a module
    gm.env_step._compiled_call_impl = None
    seen = []
    gm.forward = lambda carry: seen.append(1) or type(gm).forward(gm, carry)  # as fuse_rollout does
    rollout()
    assert len(seen) == rollout.steps
    del gm.forward
    rollout.env.close()


class _Recorder(nn.Module):
    """An MSE loss that records the scalars it returns, to average them by hand."""

    def __init__(self, dtype: torch.dtype = torch.float32, shape: tuple = ()) -> None:
        super().__init__()
        self.net = nn.Linear(2, 1).to(dtype)
        self.in_keys, self.out_keys = ["x", "y"], ["loss_mse", "bias"]
        self.dtype, self.shape, self.seen = dtype, shape, []

    def forward(self, td):
        loss = ((self.net(td["x"].to(self.dtype)) - td["y"].to(self.dtype)) ** 2).mean()
        bias = self.net.bias.detach().reshape(self.shape).clone()
        self.seen.append((float(loss.detach()), float(bias.sum())))
        return TensorDict(loss_mse=loss.reshape(self.shape), bias=bias)


@pytest.mark.parametrize("dtype,shape", [(torch.float32, ()), (torch.float64, (1,))])
def test_learn_metrics_are_the_minibatch_means(dtype, shape):
    torch.manual_seed(0)
    x = torch.randn(96, 2)
    data = TensorDict(x=x, y=x @ torch.tensor([[1.0], [-2.0]]), batch_size=[96])
    loss = _Recorder(dtype, shape)
    learn = Learn(loss, lr=0.05, epochs=3, minibatch_size=32)
    out = learn(data)
    assert len(loss.seen) == 9
    assert float(out["loss_mse"]) == pytest.approx(sum(s[0] for s in loss.seen) / 9, rel=1e-5)
    assert float(out["loss"]) == pytest.approx(sum(s[0] for s in loss.seen) / 9, rel=1e-5)
    assert float(out["bias"]) == pytest.approx(sum(s[1] for s in loss.seen) / 9, rel=1e-5, abs=1e-7)
    assert out["loss_mse"].dtype == torch.float32 and float(out["grad_norm"]) > 0


def test_missing_key_still_found_at_capture():
    class Needs(Fragment):
        def __init__(self) -> None:
            super().__init__(["absent"], ["y"])

        def forward(self, td):
            return td.set("y", td["absent"])

    class Loop(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rollout, self.needs = _rollout(), Needs()

        def forward(self):
            return self.needs(self.rollout())

    loop = Loop()
    with pytest.raises(MissingKeyError, match="absent"):
        capture(loop)
    loop.rollout.env.close()


def _transitions(n: int, t: int, base: float) -> TensorDict:
    x = torch.arange(n * t * 3, dtype=torch.float32).reshape(n, t, 3) + base
    nxt = TensorDict(observation=x + 0.5, reward=x[..., :1] * 2, done=x[..., :1] > base + 4,
                     batch_size=[n, t])
    return TensorDict(observation=x, action=x[..., :2].double(), next=nxt, batch_size=[n, t])


def test_replay_write_and_sample_equal_torchrl_extend_and_sample():
    """ReplayWrite/ReplaySample's direct paths on a plain buffer leave the same buffer state and
    draw the same samples as TorchRL's extend/sample, through a wrap-around of the storage;
    buffers they do not apply to go through TorchRL."""
    from torchrl.data import LazyTensorStorage, ReplayBuffer, TensorDictReplayBuffer

    from torchfrag.fragments import ReplaySample, ReplayWrite
    from torchfrag.fragments import replay as replay_mod

    ref = ReplayBuffer(storage=LazyTensorStorage(12))
    ours = ReplayBuffer(storage=LazyTensorStorage(12))
    write, sample = ReplayWrite(ours), ReplaySample(ours, batch_size=5)
    direct = 0
    for i, (n, t) in enumerate([(1, 1), (2, 3), (1, 1), (1, 2), (1, 1), (3, 1), (1, 1), (2, 2), (1, 1)]):
        data = _transitions(n, t, 100.0 * i)
        ref.extend(data.reshape(-1))
        before = ours._writer._write_count
        direct += replay_mod._round_robin_write(ours, data.clone()) or 0
        if ours._writer._write_count == before:  # not taken (first write, wrap-around): as the fragment
            write(data)
        assert len(ours) == len(ref)
        assert (ours._writer._cursor, ours._writer._write_count) == (ref._writer._cursor, ref._writer._write_count)
        assert ours._storage._last_cursor.tolist() == ref._storage._last_cursor.tolist()
        assert (ours._storage._storage[:len(ref)] == ref._storage._storage[:len(ref)]).all()
        torch.manual_seed(i)
        expected = ref.sample(5)
        torch.manual_seed(i)
        got = sample()
        assert got.batch_size == expected.batch_size and (got == expected).all()
        assert got.get("action").dtype == torch.float64
    assert 0 < direct < 9  # both paths were exercised (the first write initialises the storage)
    assert ours.state_dict()["_writer"] == ref.state_dict()["_writer"]
    # mismatched entries and other buffer kinds: TorchRL's own methods
    assert not replay_mod._round_robin_write(ours, _transitions(1, 1, 0.0).exclude("action"))
    assert replay_mod._uniform_sample(TensorDictReplayBuffer(storage=LazyTensorStorage(4)), 2) is None
    assert replay_mod._plain_storage(ReplayBuffer(storage=LazyTensorStorage(4))) is None  # not initialised


@pytest.mark.parametrize("bounded", [False, True])
def test_act_tanh_normal_sample_equals_the_distribution(bounded):
    """Act's TanhNormal sampler gives TorchRL's TanhNormal.rsample tensors, saturated ones included,
    through a whole SAC actor (against fast=False) and alone."""
    from torchrl.modules import TanhNormal

    from torchfrag.algos.envs import make_env
    from torchfrag.algos.sac import make_sac_networks
    from torchfrag.fragments import Act
    from torchfrag.fragments.act import _tanh_normal_sampler

    low = torch.tensor([-2.0, -1.0, 0.0]) if bounded else -torch.ones(3)
    high = torch.tensor([2.0, 1.0, 0.5]) if bounded else torch.ones(3)
    sample = _tanh_normal_sampler(TanhNormal, {"low": low, "high": high}, ["loc", "scale"])
    loc = torch.randn(64, 3, generator=torch.Generator().manual_seed(0)) * 5
    loc[0] = torch.tensor([30.0, -30.0, 0.0])  # tanh saturates: the clamp decides
    scale = torch.rand(64, 3, generator=torch.Generator().manual_seed(1)) + 1e-3
    torch.manual_seed(2)
    expected = TanhNormal(loc, scale, low=low, high=high).rsample()
    torch.manual_seed(2)
    assert torch.equal(sample(loc, scale), expected)
    assert sample(loc, scale[:1]) is None  # broadcast scale: the distribution's own path
    assert _tanh_normal_sampler(TanhNormal, {"low": low, "high": high, "tanh_loc": True}, ["loc", "scale"]) is None

    env = make_env("Pendulum-v1", 4)
    actor, _ = make_sac_networks(env, [16])
    td = env.reset()
    fast, slow = Act(actor), Act(actor, fast=False)
    assert fast._fast is not None
    torch.manual_seed(3)
    a = fast(td.clone())["action"]
    torch.manual_seed(3)
    b = slow(td.clone())["action"]
    assert torch.equal(a, b)
    env.close()


def test_replay_gather_rows_equals_tensordict_indexing():
    """The sample's row gather gives what indexing the stored TensorDict gives (nested entries,
    a nested TensorDict with more batch dimensions, several dtypes), and declines what it does not cover."""
    from tensordict import NonTensorData

    from torchfrag.fragments.replay import _gather_rows

    g = torch.Generator().manual_seed(0)
    stored = TensorDict(observation=torch.randn(10, 3, generator=g), action=torch.randn(10, 2, generator=g).double(),
                        next=TensorDict(reward=torch.randn(10, 1, generator=g), done=torch.rand(10, 1, generator=g) > 0.5,
                                        deep=TensorDict(x=torch.arange(40).reshape(10, 4), batch_size=[10, 4]),
                                        batch_size=[10]),
                        batch_size=[10])
    index = torch.tensor([3, 3, 9, 0, 5])
    got, expected = _gather_rows(stored, index), stored[index]
    assert got.batch_size == expected.batch_size and got["next", "deep"].batch_size == expected["next", "deep"].batch_size
    assert set(got.keys(True, True)) == set(expected.keys(True, True))
    for key in expected.keys(True, True):
        assert got.get(key).dtype == expected.get(key).dtype and torch.equal(got.get(key), expected.get(key))
    stored.set("tag", NonTensorData("x", batch_size=[10]))
    assert _gather_rows(stored, index) is None  # a non-tensor entry: TensorDict's own indexing
    assert _gather_rows(stored.exclude("tag").lock_(), index) is None
    assert _gather_rows(TensorDict(x=torch.zeros(10, 2), batch_size=[10], names=["t"]), index) is None
