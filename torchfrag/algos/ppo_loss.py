"""PPO's clipped objective as a lean loss module for :class:`~torchfrag.fragments.Learn`.

:class:`ClipPPOObjective` computes what TorchRL's ``ClipPPOLoss`` computes for
the recipes the shipped PPO presets use (``loss_objective``, ``loss_critic``,
``loss_entropy``; advantage standardised per minibatch as ``ClipPPOLoss``
does), with the actor's distribution and the critic's value read through
their TensorDict interfaces (any ``ProbabilisticActor`` and ``ValueOperator``:
MLPs, the shared Atari torso), but without the diagnostics and the
bookkeeping around them. On PPO's MuJoCo minibatches (64 x 17 observations,
two 64-64 MLPs, a ``TanhNormal``) one ``Learn`` gradient step took ~4.5 ms
through ``ClipPPOLoss`` and ~1.5 ms through this module with fused Adam (one
thread, quiet host): ``ClipPPOLoss`` also computes, every minibatch, a
Monte-Carlo entropy of the ``TanhNormal`` (one ``rsample`` and its
log-probability, even when the entropy coefficient is 0), the effective
sample size (two ``logsumexp``), the explained variance, the maximum and mean
ratio, and copies the input TensorDict.

What it leaves out of ``ClipPPOLoss``: value clipping, a delayed (proximal)
actor, importance-ratio caps, asymmetric clip ranges, composite
(multi-head) distributions and the per-key configuration; a recipe that
needs them keeps ``ClipPPOLoss`` (``Learn`` takes either).
``tests/test_algos_ppo_loss.py`` checks it against ``ClipPPOLoss``: the same
losses and gradients on discrete and continuous actions, with and without the
entropy bonus, for both critic losses.

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from torchfrag.algos.envs import make_env
    >>> from torchfrag.algos.networks import make_actor_critic
    >>> from torchfrag.algos.ppo_loss import ClipPPOObjective
    >>> env = make_env("CartPole-v1", 2)
    >>> actor, critic = make_actor_critic(env, [16])
    >>> td = actor(env.reset())
    >>> td["advantage"], td["value_target"] = torch.randn(2, 1), torch.randn(2, 1)
    >>> sorted(ClipPPOObjective(actor, critic)(td).keys())
    ['clip_fraction', 'kl_approx', 'loss_critic', 'loss_entropy', 'loss_objective']
    >>> env.close()
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

__all__ = ["ClipPPOObjective"]

#: ``ClipPPOLoss``'s floor on the advantage's standard deviation (torchrl's ``_standardize``).
_STD_FLOOR = torch.finfo(torch.float).resolution


class ClipPPOObjective(nn.Module):
    """PPO's clipped surrogate, value and entropy losses on one minibatch.

    For advantages ``A`` (standardised over the minibatch when
    ``normalize_advantage``), ratios ``r = exp(log_prob - action_log_prob)``
    and ``eps = clip_epsilon``:

    * ``loss_objective = -mean(min(r * A, clip(r, 1 - eps, 1 + eps) * A))``
      (the clip applied to the log-ratio, as ``ClipPPOLoss`` does),
    * ``loss_critic = critic_coef * mean(d(value_target, V(s)))`` with ``d``
      the squared error (``"l2"``) or the smooth L1 distance,
    * ``loss_entropy = -entropy_coef * mean(H)``, with the distribution's
      analytic entropy or, when it has none (``TanhNormal``), a one-sample
      estimate ``-log_prob(rsample())``; computed only when
      ``entropy_coef != 0`` (otherwise a zero, as it is then).

    ``clip_fraction`` (share of clipped ratios) and ``kl_approx`` (mean of
    ``action_log_prob - log_prob``) are reported detached; ``entropy`` too
    when it is computed. ``clip_epsilon`` is a buffer, so
    :class:`~torchfrag.fragments.Learn` can anneal it (``anneal_buffers``).

    Args:
        actor: A probabilistic actor with ``get_dist`` (TorchRL's ``ProbabilisticActor``).
        critic: A module writing ``"state_value"`` (TorchRL's ``ValueOperator``).
        clip_epsilon: Clip range, ``>= 0``.
        entropy_coef: Entropy bonus weight.
        critic_coef: Value-loss weight.
        loss_critic_type: ``"l2"`` or ``"smooth_l1"``.
        normalize_advantage: Standardise advantages per minibatch.
    """

    def __init__(self, actor: nn.Module, critic: nn.Module, *, clip_epsilon: float = 0.2,
                 entropy_coef: float = 0.0, critic_coef: float = 0.5, loss_critic_type: str = "l2",
                 normalize_advantage: bool = True) -> None:
        super().__init__()
        distances = {"l2": F.mse_loss, "smooth_l1": F.smooth_l1_loss}
        if loss_critic_type not in distances:
            raise ValueError(f"loss_critic_type must be one of {sorted(distances)}, got {loss_critic_type!r}")
        if not hasattr(actor, "get_dist"):
            raise TypeError(f"ClipPPOObjective: the actor needs get_dist (a ProbabilisticActor), got "
                            f"{type(actor).__name__}")
        for name, value in (("clip_epsilon", clip_epsilon), ("entropy_coef", entropy_coef),
                            ("critic_coef", critic_coef)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if clip_epsilon < 0:
            raise ValueError(f"clip_epsilon must be >= 0, got {clip_epsilon!r}")
        self.actor = actor
        self.critic = critic
        self.register_buffer("clip_epsilon", torch.tensor(float(clip_epsilon)))
        self.entropy_coef, self.critic_coef = float(entropy_coef), float(critic_coef)
        self.loss_critic_type = loss_critic_type
        self._distance = distances[loss_critic_type]
        self.normalize_advantage = bool(normalize_advantage)
        reads: list[NestedKey] = [*getattr(actor, "in_keys", []), *getattr(critic, "in_keys", [])]
        self.in_keys: list[NestedKey] = list(dict.fromkeys(
            [*reads, "action", "action_log_prob", "advantage", "value_target"]))
        self.out_keys: list[NestedKey] = ["loss_objective", "loss_critic", "loss_entropy", "clip_fraction",
                                          "kl_approx"]

    def forward(self, tensordict: TensorDictBase) -> TensorDict:
        action, prev_log_prob, advantage, target = (
            tensordict.get(k, None) for k in ("action", "action_log_prob", "advantage", "value_target"))
        if action is None or prev_log_prob is None or advantage is None or target is None:
            missing = [k for k in ("action", "action_log_prob", "advantage", "value_target") if k not in tensordict]
            raise KeyError(f"ClipPPOObjective: the batch has no {missing} (it needs the actor's inputs, "
                           "'action' and 'action_log_prob' from the rollout, 'advantage' and 'value_target' "
                           "from an advantage estimator such as GAE)")
        if self.normalize_advantage and advantage.numel() > 1:
            advantage = (advantage - advantage.mean()) / advantage.std().clamp_min(_STD_FLOOR)
        dist = self.actor.get_dist(tensordict)
        log_prob = dist.log_prob(action)
        log_weight = (log_prob - prev_log_prob).unsqueeze(-1)
        eps = self.clip_epsilon
        log_weight_clip = log_weight.clamp(torch.log1p(-eps), torch.log1p(eps))
        gain = torch.minimum(log_weight.exp() * advantage, log_weight_clip.exp() * advantage)
        value = self.critic(tensordict).get("state_value")
        out = {"loss_objective": -gain.mean(),
               "loss_critic": self.critic_coef * self._distance(value, target),
               "clip_fraction": (log_weight_clip != log_weight).float().mean().detach(),
               "kl_approx": (prev_log_prob - log_prob).mean().detach()}
        if self.entropy_coef != 0.0:
            try:
                entropy = dist.entropy()
            except NotImplementedError:  # TanhNormal: ClipPPOLoss's one-sample estimate
                entropy = -dist.log_prob(dist.rsample())
            out["loss_entropy"] = -self.entropy_coef * entropy.mean()
            out["entropy"] = entropy.mean().detach()
        else:
            out["loss_entropy"] = torch.zeros((), device=advantage.device)
        return TensorDict(out, batch_size=[])
