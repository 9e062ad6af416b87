"""A Rollout's direct steps (plain tensors) against its captured body: the same batches, carries
and env state from the same seeds, across episode ends; the direct steps only where they apply."""
from __future__ import annotations

import pytest
import torch
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.modules import ProbabilisticActor, TanhNormal

from torchfrag.envs import PoolEnv
from torchfrag.fragments import Rollout


def _rollout(env_id: str, num_envs: int, steps: int) -> Rollout:
    env = PoolEnv(env_id, num_envs=num_envs, seed=3, observation_dtype=torch.float32, info_keys=[])
    obs = env.observation_spec["observation"].shape[-1]
    act = env.action_spec.shape[-1]
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(obs, 16), nn.ReLU(), nn.Linear(16, 2 * act), NormalParamExtractor())
    spec = env.action_spec_unbatched
    actor = ProbabilisticActor(TensorDictModule(net, ["observation"], ["loc", "scale"]), ["loc", "scale"],
                               distribution_class=TanhNormal,
                               distribution_kwargs={"low": spec.space.low, "high": spec.space.high})
    return Rollout(actor, env, steps=steps)


@pytest.mark.parametrize(("env_id", "num_envs", "steps"), [("Pendulum-v1", 2, 7), ("Pendulum-v1", 3, 1),
                                                            ("HalfCheetah-v5", 1, 1)])
def test_direct_steps_equal_the_captured_body(env_id: str, num_envs: int, steps: int,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    calls = 230 // steps  # past Pendulum's 200-step truncation
    results = []
    for direct in (True, False):
        r = _rollout(env_id, num_envs, steps)
        plans = []
        if direct:
            real = Rollout._direct_plan
            monkeypatch.setattr(Rollout, "_direct_plan", lambda self, carry: plans.append(real(self, carry)) or plans[-1])
        else:
            monkeypatch.setattr(Rollout, "_direct_plan", lambda self, carry: None)
        torch.manual_seed(11)
        batches = [r() for _ in range(calls)]
        results.append((batches, r._carry,
                        r.env._pending.copy(), r.stats.returns[:], r.frames))
        monkeypatch.undo()
        r.env.close()
        if direct:
            assert plans and all(p is not None for p in plans)  # every call took the direct steps
    (b1, c1, p1, s1, f1), (b2, c2, p2, s2, f2) = results
    assert len(b1) == len(b2)
    for x, y in zip(b1, b2):
        assert x.batch_size == y.batch_size
        assert set(x.keys(True, True)) == set(y.keys(True, True))
        for k in y.keys(True, True):
            assert torch.equal(x.get(k), y.get(k)), k
    assert set(c1.keys()) == set(c2.keys())  # step_mdp's carry: the env's keys and the act's outputs
    for k in c2.keys():
        assert torch.equal(c1.get(k), c2.get(k)), k
    assert (p1 == p2).all() and s1 == s2 and f1 == f2
    if env_id == "Pendulum-v1":
        assert s1  # episodes ended inside the compared steps


def test_direct_steps_only_where_they_apply() -> None:
    r = _rollout("Pendulum-v1", 2, 2)
    carry = r.env.reset()
    assert r._direct_plan(carry) is not None
    assert r._direct_plan(carry.clone().set("extra", torch.zeros(2))) is None  # a key step_mdp would not carry
    handle = r.body.act.register_forward_hook(lambda *a: None)
    assert r._direct_plan(carry) is None  # hooks see every call
    handle.remove()
    r.env.close()
    env = PoolEnv("Pendulum-v1", num_envs=2, seed=3, observation_dtype=torch.float32, info_keys=["elapsed_step"])
    with_info = Rollout(r.body.act, env, steps=2)
    assert with_info._direct_plan(env.reset()) is None  # info keys: the captured body
    env.close()


def test_direct_and_captured_calls_interleave(monkeypatch: pytest.MonkeyPatch) -> None:
    """A call of either kind continues from the other's carry: alternating them gives the batches
    of the captured body alone."""
    batches = []
    for alternate in (True, False):
        r = _rollout("Pendulum-v1", 2, 3)
        real = Rollout._direct_plan
        torch.manual_seed(4)
        out = []
        for i in range(90):
            use = alternate and i % 2 == 0
            monkeypatch.setattr(Rollout, "_direct_plan", real if use else (lambda self, carry: None))
            if use and r._carry is not None:
                assert real(r, r._carry) is not None  # the captured body's carry is accepted
            out.append(r())
        monkeypatch.undo()
        r.env.close()
        batches.append(out)
    for x, y in zip(*batches):
        for k in y.keys(True, True):
            assert torch.equal(x.get(k), y.get(k)), k


def test_direct_chain_calls_the_leaves_only_where_nothing_else_would_run() -> None:
    """``direct_chain`` gives the module's outputs through its leaves' forwards; a hook anywhere in
    the chain (or globally), a reshaping MLP or another container keeps the module's own call."""
    from torchrl.modules import MLP

    from torchfrag.algos.networks import TanhBoundedScale
    from torchfrag.graph.direct import direct_chain

    torch.manual_seed(0)
    net = nn.Sequential(MLP(in_features=5, out_features=4, num_cells=[8, 8]), TanhBoundedScale(-5.0, 2.0))
    x = torch.randn(3, 5)
    chain = direct_chain(net)
    assert chain is not net
    assert all(torch.equal(a, b) for a, b in zip(chain(x), net(x)))
    calls = []
    handle = net[0][2].register_forward_hook(lambda *_: calls.append(1))  # the middle Linear
    assert direct_chain(net) is net
    net(x)
    assert calls == [1]
    handle.remove()
    handle = nn.modules.module.register_module_forward_pre_hook(lambda *_: None)
    try:
        assert direct_chain(net) is net
    finally:
        handle.remove()
    reshaping = MLP(in_features=5, out_features=(2, 2), num_cells=[8])
    assert direct_chain(reshaping) is reshaping or torch.equal(direct_chain(reshaping)(x), reshaping(x))
    class Twice(nn.Sequential):
        def forward(self, x):
            return super().forward(super().forward(x))
    twice = Twice(nn.Linear(5, 5))
    assert torch.equal(direct_chain(twice)(x), twice(x))
