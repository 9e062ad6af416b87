"""FastSACLoss against TorchRL's SACLoss: same values and gradients for the same batch, parameters
and random draws; the SAC loop keeps its behaviour (UTD, target updates, temperature learning)."""
from __future__ import annotations

import copy
import math

import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule
from torch import nn
from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import SACLoss

from torchfrag.algos.envs import make_env
from torchfrag.algos.sac import SACConfig, make_sac, make_sac_networks
from torchfrag.algos.sac_loss import FastSACLoss


def _losses(env_id: str, loss_function: str = "l2", fixed_alpha: bool = False, n: int = 64, **networks):
    env = make_env(env_id, 2)
    torch.manual_seed(0)
    actor, qnet = make_sac_networks(env, [32, 32], **networks)
    spec = env.action_spec_unbatched
    kw = {"num_qvalue_nets": 2, "delay_qvalue": True, "action_spec": spec, "loss_function": loss_function,
          "alpha_init": 0.7, "fixed_alpha": fixed_alpha}
    ref = SACLoss(copy.deepcopy(actor), copy.deepcopy(qnet), **kw)
    fast = FastSACLoss(copy.deepcopy(actor), copy.deepcopy(qnet), **kw)
    for loss in (ref, fast):
        loss.make_value_estimator(gamma=0.97)
    with torch.no_grad():  # targets differ from the online critics, as after training
        ref.target_qvalue_network_params.apply(lambda p: p.add_(0.05 * torch.randn_like(p)))
    fast.load_state_dict(ref.state_dict())
    obs_dim = env.observation_spec["observation"].shape[-1]
    g = torch.Generator().manual_seed(1)
    batch = TensorDict({
        "observation": torch.randn(n, obs_dim, generator=g),
        "action": (torch.rand(n, *spec.shape, generator=g) * 2 - 1) * spec.space.high,
        "next": {"observation": torch.randn(n, obs_dim, generator=g),
                 "reward": torch.randn(n, 1, generator=g),
                 "done": torch.rand(n, 1, generator=g) < 0.3,
                 "terminated": torch.rand(n, 1, generator=g) < 0.2},
    }, batch_size=[n])
    env.close()
    return ref, fast, batch


