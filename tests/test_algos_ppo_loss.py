"""PPO's lean clipped objective (torchfrag.algos.ppo_loss) against TorchRL's ClipPPOLoss."""
from __future__ import annotations

import copy

import pytest
import torch
from tensordict import TensorDict
from torchrl.objectives import ClipPPOLoss

from torchfrag.algos.envs import make_env
from torchfrag.algos.networks import make_actor_critic
from torchfrag.algos.ppo_loss import ClipPPOObjective
from torchfrag.fragments import Learn


def _nets_and_batch(env_id: str, n_envs: int = 4, steps: int = 16, seed: int = 0):
    """An actor and critic (a user's own widths) and a rollout batch with advantages from them."""
    torch.manual_seed(seed)
    env = make_env(env_id, n_envs)
    actor, critic = make_actor_critic(env, [24, 24])
    with torch.no_grad():
        batch = env.rollout(steps, actor, break_when_any_done=False).reshape(-1)
    env.close()
    g = torch.Generator().manual_seed(seed + 1)
    batch["advantage"] = torch.randn(batch.shape[0], 1, generator=g) * 3 + 1
    batch["value_target"] = torch.randn(batch.shape[0], 1, generator=g)
    # the batch's actions came from these networks: other behaviour log-probabilities make ratios != 1
    batch["action_log_prob"] = batch["action_log_prob"] + torch.randn(batch.shape[0], generator=g) * 0.2
    return actor, critic, batch


def _grads(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in module.parameters()]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
@pytest.mark.parametrize("entropy_coef", [0.0, 0.01])
@pytest.mark.parametrize("loss_critic_type", ["l2", "smooth_l1"])
def test_losses_and_gradients_equal_clipppoloss(env_id: str, entropy_coef: float, loss_critic_type: str) -> None:
    """Same networks, same minibatch: every loss term and every parameter's gradient equal TorchRL's."""
    actor, critic, batch = _nets_and_batch(env_id)
    ref_actor, ref_critic = copy.deepcopy(actor), copy.deepcopy(critic)
    ref = ClipPPOLoss(ref_actor, ref_critic, clip_epsilon=0.15, entropy_coeff=entropy_coef, critic_coeff=0.7,
                      loss_critic_type=loss_critic_type, normalize_advantage=True)
    ours = ClipPPOObjective(actor, critic, clip_epsilon=0.15, entropy_coef=entropy_coef, critic_coef=0.7,
                            loss_critic_type=loss_critic_type, normalize_advantage=True)
    torch.manual_seed(7)  # TanhNormal's entropy is a one-sample estimate on both sides: same draw
    want = ref(batch.clone())
    torch.manual_seed(7)
    got = ours(batch.clone())
    assert 0.0 < float(got["clip_fraction"]) < 1.0  # the clip is exercised
    assert float(got["clip_fraction"]) == pytest.approx(float(want["clip_fraction"]))
    assert float(got["kl_approx"]) == pytest.approx(float(want["kl_approx"]), rel=1e-5, abs=1e-7)
    keys = ["loss_objective", "loss_critic"] + (["loss_entropy"] if entropy_coef else [])
    for key in keys:
        assert float(got[key].detach()) == pytest.approx(float(want[key].detach()), rel=1e-5, abs=1e-7), key
    if not entropy_coef:
        assert float(got["loss_entropy"]) == 0.0
    sum(want[k] for k in keys).backward()
    sum(got[k] for k in keys).backward()
    for mine, theirs in ((actor, ref_actor), (critic, ref_critic)):
        for a, b in zip(_grads(mine), _grads(theirs)):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_learn_epoch_on_it_tracks_clipppoloss() -> None:
    """Two epochs of minibatches through Learn: parameters end where ClipPPOLoss's Learn puts them."""
    actor, critic, batch = _nets_and_batch("Pendulum-v1", n_envs=4, steps=32)
    ref_actor, ref_critic = copy.deepcopy(actor), copy.deepcopy(critic)
    keys = ["observation", "action", "action_log_prob", "advantage", "value_target"]
    ours = Learn(ClipPPOObjective(actor, critic), lr=1e-3, epochs=2, minibatch_size=32, max_grad_norm=0.5,
                 select_keys=keys)
    ref = Learn(ClipPPOLoss(ref_actor, ref_critic, entropy_bonus=False, critic_coeff=0.5,
                            loss_critic_type="l2", normalize_advantage=True), lr=1e-3, epochs=2, minibatch_size=32,
                max_grad_norm=0.5, select_keys=keys)
    torch.manual_seed(3)
    m_ours = ours(batch.clone())
    torch.manual_seed(3)  # the same minibatch permutations
    m_ref = ref(batch.clone())
    for k in ("loss_objective", "loss_critic", "grad_norm"):
        assert float(m_ours[k]) == pytest.approx(float(m_ref[k]), rel=1e-4), k
    for a, b in zip([*actor.parameters(), *critic.parameters()], [*ref_actor.parameters(), *ref_critic.parameters()]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_clip_epsilon_anneals_and_bad_arguments_are_refused() -> None:
    actor, critic, batch = _nets_and_batch("CartPole-v1", n_envs=2, steps=8)
    objective = ClipPPOObjective(actor, critic, clip_epsilon=0.2)
    learn = Learn(objective, lr=1e-3, minibatch_size=16, anneal_steps=4, anneal_buffers=["clip_epsilon"])
    seen = []
    for _ in range(3):
        learn(batch.clone())
        seen.append(float(objective.clip_epsilon))
    assert seen == pytest.approx([0.2, 0.15, 0.1])
    objective.clip_epsilon.fill_(0.0)  # a zero clip range: every ratio != 1 is clipped
    assert float(objective(batch.clone())["clip_fraction"]) == 1.0
    with pytest.raises(ValueError, match="loss_critic_type"):
        ClipPPOObjective(actor, critic, loss_critic_type="l3")
    with pytest.raises(ValueError, match="clip_epsilon"):
        ClipPPOObjective(actor, critic, clip_epsilon=-0.1)
    with pytest.raises(ValueError, match="entropy_coef"):
        ClipPPOObjective(actor, critic, entropy_coef=float("nan"))
    with pytest.raises(TypeError, match="get_dist"):
        ClipPPOObjective(critic, critic)
    with pytest.raises(KeyError, match="advantage"):
        objective(TensorDict({"observation": batch["observation"]}, batch_size=batch.batch_size))
