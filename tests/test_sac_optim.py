"""CachedFusedAdam is torch.optim.Adam(fused=True), bit for bit, and FastSACLoss's bound plans
follow its parameters through in-place updates, state-dict loads and device/dtype moves."""
from __future__ import annotations

import copy

import pytest
import torch

from torchfrag.algos.envs import make_env
from torchfrag.algos.replay import REPLAY_KEYS
from torchfrag.algos.sac import make_sac_networks
from torchfrag.algos.sac_loss import FastSACLoss
from torchfrag.algos.sac_optim import CachedFusedAdam


def _net(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))


def _groups(net: torch.nn.Module) -> list[dict]:
    first, second = list(net[0].parameters()), list(net[2].parameters())
    return [{"params": first, "lr": 3e-3}, {"params": second, "lr": 1e-2}]


def _train(net: torch.nn.Module, opt: torch.optim.Optimizer, steps: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randn(32, 5, generator=gen)
        loss = (net(x) - x[:, :2].sin()).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def test_cached_fused_adam_is_fused_adam_bit_for_bit_through_a_checkpoint() -> None:
    ref_net, net = _net(0), _net(0)
    ref = torch.optim.Adam(_groups(ref_net), eps=1e-5, fused=True)
    opt = CachedFusedAdam(_groups(net), eps=1e-5)
    _train(ref_net, ref, 25, seed=1)
    _train(net, opt, 25, seed=1)
    assert opt._plan is not None  # the cached path ran (after the first step)
    for a, b in zip(ref_net.parameters(), net.parameters()):
        assert torch.equal(a, b)
    # a learning-rate change (a scheduler) is read at each step
    for g_ref, g in zip(ref.param_groups, opt.param_groups):
        g_ref["lr"] *= 0.5
        g["lr"] *= 0.5
    # checkpoints cross both ways: Adam's state into ours and ours into Adam's
    resumed_net, resumed_ref_net = copy.deepcopy(net), copy.deepcopy(ref_net)
    resumed = CachedFusedAdam(_groups(resumed_net), eps=1e-5)
    resumed.load_state_dict(copy.deepcopy(ref.state_dict()))  # (load_state_dict shares tensors)
    resumed_ref = torch.optim.Adam(_groups(resumed_ref_net), eps=1e-5, fused=True)
    resumed_ref.load_state_dict(copy.deepcopy(opt.state_dict()))
    for n, o in ((ref_net, ref), (net, opt), (resumed_net, resumed), (resumed_ref_net, resumed_ref)):
        _train(n, o, 10, seed=2)
    for a, b, c, d in zip(ref_net.parameters(), net.parameters(), resumed_net.parameters(),
                          resumed_ref_net.parameters()):
        assert torch.equal(a, b) and torch.equal(a, c) and torch.equal(a, d)
    assert torch.equal(opt.state_dict()["state"][0]["step"], ref.state_dict()["state"][0]["step"])


def test_cached_fused_adam_falls_back_to_adam_where_it_must() -> None:
    """A parameter without a gradient this step: Adam's own step (which skips it), same values."""
    ref_net, net = _net(3), _net(3)
    ref = torch.optim.Adam(_groups(ref_net), fused=True)
    opt = CachedFusedAdam(_groups(net))
    _train(ref_net, ref, 3, seed=4)
    _train(net, opt, 3, seed=4)
    for n, o in ((ref_net, ref), (net, opt)):
        o.zero_grad(set_to_none=True)
        n[2](torch.randn(4, 16, generator=torch.Generator().manual_seed(5))).sum().backward()
        o.step()  # the first layer has no gradient
    for a, b in zip(ref_net.parameters(), net.parameters()):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        CachedFusedAdam(net.parameters(), lr=-1.0)


def _loss(env, hidden: list[int]) -> FastSACLoss:
    actor, qnet = make_sac_networks(env, hidden)
    loss = FastSACLoss(actor, qnet, num_qvalue_nets=2, delay_qvalue=True, action_spec=env.action_spec_unbatched)
    loss.make_value_estimator(gamma=0.99)
    return loss


def test_fast_sac_loss_follows_its_parameters_after_loads_and_moves() -> None:
    """The loss binds its parameter tensors once; a state-dict load, an in-place update and a
    dtype move must all show in the next call, as in a freshly built loss."""
    env = make_env("Pendulum-v1", 2)
    try:
        torch.manual_seed(0)
        loss = _loss(env, [16])
        batch = env.rollout(8, break_when_any_done=False).reshape(-1).select(*REPLAY_KEYS)
        torch.manual_seed(1)
        loss(batch)  # binds the plans
        other = _loss(env, [16])
        with torch.no_grad():
            other.qvalue_network_params.apply(lambda p: p.data.add_(0.3))
            other.actor_network_params.apply(lambda p: p.data.mul_(1.5))
        loss.load_state_dict(copy.deepcopy(other.state_dict()), assign=True)  # new tensors: rebinds
        for seed in (2, 3):
            torch.manual_seed(seed)
            got = loss(batch)
            torch.manual_seed(seed)
            want = other(batch)
            for k in ("loss_actor", "loss_qvalue", "loss_alpha"):
                torch.testing.assert_close(got[k], want[k], rtol=0, atol=0)
            with torch.no_grad():  # an in-place update, as an optimizer or a target lerp makes
                for m in (loss, other):
                    m.target_qvalue_network_params.apply(lambda p: p.data.mul_(0.9))
        loss.double()
        batch64 = batch.apply(lambda t: t.double() if t.is_floating_point() else t)
        assert loss(batch64)["loss_qvalue"].dtype == torch.float64
    finally:
        env.close()


def test_cached_fused_adam_runs_step_hooks_and_profiler_ranges_once() -> None:
    """The cached step skips Optimizer's hook wrapper only while it would do nothing: step hooks
    (the optimizer's and global ones) run once per step, with the same values as without them,
    the profiler sees its ranges, and zero_grad drops every gradient either way."""
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    torch.optim.Adam([torch.nn.Parameter(torch.ones(1))])  # a plain Adam: Adam.step itself gets the wrapper
    ref_net, net = _net(3), _net(3)
    ref = torch.optim.Adam(_groups(ref_net), fused=True)
    opt = CachedFusedAdam(_groups(net))
    _train(ref_net, ref, 3, seed=1)
    _train(net, opt, 3, seed=1)
    assert opt._plan is not None  # the cached step is in use
    calls = []
    handles = [opt.register_step_pre_hook(lambda *_: calls.append("pre")),
               opt.register_step_post_hook(lambda *_: calls.append("post")),
               register_optimizer_step_pre_hook(lambda o, *_: calls.append("global pre") if o is opt else None),
               register_optimizer_step_post_hook(lambda o, *_: calls.append("global post") if o is opt else None)]
    try:
        _train(ref_net, ref, 2, seed=2)
        _train(net, opt, 2, seed=2)
    finally:
        for h in handles:
            h.remove()
    assert calls == ["global pre", "pre", "post", "global post"] * 2
    with torch.profiler.profile() as prof:
        _train(net, opt, 1, seed=3)
    _train(ref_net, ref, 1, seed=3)
    names = {e.key for e in prof.key_averages()}
    assert {"Optimizer.step#CachedFusedAdam.step", "Optimizer.zero_grad#CachedFusedAdam.zero_grad"} <= names
    _train(ref_net, ref, 2, seed=4)
    _train(net, opt, 2, seed=4)
    for a, b in zip(ref_net.parameters(), net.parameters()):
        assert torch.equal(a, b)
    opt.zero_grad()
    assert all(p.grad is None for p in net.parameters())