def _outs_and_grads(losses, batch, seed: int) -> tuple[list, list[dict]]:
    """Each loss's outputs and parameter gradients (of the three losses' sum) for the same draws."""
    outs, grads = [], []
    for loss in losses:
        torch.manual_seed(seed)
        out = loss(batch.clone())
        loss.zero_grad()
        (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()
        outs.append(out)
        grads.append({n: p.grad.clone() for n, p in loss.named_parameters() if p.grad is not None})
    return outs, grads


# CleanRL's networks: PyTorch's default init and the tanh-bounded log-std head.
_CLEANRL_NETS = {"weight_init": "default", "log_std_bounds": [-5.0, 2.0]}


@pytest.mark.parametrize(("env_id", "loss_function", "networks"),
                         [("Pendulum-v1", "l2", {}), ("HalfCheetah-v5", "l2", {}), ("Pendulum-v1", "smooth_l1", {}),
                          ("HalfCheetah-v5", "l2", _CLEANRL_NETS)])
def test_fast_sac_loss_matches_sacloss(env_id: str, loss_function: str, networks: dict) -> None:
    ref, fast, batch = _losses(env_id, loss_function, **networks)
    outs, grads = [], []
    for loss in (ref, fast):
        torch.manual_seed(123)
        out = loss(batch.clone())
        total = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
        loss.zero_grad()
        total.backward()
        outs.append(out)
        grads.append({n: p.grad.clone() for n, p in loss.named_parameters()})
    for key in ("loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"):
        torch.testing.assert_close(outs[1][key], outs[0][key], rtol=1e-5, atol=1e-5, msg=key)
    assert grads[0].keys() == grads[1].keys()
    assert len(grads[0]) == 13  # log_alpha, 6 actor and 6 stacked critic tensors
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, rtol=1e-4, atol=1e-5, msg=name)
    # The losses separate as SACLoss's do: the actor loss does not reach the critics (FastSACLoss
    # runs the critics once on both action sets, so their gradient is there, and zero).
    for loss in (ref, fast):
        loss.zero_grad()
        torch.manual_seed(5)
        loss(batch.clone())["loss_actor"].backward()
    crit = [n for n in grads[0] if n.startswith("qvalue")]
    assert all(dict(ref.named_parameters())[n].grad is None for n in crit)
    fast_grads = [dict(fast.named_parameters())[n].grad for n in crit]
    assert all(g is not None and not g.any() for g in fast_grads)
    actor_grads = [p.grad for n, p in fast.named_parameters() if n.startswith("actor_network_params")]
    assert all(g is not None for g in actor_grads) and sum(g.abs().sum() for g in actor_grads) > 0


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "HalfCheetah-v5"])
def test_bounded_head_as_one_node_matches_sacloss_on_odd_batches(env_id: str) -> None:
    """The tanh-bounded head's fused sample (both batches' noise drawn into one tensor) gives
    SACLoss's losses and gradients where a batch's draw is not a multiple of the normal
    kernel's 16-value blocks (37 rows), with an affine action box (Pendulum's [-2, 2]) and without."""
    ref, fast, batch = _losses(env_id, n=37, **_CLEANRL_NETS)
    assert fast._bounded_head() is not None
    outs, grads = _outs_and_grads((ref, fast), batch, seed=11)
    for key in ("loss_actor", "loss_qvalue", "loss_alpha", "entropy"):
        torch.testing.assert_close(outs[1][key], outs[0][key], rtol=1e-5, atol=1e-5, msg=key)
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.parametrize("affine", [False, True])
def test_bounded_squashed_sample_matches_the_two_nodes(affine: bool) -> None:
    """``bounded_squashed_sample`` against the head then ``squashed_gaussian`` on each batch:
    the same values, the same input gradients (float64, either output alone and both), a
    gradcheck, constants for the tail rows, and no graph without gradients."""
    from torchfrag.algos.networks import TanhBoundedScale
    from torchfrag.algos.sac_loss import bounded_squashed_sample, squashed_gaussian

    g = torch.Generator().manual_seed(3)
    head = TanhBoundedScale(-5.0, 2.0)
    x = torch.randn(5, 6, dtype=torch.float64, generator=g, requires_grad=True)
    tail = torch.randn(4, 6, dtype=torch.float64, generator=g)
    eps = torch.randn(9, 3, dtype=torch.float64, generator=g)
    box = (torch.tensor([2.0, 1.0, 0.5], dtype=torch.float64), torch.tensor([0.0, 0.5, -1.0], dtype=torch.float64))
    box = box if affine else (None, None)
    got = bounded_squashed_sample(x, tail, eps, -5.0, 2.0, *box)
    want = (*squashed_gaussian(*head(x), eps[4:], *box), *squashed_gaussian(*head(tail), eps[:4], *box))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert not got[2].requires_grad and not got[3].requires_grad
    w_a, w_lp = torch.randn(5, 3, dtype=torch.float64, generator=g), torch.randn(5, dtype=torch.float64, generator=g)
    for pick in ((1, 0), (0, 1), (1, 1)):
        grads = []
        for fn in (lambda: bounded_squashed_sample(x, tail, eps, -5.0, 2.0, *box)[:2],
                   lambda: squashed_gaussian(*head(x), eps[4:], *box)):
            a, lp = fn()
            (pick[0] * (a * w_a).sum() + pick[1] * (lp * w_lp).sum()).backward()
            grads.append(x.grad.clone())
            x.grad = None
        torch.testing.assert_close(grads[0], grads[1], rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda t: bounded_squashed_sample(t, tail, eps, -5.0, 2.0, *box)[:2], (x,))
    with torch.no_grad():
        assert bounded_squashed_sample(x, tail, eps, -5.0, 2.0, *box)[0].grad_fn is None


def test_fast_sac_loss_with_a_fixed_temperature_matches_sacloss() -> None:
    """``fixed_alpha=True`` (``log_alpha`` a buffer): the same losses and gradients, none for the
    temperature, and the temperature loss still reported."""
    ref, fast, batch = _losses("HalfCheetah-v5", fixed_alpha=True)
    outs, grads = _outs_and_grads((ref, fast), batch, seed=7)
    assert not fast.log_alpha.requires_grad and len(grads[1]) == 12
    for key in ("loss_actor", "loss_qvalue", "loss_alpha", "entropy"):
        torch.testing.assert_close(outs[1][key], outs[0][key], rtol=1e-5, atol=1e-5, msg=key)
    for name, g in grads[0].items():
        torch.testing.assert_close(grads[1][name], g, rtol=1e-4, atol=1e-5, msg=name)


