"""A2C (discrete and continuous actions) as a loop of fragments on A2CLoss and GAE.

The loop is ``rollout -> advantage -> learn``, PPO's structure with a single
gradient step on the whole batch per iteration (no ratio clipping, no epochs):

* :class:`~torchfrag.fragments.Rollout` runs the actor in a :class:`~torchfrag.envs.PoolEnv`,
* :class:`~torchfrag.fragments.Advantage` runs TorchRL's ``GAE``,
* :class:`~torchfrag.fragments.Learn` runs TorchRL's ``A2CLoss`` with Adam
  (or RMSprop, as the paper) and gradient clipping.

The loop itself is :class:`~torchfrag.algos.actor_critic.ActorCriticLoop`, shared with IMPALA.

Example:
    >>> from torchfrag.algos.a2c import A2CConfig, make_a2c
    >>> loop = make_a2c("CartPole-v1", A2CConfig(num_envs=2, steps=4), seed=0)
    >>> sorted(k for k in loop().keys() if k.startswith("loss_"))
    ['loss_critic', 'loss_objective']
    >>> loop.close()
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchrl.envs import EnvBase
from torchrl.objectives.value import GAE

from torchfrag.algos.actor_critic import ActorCriticConfig, ActorCriticLoop
from torchfrag.algos.networks import make_actor_critic

__all__ = ["A2CConfig", "A2CLoop", "build_a2c", "make_a2c"]


class A2CLoop(ActorCriticLoop):
    """:class:`~torchfrag.algos.actor_critic.ActorCriticLoop` with GAE (a name for logs and tests)."""


@dataclass
class A2CConfig(ActorCriticConfig):
    """A2C hyper-parameters: :class:`~torchfrag.algos.actor_critic.ActorCriticConfig` plus GAE's lambda.

    Attributes:
        lmbda: GAE lambda (1.0: plain n-step returns as the paper).
    """

    lmbda: float = 0.95


def build_a2c(env: EnvBase, cfg: A2CConfig) -> A2CLoop:
    """Builds the networks and the loop on ``env`` (seed torch before calling it)."""
    actor, critic = make_actor_critic(env, cfg.hidden)
    gae = GAE(gamma=cfg.gamma, lmbda=cfg.lmbda, value_network=critic, average_gae=cfg.normalize_advantage)
    return A2CLoop(env, actor, critic, cfg, gae, rmsprop_eps=1e-5)


def make_a2c(env_id: str, cfg: A2CConfig | dict | None = None, seed: int = 0,
             env_options: dict[str, Any] | None = None) -> A2CLoop:
    """Builds an A2C loop for all envs of ``env_id`` (``AlgoFactory(..., algo="a2c")()``).

    Example:
        >>> from torchfrag.algos.a2c import make_a2c
        >>> loop = make_a2c("Pendulum-v1", {"num_envs": 2, "steps": 4})
        >>> loop.rollout().batch_size
        torch.Size([2, 4])
        >>> loop.close()
    """
    from torchfrag.algos.factory import AlgoFactory

    return AlgoFactory(env_id, A2CConfig.coerce(cfg), seed=seed, env_options=dict(env_options or {}),
                       algo="a2c")()
