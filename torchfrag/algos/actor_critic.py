"""The part A2C and IMPALA share: config fields, the loop ``rollout -> advantage -> learn``, the learner.

A2C (:mod:`torchfrag.algos.a2c`) and IMPALA (:mod:`torchfrag.algos.impala`)
differ only in their advantage estimator (GAE or V-trace) and in RMSprop's
``eps``; everything else lives here once.

Example:
    >>> from torchfrag.algos.actor_critic import ActorCriticConfig
    >>> ActorCriticConfig().optimizer
    'adam'
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from tensordict import TensorDictBase
from torchrl.envs import EnvBase
from torchrl.modules import ProbabilisticActor, ValueOperator
from torchrl.objectives import A2CLoss

from torchfrag.algos.config import AlgoConfig
from torchfrag.algos.fragments import RewardScale
from torchfrag.algos.loop import LoopBase
from torchfrag.fragments import Advantage, Learn, Rollout

__all__ = ["ActorCriticConfig", "ActorCriticLoop", "actor_critic_learn"]


@dataclass
class ActorCriticConfig(AlgoConfig):
    """Hyper-parameters A2C and IMPALA share (defaults: tuned for CartPole-v1 on a small CPU).

    Attributes:
        num_envs: Envs in the pool.
        steps: Rollout length per iteration (n-step horizon).
        gamma: Discount.
        lr: Learning rate.
        optimizer: ``"adam"`` or ``"rmsprop"`` (the papers', ``alpha=0.99``).
        anneal_lr: Anneal the learning rate linearly to 0 over ``total_frames``.
        total_frames: Training length.
        entropy_coef: Entropy bonus weight.
        critic_coef: Value-loss weight.
        loss_critic_type: ``"l2"`` or ``"smooth_l1"``.
        max_grad_norm: Gradient-norm clip.
        hidden: Hidden layer sizes of the actor and critic MLPs.
        reward_scale: Multiplies rewards before the advantage estimator.
        normalize_advantage: Normalise advantages over the batch.
    """

    num_envs: int = 16
    steps: int = 16
    gamma: float = 0.99
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


def actor_critic_learn(actor: ProbabilisticActor, critic: ValueOperator, cfg: ActorCriticConfig,
                       rmsprop_eps: float) -> Learn:
    """The learn fragment: one pass of ``A2CLoss`` per batch with Adam or RMSprop.

    The two algorithms' published recipes differ only in RMSprop's ``eps``.
    """
    loss = A2CLoss(actor, critic, entropy_coeff=cfg.entropy_coef, critic_coeff=cfg.critic_coef,
                   loss_critic_type=cfg.loss_critic_type)
    if cfg.optimizer == "rmsprop":
        opt: torch.optim.Optimizer = torch.optim.RMSprop(loss.parameters(), lr=cfg.lr, alpha=0.99,
                                                         eps=rmsprop_eps)
    elif cfg.optimizer == "adam":
        opt = torch.optim.Adam(loss.parameters(), lr=cfg.lr, eps=1e-5)
    else:
        raise ValueError(f"optimizer must be 'adam' or 'rmsprop', got {cfg.optimizer!r}")
    iterations = cfg.iterations
    return Learn(
        loss, opt, epochs=1, max_grad_norm=cfg.max_grad_norm,
        anneal_steps=iterations if cfg.anneal_lr else None,
        select_keys=["observation", "action", "advantage", "value_target"],
    )


class ActorCriticLoop(LoopBase):
    """One iteration: ``batch = rollout(); batch = advantage(batch); return learn(batch)``.

    Args:
        env: The training env (batched).
        actor: Probabilistic actor (records ``action_log_prob``).
        critic: State-value network.
        cfg: Hyper-parameters.
        estimator: The advantage estimator module (TorchRL's ``GAE`` or ``VTrace``).
        rmsprop_eps: RMSprop's ``eps`` when ``cfg.optimizer == "rmsprop"``.
    """

    MODELS = ("actor", "critic")

    def __init__(self, env: EnvBase, actor: ProbabilisticActor, critic: ValueOperator,
                 cfg: ActorCriticConfig, estimator: Any, rmsprop_eps: float) -> None:
        super().__init__()
        self.cfg = cfg
        self.env = env
        self.actor = actor
        self.critic = critic
        self.rollout = Rollout(actor, env, steps=cfg.steps)
        self.scale = RewardScale(cfg.reward_scale) if cfg.reward_scale != 1.0 else None
        self.advantage = Advantage(estimator)
        self.learn = actor_critic_learn(actor, critic, cfg, rmsprop_eps=rmsprop_eps)

    def forward(self) -> TensorDictBase:
        batch = self.rollout()
        if self.scale is not None:
            batch = self.scale(batch)
        batch = self.advantage(batch)
        return self.learn(batch)