def test_bfloat16_matmuls_give_float32_losses_and_gradients_close_to_float32() -> None:
    """matmul_dtype=bfloat16 changes only the products' precision: same keys, float32 values and
    gradients within bfloat16's rounding of the float32 loss on the same draws (the actor's first
    layer, reached through the critics, the tanh and its own layers, is the farthest: ~6%)."""
    _, fast, batch = _losses("HalfCheetah-v5")
    bf = copy.deepcopy(fast)
    bf.matmul_dtype = torch.bfloat16
    outs, grads = [], []
    for loss in (fast, bf):
        torch.manual_seed(7)
        out = loss(batch.clone())
        loss.zero_grad()
        (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()
        outs.append(out)
        grads.append({n: p.grad for n, p in loss.named_parameters()})
    for key in ("loss_actor", "loss_qvalue", "loss_alpha", "entropy"):
        assert outs[1][key].dtype == torch.float32
        torch.testing.assert_close(outs[1][key], outs[0][key], rtol=0.03, atol=0.03, msg=key)
    for name, g in grads[0].items():
        assert grads[1][name].dtype == torch.float32
        assert (grads[1][name] - g).norm() <= 0.12 * g.norm() + 1e-6, name


def test_fast_sac_loss_refuses_what_it_does_not_compute() -> None:
    env = make_env("Pendulum-v1", 2)
    actor, qnet = make_sac_networks(env, [8])
    with pytest.raises(ValueError, match="reduction='mean' only, got 'sum'"):
        FastSACLoss(actor, qnet, reduction="sum")
    with pytest.raises(ValueError, match="matmul_dtype must be None, torch.float32 or torch.bfloat16, got torch.float16"):
        FastSACLoss(actor, qnet, matmul_dtype=torch.float16)

    class Odd(nn.Module):  # not a Sequential: its forward is unknown to the plan
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 1)

        def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
            return self.lin(torch.cat([obs, act], -1))

    odd = ValueOperator(Odd(), in_keys=["observation", "action"])
    with pytest.raises(ValueError, match="needs nn.Sequential networks.*; the critic has Odd at its root"):
        FastSACLoss(actor, odd)
    spec = env.action_spec_unbatched
    body = TensorDictModule(nn.Sequential(MLP(in_features=3, out_features=2, num_cells=[8]),
                                          NormalParamExtractor()), ["observation"], ["loc", "scale"])
    from torch.distributions import Normal
    normal_actor = ProbabilisticActor(body, in_keys=["loc", "scale"], spec=spec, distribution_class=Normal)
    with pytest.raises(ValueError, match="needs a TanhNormal actor, got Normal"):
        FastSACLoss(normal_actor, qnet)
    tanh_loc = ProbabilisticActor(body, in_keys=["loc", "scale"], spec=spec, distribution_class=TanhNormal,
                                  distribution_kwargs={"tanh_loc": True})
    with pytest.raises(ValueError, match="tanh_loc=False"):
        FastSACLoss(tanh_loc, qnet)
    env.close()


def test_sac_loop_keeps_its_schedule() -> None:
    """UTD, one soft target update per gradient step, the temperature learned: as before the new loss."""
    cfg = SACConfig(num_envs=2, steps=4, updates=3, batch_size=16, learning_starts=32, hidden=[16], tau=0.1)
    loop = make_sac("Pendulum-v1", cfg, seed=0)
    assert isinstance(loop.loss, FastSACLoss)
    targets0 = loop.loss.target_qvalue_network_params.clone()
    online0 = loop.loss.qvalue_network_params.clone()
    log_alpha0 = loop.loss.log_alpha.item()
    opt_steps0 = loop.learn.optimizer.state_dict()["state"]
    assert not opt_steps0
    loop()
    state = loop.learn.optimizer.state_dict()["state"]
    assert int(state[0]["step"]) == cfg.updates  # `updates` gradient steps per iteration
    assert loop.loss.log_alpha.item() != log_alpha0
    # `updates` soft updates (tau) after the gradient steps: target = s + (t0 - s) * (1 - tau)^updates.
    for key, t0 in targets0.items(True, True):
        s = loop.loss.qvalue_network_params.get(key).detach()
        expect = s + (t0 - s) * (1 - cfg.tau) ** cfg.updates
        torch.testing.assert_close(loop.loss.target_qvalue_network_params.get(key), expect)
        assert not torch.equal(s, online0.get(key))
    assert loop.target.steps == cfg.updates
    assert len(loop.buffer) == cfg.learning_starts + cfg.num_envs * cfg.steps
    loop.close()


