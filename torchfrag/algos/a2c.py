"""A2C (discrete and continuous actions) as a loop of fragments on A2CLoss and GAE.

The loop is ``rollout -> advantage -> learn``, PPO's structure with a single
gradient step on the whole batch per iteration (no ratio clipping, no epochs):

* :class:`~torchfrag.fragments.Rollout` runs the actor in a :class:`~torchfrag.envs.PoolEnv`,
* :class:`~torchfrag.fragments.Advantage` runs TorchRL's ``GAE``,
* :class:`~torchfrag.fragments.Learn` runs TorchRL's ``A2CLoss`` with Adam
  (or RMSprop, as the paper) and gradient clipping.

Example:
    >>> from torchfrag.algos.a2c import A2CConfig, make_a2c
    >>> loop = make_a2c("CartPole-v1", A2CConfig(num_envs=2, steps=4), seed=0)
    >>> sorted(k for k in loop().keys() if k.startswith("loss_"))
    ['loss_critic', 'loss_objective']
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
from torchrl.objectives.value import GAE

from torchfrag.algos.common import AlgoConfig, LoopBase, actor_critic_learn
from torchfrag.algos.ppo import RewardScale, make_actor_critic, make_env
from torchfrag.fragments import Advantage, Rollout

logger = logging.getLogger(__name__)

__all__ = ["build_a2c", "A2CConfig", "A2CLoop", "make_a2c"]


@dataclass
class A2CConfig(AlgoConfig):
    """A2C hyper-parameters (defaults: tuned for CartPole-v1 on a small CPU).

    Attributes:
        num_envs: Envs in the pool.
        steps: Rollout length per iteration (n-step horizon).
        gamma: Discount.
        lmbda: GAE lambda (1.0: plain n-step returns as the paper).
        lr: Learning rate.
        optimizer: ``"adam"`` or ``"rmsprop"`` (the paper's, ``alpha=0.99, eps=1e-5``).
        anneal_lr: Anneal the learning rate linearly to 0 over ``total_frames``.
        total_frames: Training length.
        entropy_coef: Entropy bonus weight.
        critic_coef: Value-loss weight.
        loss_critic_type: ``"l2"`` or ``"smooth_l1"``.
        max_grad_norm: Gradient-norm clip.
        hidden: Hidden layer sizes of the actor and critic MLPs.
        reward_scale: Multiplies rewards before GAE.
        normalize_advantage: Normalise advantages over the batch.
    """

    num_envs: int = 16
    steps: int = 16
    gamma: float = 0.99
    lmbda: float = 0.95
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


class A2CLoop(LoopBase):
    """One A2C iteration: ``batch = rollout(); batch = advantage(batch); return learn(batch)``.

    Args:
        env: The training env (batched).
        actor: Probabilistic actor.
        critic: State-value network.
        cfg: Hyper-parameters.
    """

    MODELS = ("actor", "critic")

    def __init__(self, env: EnvBase, actor: ProbabilisticActor, critic: ValueOperator,
                 cfg: A2CConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.env = env
        self.actor = actor
        self.critic = critic
        self.rollout = Rollout(actor, env, steps=cfg.steps)
        self.scale = RewardScale(cfg.reward_scale) if cfg.reward_scale != 1.0 else None
        self.advantage = Advantage(GAE(gamma=cfg.gamma, lmbda=cfg.lmbda, value_network=critic,
                                       average_gae=cfg.normalize_advantage))
        self.learn = actor_critic_learn(actor, critic, cfg, rmsprop_eps=1e-5)

    def forward(self) -> TensorDictBase:
        batch = self.rollout()
        if self.scale is not None:
            batch = self.scale(batch)
        batch = self.advantage(batch)
        return self.learn(batch)


def make_a2c(env_id: str, cfg: A2CConfig | dict | None = None, seed: int = 0,
             env_options: dict[str, Any] | None = None) -> A2CLoop:
    """Builds an :class:`A2CLoop` (seeding torch first, so the same seed gives the same run).

    Args:
        env_id: A registered env id.
        cfg: An :class:`A2CConfig` or a mapping of its fields.
        seed: Seeds torch and the env pool.
        env_options: Extra env options for :func:`torchfrag.envs.make`.

    Example:
        >>> from torchfrag.algos.a2c import make_a2c
        >>> loop = make_a2c("Pendulum-v1", {"num_envs": 2, "steps": 4})
        >>> loop.rollout().batch_size
        torch.Size([2, 4])
        >>> loop.close()
    """
    cfg = A2CConfig.coerce(cfg)
    torch.manual_seed(seed)
    env = make_env(env_id, cfg.num_envs, seed=seed, **(env_options or {}))
    return build_a2c(env, cfg)


def build_a2c(env: EnvBase, cfg: A2CConfig) -> A2CLoop:
    """Builds the networks and the loop on an existing env (used by :func:`make_a2c` and the
    distribution policies' factories; seed torch before calling it)."""
    actor, critic = make_actor_critic(env, cfg.hidden)
    return A2CLoop(env, actor, critic, cfg)
