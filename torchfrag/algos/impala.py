"""IMPALA (Espeholt et al. 2018) as a loop of fragments on V-trace and A2CLoss.

The loop is ``rollout -> v-trace -> learn``:

* :class:`~torchfrag.fragments.Rollout` runs the actor and records the
  behaviour policy's ``action_log_prob``,
* :class:`~torchfrag.fragments.Advantage` runs TorchRL's ``VTrace``: importance
  weights between the learner's current actor and the behaviour policy,
  clipped at ``rho_thresh``/``c_thresh``, give off-policy-corrected value
  targets and policy-gradient advantages,
* :class:`~torchfrag.fragments.Learn` takes one step of TorchRL's ``A2CLoss``
  on them (as TorchRL's own IMPALA example).

It is meant for the ``async_actors`` distribution policy, where rollouts come
from actors running on slightly stale weights (V-trace corrects for it).
Under ``local`` the data is on-policy and V-trace reduces to n-step returns.
The loop itself is :class:`~torchfrag.algos.actor_critic.ActorCriticLoop`, shared with A2C.

Example:
    >>> from torchfrag.algos.impala import IMPALAConfig, make_impala
    >>> loop = make_impala("CartPole-v1", IMPALAConfig(num_envs=2, steps=4), seed=0)
    >>> "loss_objective" in loop().keys()
    True
    >>> loop.advantage.describe()
    'Advantage(VTrace)'
    >>> loop.close()
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchrl.envs import EnvBase
from torchrl.objectives.value import VTrace

from torchfrag.algos.actor_critic import ActorCriticConfig, ActorCriticLoop
from torchfrag.algos.networks import make_actor_critic

__all__ = ["IMPALAConfig", "IMPALALoop", "build_impala", "make_impala"]


class IMPALALoop(ActorCriticLoop):
    """:class:`~torchfrag.algos.actor_critic.ActorCriticLoop` with V-trace (a name for logs and tests)."""


@dataclass
class IMPALAConfig(ActorCriticConfig):
    """IMPALA hyper-parameters: :class:`~torchfrag.algos.actor_critic.ActorCriticConfig` plus V-trace's clips.

    Attributes:
        rho_thresh: V-trace clip of the importance weights in the policy gradient and targets.
        c_thresh: V-trace clip of the trace-cutting coefficients.
    """

    rho_thresh: float = 1.0
    c_thresh: float = 1.0


def build_impala(env: EnvBase, cfg: IMPALAConfig) -> IMPALALoop:
    """Builds the networks and the loop on ``env`` (seed torch before calling it)."""
    actor, critic = make_actor_critic(env, cfg.hidden)
    vtrace = VTrace(gamma=cfg.gamma, value_network=critic, actor_network=actor,
                    rho_thresh=cfg.rho_thresh, c_thresh=cfg.c_thresh,
                    average_adv=cfg.normalize_advantage)
    return IMPALALoop(env, actor, critic, cfg, vtrace, rmsprop_eps=0.01)


def make_impala(env_id: str, cfg: IMPALAConfig | dict | None = None, seed: int = 0,
                env_options: dict[str, Any] | None = None) -> IMPALALoop:
    """Builds an IMPALA loop for all envs of ``env_id`` (``AlgoFactory(..., algo="impala")()``)."""
    from torchfrag.algos.factory import AlgoFactory

    return AlgoFactory(env_id, IMPALAConfig.coerce(cfg), seed=seed, env_options=dict(env_options or {}),
                       algo="impala")()