@pytest.mark.parametrize("num_envs", [1, 3])
def test_prefill_from_the_pool_is_a_step_loop(num_envs: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The random warm-up in one pool rollout writes what the per-step TorchRL loop writes (keys,
    dtypes, chained transitions, episode ends) and hands the rollout the same kind of carry."""
    from torchfrag.algos import replay

    cfg = SACConfig(num_envs=num_envs, steps=2, updates=1, batch_size=8, learning_starts=250 * num_envs - 1,
                    hidden=[8])
    fast = make_sac("Pendulum-v1", cfg, seed=4)
    monkeypatch.setattr(replay, "_pool_rollout", lambda *a: None)
    slow = make_sac("Pendulum-v1", cfg, seed=4)
    steps = -(-cfg.learning_starts // num_envs)
    for loop in (fast, slow):
        assert len(loop.buffer) == loop.rollout.frames == steps * num_envs
    a, b = fast.buffer[:], slow.buffer[:]
    assert set(a.keys(True, True)) == set(b.keys(True, True))
    for key in a.keys(True, True):
        assert a.get(key).dtype == b.get(key).dtype and a.get(key).shape == b.get(key).shape, key
    # The same reset (same seed), then transitions that chain: obs[t+1] == next obs[t] within an
    # episode; Pendulum's 200-step episodes end (truncated) inside the warm-up, and the next one restarts.
    torch.testing.assert_close(a["observation"][:num_envs], b["observation"][:num_envs])
    obs = a["observation"].reshape(num_envs, steps, -1)
    nobs = a["next", "observation"].reshape(num_envs, steps, -1)
    done = a["next", "done"].reshape(num_envs, steps)
    assert done[:, 199].all() and done.sum() == num_envs * (steps // 200)
    assert torch.equal(obs[:, 1:][~done[:, :-1]], nobs[:, :-1][~done[:, :-1]])
    assert not torch.isclose(obs[:, 200], nobs[:, 199]).all()
    for loop in (fast, slow):
        carry = loop.rollout._carry
        assert carry["observation"].dtype == torch.float32 and not carry["done"].any()
    torch.testing.assert_close(fast.rollout._carry["observation"], nobs[:, -1])
    assert fast.rollout.stats.returns and len(fast.rollout.stats.returns) == len(slow.rollout.stats.returns)
    for loop in (fast, slow):
        loop()
        loop.close()


@pytest.mark.parametrize("affine", [False, True])
def test_squashed_gaussian_node_matches_the_formula_under_autograd(affine: bool) -> None:
    """The one-node sample/log-probability against TorchRL's TanhNormal formula run through autograd
    (float64; values and the gradients of loc and scale for any mix of the two outputs' gradients)."""
    from torchrl.modules.distributions.utils import safetanh_noeps

    from torchfrag.algos.sac_loss import squashed_gaussian

    g = torch.Generator().manual_seed(3)
    loc = (3 * torch.randn(64, 6, generator=g, dtype=torch.float64)).requires_grad_()
    scale = (torch.rand(64, 6, generator=g, dtype=torch.float64) * 2 + 1e-3).requires_grad_()
    eps = torch.randn(64, 6, generator=g, dtype=torch.float64)
    act_scale = torch.tensor([0.5, 1.0, 2.0, 1.0, 3.0, 0.25], dtype=torch.float64) if affine else None
    act_loc = torch.tensor([0.1, 0.0, -1.0, 0.0, 0.5, 0.0], dtype=torch.float64) if affine else None

    def formula() -> tuple[torch.Tensor, torch.Tensor]:
        pre = loc + scale * eps
        lp = (-0.5 * eps.pow(2) - scale.log() - 0.5 * math.log(2 * math.pi)
              - 2.0 * (math.log(2.0) - pre - nn.functional.softplus(-2.0 * pre)))
        a = safetanh_noeps(pre)
        if affine:
            a = a * act_scale + act_loc
            lp = lp - act_scale.abs().log()
        return a, lp.sum(-1)

    w_a = torch.randn(64, 6, generator=g, dtype=torch.float64)
    w_lp = torch.randn(64, generator=g, dtype=torch.float64)
    for use_a, use_lp in ((True, True), (True, False), (False, True)):
        grads = []
        for fn in (formula, lambda: squashed_gaussian(loc, scale, eps, act_scale, act_loc)):
            a, lp = fn()
            grads.append((a.detach(), lp.detach(),
                          *torch.autograd.grad((a * w_a).sum() * use_a + (lp * w_lp).sum() * use_lp, [loc, scale])))
        for want, got in zip(*grads):
            torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-8)  # 2 tanh(x) vs 2 - 4 sigmoid(-2x)
    with torch.no_grad():  # no graph: the same values
        a, lp = squashed_gaussian(loc, scale, eps, act_scale, act_loc)
        assert a.grad_fn is None
        torch.testing.assert_close(lp, grads[0][1], rtol=0, atol=0)


def test_sac_network_options_init_and_bounded_scale() -> None:
    """``weight_init`` and ``log_std_bounds`` build what they name: orthogonal rows (gain sqrt(2),
    zero biases) or PyTorch's uniform init, and a scale that stays inside ``exp([min, max])``
    for any raw output, starting at ``exp((min + max) / 2)``."""
    env = make_env("HalfCheetah-v5", 2)
    try:
        torch.manual_seed(0)
        ortho_actor, ortho_q = make_sac_networks(env, [64, 64])
        torch.manual_seed(0)
        plain_actor, plain_q = make_sac_networks(env, [64, 64], weight_init="default", log_std_bounds=[-5, 2])
    finally:
        env.close()
    hidden = ortho_q.module[2]  # 64 x 64
    torch.testing.assert_close(hidden.weight @ hidden.weight.T, 2.0 * torch.eye(64), atol=1e-4, rtol=0)
    assert not hidden.bias.any()
    lin = plain_q.module[2]
    bound = 1.0 / math.sqrt(lin.in_features)
    assert lin.weight.abs().max() <= bound and lin.bias.abs().max() <= bound and lin.bias.any()
    assert (lin.weight @ lin.weight.T - 2.0 * torch.eye(64)).abs().max() > 0.5  # not orthogonal
    head = plain_actor.module[0].module[-1]
    raw = torch.zeros(1, 12)  # 6 means, then 6 raw log-stds
    raw[0, 6], raw[0, 7] = -1e4, 1e4
    loc, scale = head(raw)
    assert loc.shape == (1, 6) and scale.shape == (1, 6)
    torch.testing.assert_close(scale[0, :3], torch.tensor([math.exp(-5.0), math.exp(2.0), math.exp(-1.5)]))
    with pytest.raises(ValueError, match=r"log_std_min < log_std_max, got \[2.0, -5.0\]"):
        make_sac_networks(make_env("Pendulum-v1", 1), [8], log_std_bounds=[2.0, -5.0])


def test_bounded_scale_node_matches_its_formula_under_autograd() -> None:
    """``TanhBoundedScale``'s one-node backward against autograd through the formula, for either
    output alone and both (gradcheck in float64), and no graph without gradients."""
    from torchfrag.algos.networks import TanhBoundedScale

    head = TanhBoundedScale(-5.0, 2.0)
    x = torch.randn(7, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: head(t), (x,))
    loc_w, scale_w = torch.randn(7, 4, dtype=torch.float64), torch.randn(7, 4, dtype=torch.float64)
    for pick in ((1, 0), (0, 1), (1, 1)):
        grads = []
        for fn in (head, lambda t: (t[:, :4], (-5.0 + 3.5 * (t[:, 4:].tanh() + 1.0)).exp())):
            loc, scale = fn(x)
            (pick[0] * (loc * loc_w).sum() + pick[1] * (scale * scale_w).sum()).backward()
            grads.append(x.grad.clone())
            x.grad = None
        torch.testing.assert_close(grads[0], grads[1], rtol=1e-12, atol=1e-12)
    with torch.no_grad():
        assert head(x)[1].grad_fn is None


@pytest.mark.parametrize(("key", "value", "message"), [
    ("weight_init", "xavier", r"algo.weight_init must be one of \['orthogonal', 'default'\], got 'xavier'"),
    ("log_std_bounds", [-5.0], r"algo.log_std_bounds must be \[min, max\] with finite min < max \(or null\), got \[-5.0\]"),
    ("log_std_bounds", [2.0, 2.0], r"algo.log_std_bounds must be \[min, max\]"),
    ("log_std_bounds", [-5.0, float("inf")], r"algo.log_std_bounds must be \[min, max\]"),
    ("adam_eps", 0.0, r"algo.adam_eps must be a finite number > 0, got 0.0"),
    ("adam_eps", float("nan"), r"algo.adam_eps must be a finite number > 0"),
])
def test_sac_network_options_are_checked_before_anything_is_built(key: str, value, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_sac("Pendulum-v1", {key: value})


def test_sac_adam_eps_reaches_the_optimizer() -> None:
    loop = make_sac("Pendulum-v1", {"num_envs": 1, "steps": 1, "updates": 1, "batch_size": 4, "learning_starts": 4,
                                    "hidden": [8], "adam_eps": 1e-8, "weight_init": "default",
                                    "log_std_bounds": [-5, 2]}, seed=0)
    try:
        assert [g["eps"] for g in loop.learn.optimizer.param_groups] == [1e-8, 1e-8]
        out = loop()
        assert torch.isfinite(out["loss_actor"]) and torch.isfinite(out["loss_qvalue"])
    finally:
        loop.close()
