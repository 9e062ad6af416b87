"""IMPALA (Espeholt et al. 2018) as a loop of fragments on V-trace and A2CLoss.

The loop is ``rollout -> v-trace -> learn``:

* :class:`~torchfrag.fragments.Rollout` runs the actor and records the
  behaviour policy's ``action_log_prob``,
* :class:`~torchfrag.fragments.Advantage` runs TorchRL's ``VTrace``: importance
  weights between the learner's current actor and the behaviour policy,
  clipped at ``rho_thresh``/``c_thresh``, give off-policy-corrected value
  targets and policy-gradient advantages,
* :class:`~torchfrag.fragments.Learn` takes one RMSprop step of TorchRL's ``A2CLoss``
  on them (as TorchRL's own IMPALA example).

It is meant for the ``async_actors`` distribution policy, where rollouts come
from actors running on slightly stale weights (V-trace corrects for it).
Under ``local`` the data is on-policy and V-trace reduces to n-step returns.

Example:
    >>> from torchfrag.algos.impala import IMPALAConfig, make_impala
    >>> loop = make_impala("CartPole-v1", IMPALAConfig(num_envs=2, steps=4), seed=0)
    >>> "loss_objective" in loop().keys()
    True
    >>> loop.close()
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.envs import EnvBase
from torchrl.modules import ProbabilisticActor, ValueOperator
from torchrl.objectives.value import VTrace

from torchfrag.algos.common import AlgoConfig, LoopBase, actor_critic_learn
from torchfrag.algos.ppo import RewardScale, make_actor_critic, make_env
from torchfrag.fragments import Advantage, Rollout

logger = logging.getLogger(__name__)

__all__ = ["build_impala", "IMPALAConfig", "IMPALALoop", "make_impala"]


@dataclass
class IMPALAConfig(AlgoConfig):
    """IMPALA hyper-parameters (defaults: tuned for CartPole-v1 on a small CPU).

    Attributes:
        num_envs: Envs per rollout.
        steps: Unroll length.
        gamma: Discount.
        rho_thresh: V-trace clip of the importance weights in the policy gradient and targets.
        c_thresh: V-trace clip of the trace-cutting coefficients.
        lr: Learning rate.
        optimizer: ``"rmsprop"`` (the paper's) or ``"adam"``.
        anneal_lr: Anneal the learning rate linearly to 0 over ``total_frames``.
        total_frames: Training length.
        entropy_coef: Entropy bonus weight.
        critic_coef: Value-loss weight.
        loss_critic_type: ``"l2"`` or ``"smooth_l1"``.
        max_grad_norm: Gradient-norm clip.
        hidden: Hidden layer sizes of the actor and critic MLPs.
        reward_scale: Multiplies rewards before V-trace.
        normalize_advantage: Normalise the V-trace advantages over the batch.
    """

    num_envs: int = 16
    steps: int = 16
    gamma: float = 0.99
    rho_thresh: float = 1.0
    c_thresh: float = 1.0
    lr: float = 1e-3
    optimizer: str = "adam"
    anneal_lr: bool = False
    total_frames: int = 200_000
    entropy_coef: float = 0.0
    critic_coef: float = 0.5
    loss_critic_type: str = "l2"
    max_grad_norm: float = 10.0
    hidden: list[int] = field(default_factory=lambda: [64, 64])
    reward_scale: float = 1.0
    normalize_advantage: bool = True


class IMPALALoop(LoopBase):
    """One IMPALA learner step: ``batch = rollout(); batch = vtrace(batch); return learn(batch)``.

    Args:
        env: The training env (batched).
        actor: Probabilistic actor (records ``action_log_prob``).
        critic: State-value network.
        cfg: Hyper-parameters.
    """

    MODELS = ("actor", "critic")

    def __init__(self, env: EnvBase, actor: ProbabilisticActor, critic: ValueOperator,
                 cfg: IMPALAConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.env = env
        self.actor = actor
        self.critic = critic
        self.rollout = Rollout(actor, env, steps=cfg.steps)
        self.scale = RewardScale(cfg.reward_scale) if cfg.reward_scale != 1.0 else None
        self.advantage = Advantage(VTrace(gamma=cfg.gamma, value_network=critic, actor_network=actor,
                                          rho_thresh=cfg.rho_thresh, c_thresh=cfg.c_thresh,
                                          average_adv=cfg.normalize_advantage))
        self.learn = actor_critic_learn(actor, critic, cfg, rmsprop_eps=0.01)

    def forward(self) -> TensorDictBase:
        batch = self.rollout()
        if self.scale is not None:
            batch = self.scale(batch)
        batch = self.advantage(batch)
        return self.learn(batch)


def make_impala(env_id: str, cfg: IMPALAConfig | dict | None = None, seed: int = 0,
                env_options: dict[str, Any] | None = None) -> IMPALALoop:
    """Builds an :class:`IMPALALoop` (seeding torch first, so the same seed gives the same run).

    Args:
        env_id: A registered env id.
        cfg: An :class:`IMPALAConfig` or a mapping of its fields.
        seed: Seeds torch and the env pool.
        env_options: Extra env options for :func:`torchfrag.envs.make`.

    Example:
        >>> from torchfrag.algos.impala import make_impala
        >>> loop = make_impala("CartPole-v1", {"num_envs": 2, "steps": 4})
        >>> loop.advantage.describe()
        'Advantage(VTrace)'
        >>> loop.close()
    """
    cfg = IMPALAConfig.coerce(cfg)
    torch.manual_seed(seed)
    env = make_env(env_id, cfg.num_envs, seed=seed, **(env_options or {}))
    return build_impala(env, cfg)


def build_impala(env: EnvBase, cfg: IMPALAConfig) -> IMPALALoop:
    """Builds the networks and the loop on an existing env (used by :func:`make_impala` and the
    distribution policies' factories; seed torch before calling it)."""
    actor, critic = make_actor_critic(env, cfg.hidden)
    return IMPALALoop(env, actor, critic, cfg)
