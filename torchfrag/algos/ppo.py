"""PPO (discrete and continuous actions) as a loop of fragments on ClipPPOLoss and GAE.

The loop is ``rollout -> [reward scale] -> advantage -> learn``:

* :class:`~torchfrag.fragments.Rollout` runs the actor in a
  :class:`~torchfrag.envs.PoolEnv` for ``steps`` steps,
* :class:`~torchfrag.fragments.Advantage` runs TorchRL's ``GAE``,
* :class:`~torchfrag.fragments.Learn` runs epochs of minibatches of
  TorchRL's ``ClipPPOLoss`` with Adam, gradient clipping and a linearly
  annealed learning rate (CleanRL's recipe).

Everything is built by :func:`make_ppo` from plain keyword arguments
(a :class:`PPOConfig`), so a worker can rebuild the same loop from a picklable config.

Example:
    >>> from torchfrag.algos.ppo import PPOConfig, make_ppo
    >>> loop = make_ppo("CartPole-v1", PPOConfig(num_envs=2, steps=8, minibatch_size=8), seed=0)
    >>> metrics = loop()
    >>> float(metrics["lr"]) > 0
    True
    >>> loop.close()
"""
from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import AddStateIndependentNormalScale, TensorDictModule
from torch import nn
from torchrl.envs import EnvBase
from torchrl.modules import MLP, ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import ClipPPOLoss
from torchrl.objectives.value import GAE

from torchfrag.fragments import Act, Advantage, Collect, Fragment, Learn, Rollout

logger = logging.getLogger(__name__)

__all__ = ["PPOConfig", "PPOLoop", "RewardScale", "frozen_obs_norm", "make_actor_critic", "make_env", "make_ppo"]


@dataclass
class PPOConfig:
    """PPO hyper-parameters (defaults: CleanRL's CartPole recipe, with larger batches).

    Attributes:
        num_envs: Envs in the pool.
        steps: Rollout length per iteration (frames per iteration: ``num_envs * steps``).
        gamma: Discount.
        lmbda: GAE lambda.
        lr: Adam learning rate.
        anneal_lr: Anneal the learning rate linearly to 0 over ``total_frames``.
        total_frames: Training length (used for annealing).
        epochs: Passes over each batch.
        minibatch_size: Samples per gradient step.
        clip_epsilon: PPO clip range.
        entropy_coef: Entropy bonus weight.
        critic_coef: Value-loss weight.
        loss_critic_type: ``"l2"`` or ``"smooth_l1"``.
        max_grad_norm: Gradient-norm clip.
        hidden: Hidden layer sizes of the actor and critic MLPs.
        reward_scale: Multiplies rewards before GAE (1.0: no scaling node in the loop).
        normalize_advantage: Per-minibatch advantage normalisation.
        obs_norm: Normalise observations by running mean and standard deviation
            (TorchRL's ``VecNormV2`` on the env, statistics shared by its envs),
            clipped to [-10, 10], as CleanRL's MuJoCo recipe does. The statistics
            are saved in checkpoints and frozen for evaluation.
        collector: ``"rollout"``: a :class:`~torchfrag.fragments.Rollout` over a
            :class:`~torchfrag.envs.PoolEnv` (per-step body captured, so a
            policy can place act and env apart); ``"pool"``: a
            :class:`~torchfrag.fragments.Collect` over the async
            :class:`~torchfrag.collectors.PoolCollector`.
        pool_batch_size: Envs per policy call with ``collector="pool"``
            (``None``: ``num_envs // 2``).
        pool_deterministic: Bit-reproducible turn-taking groups with ``collector="pool"``.
    """

    num_envs: int = 8
    steps: int = 128
    gamma: float = 0.99
    lmbda: float = 0.95
    lr: float = 2.5e-4
    anneal_lr: bool = True
    total_frames: int = 500_000
    epochs: int = 4
    minibatch_size: int = 256
    clip_epsilon: float = 0.2
    entropy_coef: float = 0.01
    critic_coef: float = 0.5
    loss_critic_type: str = "l2"
    max_grad_norm: float = 0.5
    hidden: list[int] = field(default_factory=lambda: [64, 64])
    reward_scale: float = 1.0
    normalize_advantage: bool = True
    obs_norm: bool = False
    collector: str = "rollout"
    pool_batch_size: int | None = None
    pool_deterministic: bool = True

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PPOConfig:
        """Builds a config from a mapping, ignoring unrelated keys (e.g. a Hydra ``algo`` node)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: (list(v) if k == "hidden" else v) for k, v in d.items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (picklable, YAML-friendly)."""
        return asdict(self)

    @property
    def frames_per_iteration(self) -> int:
        """``num_envs * steps``."""
        return self.num_envs * self.steps


def make_env(env_id: str, num_envs: int, seed: int | Sequence[int] = 0, *, obs_norm: bool = False,
             **options: Any) -> EnvBase:
    """A :class:`~torchfrag.envs.PoolEnv` with only the observation exposed.

    Float64 observations (MuJoCo) are cast to float32 for the networks with
    TorchRL's ``DoubleToFloat`` transform.

    Args:
        env_id: A registered env id.
        num_envs: Envs in the pool.
        seed: One seed for the pool, or one per env.
        obs_norm: Append running observation normalisation (``VecNormV2`` over
            all envs, decay 0.99999) and a clip to [-10, 10].
        **options: Env options for :func:`torchfrag.envs.make`.

    Example:
        >>> from torchfrag.algos.ppo import make_env
        >>> make_env("CartPole-v1", 2).batch_size
        torch.Size([2])
        >>> make_env("HalfCheetah-v5", 2).observation_spec["observation"].dtype
        torch.float32
        >>> make_env("Pendulum-v1", 2, obs_norm=True).transform[0].__class__.__name__
        'VecNormV2'
    """
    from torchrl.envs import Compose, DoubleToFloat, TransformedEnv, VecNormV2

    from torchfrag.envs import PoolEnv

    env = PoolEnv(env_id, num_envs=num_envs, seed=seed, info_keys=[], **options)
    transforms = []
    if env.observation_spec["observation"].dtype == torch.float64:
        transforms.append(DoubleToFloat(in_keys=["observation"]))
    if obs_norm:
        transforms += [VecNormV2(in_keys=["observation"], decay=0.99999, eps=1e-8,
                                 reduce_batch_dims=True),
                       _obs_clip()]
    return TransformedEnv(env, Compose(*transforms)) if transforms else env


def _obs_clip() -> Any:
    """The clip that follows observation normalisation, in training and evaluation envs alike."""
    from torchrl.envs import ClipTransform

    return ClipTransform(in_keys=["observation"], low=-10.0, high=10.0)


def frozen_obs_norm(env: EnvBase) -> Any:
    """A frozen copy of ``env``'s observation normalisation (for evaluation envs), or ``None``.

    Example:
        >>> from torchfrag.algos.ppo import frozen_obs_norm, make_env
        >>> frozen_obs_norm(make_env("CartPole-v1", 2)) is None
        True
        >>> type(frozen_obs_norm(make_env("CartPole-v1", 2, obs_norm=True))).__name__
        'Compose'
    """
    from torchrl.envs import Compose, VecNormV2

    for t in getattr(env, "transform", []) or []:
        if isinstance(t, VecNormV2):
            return Compose(t.frozen_copy(), _obs_clip())
    return None


def _ortho(layer: nn.Module, gain: float) -> None:
    if isinstance(layer, nn.Linear):
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)


def _mlp(n_in: int, n_out: int, hidden: list[int], out_gain: float) -> MLP:
    net = MLP(in_features=n_in, out_features=n_out, num_cells=list(hidden), activation_class=nn.Tanh)
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    for lin in linears[:-1]:
        _ortho(lin, math.sqrt(2))
    _ortho(linears[-1], out_gain)
    return net


def make_actor_critic(env: EnvBase, hidden: list[int]) -> tuple[ProbabilisticActor, ValueOperator]:
    """Separate MLP actor and critic for ``env``'s action space.

    Discrete actions: a categorical policy over logits. Continuous actions: a
    ``TanhNormal`` squashed into the action bounds, with a state-independent
    scale (as TorchRL's and CleanRL's MuJoCo PPO).

    Example:
        >>> from torchfrag.algos.ppo import make_actor_critic, make_env
        >>> actor, critic = make_actor_critic(make_env("Pendulum-v1", 2), [16])
        >>> actor.out_keys
        ['loc', 'scale', 'action', 'action_log_prob']
    """
    from torchfrag.algos.common import is_image, make_cnn_actor_critic

    if is_image(env):  # Atari frame stacks: the Nature-CNN torso shared by actor and critic
        return make_cnn_actor_critic(env)
    obs_dim = env.observation_spec["observation"].shape[-1]
    spec = env.action_spec_unbatched
    discrete = spec.dtype in (torch.int64, torch.int32) or hasattr(spec.space, "n")
    if discrete:
        n = spec.space.n
        body = TensorDictModule(_mlp(obs_dim, n, hidden, 0.01), ["observation"], ["logits"])
        actor = ProbabilisticActor(body, in_keys=["logits"], spec=spec,
                                   distribution_class=torch.distributions.Categorical,
                                   return_log_prob=True)
    else:
        act_dim = spec.shape[-1]
        net = nn.Sequential(_mlp(obs_dim, act_dim, hidden, 0.01),
                            AddStateIndependentNormalScale(act_dim, scale_lb=1e-4))
        body = TensorDictModule(net, ["observation"], ["loc", "scale"])
        actor = ProbabilisticActor(body, in_keys=["loc", "scale"], spec=spec,
                                   distribution_class=TanhNormal,
                                   distribution_kwargs={"low": spec.space.low, "high": spec.space.high},
                                   return_log_prob=True)
    critic = ValueOperator(_mlp(obs_dim, 1, hidden, 1.0), in_keys=["observation"])
    return actor, critic


class RewardScale(Fragment):
    """Multiplies ``("next", "reward")`` by a constant (a tiny custom fragment).

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({("next", "reward"): torch.ones(2, 1)}, batch_size=[2])
        >>> RewardScale(0.1)(td)["next", "reward"].flatten().tolist()
        [0.10000000149011612, 0.10000000149011612]
    """

    per_env = True

    def __init__(self, scale: float) -> None:
        super().__init__([("next", "reward")], [("next", "reward")])
        self.scale = float(scale)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        key = ("next", "reward")
        return tensordict.set(key, tensordict.get(key) * self.scale)


class PPOLoop(nn.Module):
    """One PPO iteration: ``batch = rollout(); batch = advantage(batch); return learn(batch)``.

    Args:
        env: The training env (batched).
        actor: Probabilistic actor.
        critic: State-value network.
        cfg: Hyper-parameters.
    """

    def __init__(self, env: Any, actor: ProbabilisticActor, critic: ValueOperator,
                 cfg: PPOConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.actor = actor
        self.critic = critic
        if cfg.collector == "rollout":
            self.env = env
            self.rollout = Rollout(actor, env, steps=cfg.steps)
        elif cfg.collector == "pool":
            from torchfrag.collectors import PoolCollector

            self.env = None
            keys = ["observation", "done", "terminated", "truncated", *actor.out_keys,
                    ("next", "observation"), ("next", "reward"), ("next", "done"),
                    ("next", "terminated"), ("next", "truncated")]
            self.rollout = Collect(env, out_keys=keys, policy=actor)
            self.__dict__["collector"] = env
            assert isinstance(env, PoolCollector)
        else:
            raise ValueError(f"collector must be 'rollout' or 'pool', got {cfg.collector!r}")
        self.scale = RewardScale(cfg.reward_scale) if cfg.reward_scale != 1.0 else None
        self.advantage = Advantage(GAE(gamma=cfg.gamma, lmbda=cfg.lmbda, value_network=critic,
                                       average_gae=False))
        loss = ClipPPOLoss(actor, critic, clip_epsilon=cfg.clip_epsilon,
                           entropy_coeff=cfg.entropy_coef, critic_coeff=cfg.critic_coef,
                           loss_critic_type=cfg.loss_critic_type,
                           normalize_advantage=cfg.normalize_advantage)
        iterations = max(1, cfg.total_frames // cfg.frames_per_iteration)
        self.learn = Learn(
            loss, lr=cfg.lr, epochs=cfg.epochs, minibatch_size=cfg.minibatch_size,
            max_grad_norm=cfg.max_grad_norm, anneal_steps=iterations if cfg.anneal_lr else None,
            select_keys=["observation", "action", "action_log_prob", "advantage", "value_target"],
        )

    def forward(self) -> TensorDictBase:
        batch = self.rollout()
        if self.scale is not None:
            batch = self.scale(batch)
        batch = self.advantage(batch)
        return self.learn(batch)

    # -- checkpoints -------------------------------------------------------------------
    def training_state(self) -> dict[str, Any]:
        """Everything needed to resume: weights, optimizer, counters, observation statistics."""
        state = {"model": {"actor": self.actor.state_dict(), "critic": self.critic.state_dict()},
                 "learn": self.learn.state_dict_extra(), "frames": self.rollout.frames}
        if self.cfg.obs_norm and self.env is not None:
            state["obs_norm"] = self.env.transform.state_dict()
        return state

    def load_training_state(self, state: dict[str, Any]) -> None:
        """Restores :meth:`training_state` (the env restarts from a reset)."""
        self.actor.load_state_dict(state["model"]["actor"])
        self.critic.load_state_dict(state["model"]["critic"])
        self.learn.load_state_dict_extra(state["learn"])
        if "obs_norm" in state and self.env is not None:
            self.env.transform.load_state_dict(state["obs_norm"])
        self.rollout.frames = int(state["frames"])
        self.rollout.reset()

    def eval_transform(self) -> Any:
        """What an evaluation env must apply to match training (frozen observation statistics)."""
        return frozen_obs_norm(self.env) if self.env is not None else None

    def close(self) -> None:
        """Closes the env (or shuts the collector down)."""
        if self.env is not None and not getattr(self.env, "is_closed", True):
            self.env.close()
        collector = self.__dict__.get("collector")
        if collector is not None:
            collector.shutdown()


def make_ppo(env_id: str, cfg: PPOConfig | dict | None = None, seed: int = 0,
             env_options: dict[str, Any] | None = None) -> PPOLoop:
    """Builds a :class:`PPOLoop` (seeding torch first, so the same seed gives the same run).

    Args:
        env_id: A registered env id.
        cfg: A :class:`PPOConfig` or a mapping of its fields.
        seed: Seeds torch and the env pool.
        env_options: Extra env options for :func:`torchfrag.envs.make`.

    Example:
        >>> from torchfrag.algos.ppo import make_ppo
        >>> loop = make_ppo("CartPole-v1", {"num_envs": 2, "steps": 4, "minibatch_size": 4})
        >>> loop.rollout().batch_size
        torch.Size([2, 4])
        >>> loop.close()
    """
    if cfg is None:
        cfg = PPOConfig()
    elif not isinstance(cfg, PPOConfig):
        cfg = PPOConfig.from_dict(dict(cfg))
    torch.manual_seed(seed)
    if cfg.collector == "pool":
        from torchfrag.collectors import PoolCollector

        if cfg.obs_norm:
            raise ValueError("obs_norm needs collector='rollout' (the pool collector has no env "
                             "transforms)")

        spec_env = make_env(env_id, 1, seed=seed, **(env_options or {}))
        actor, critic = make_actor_critic(spec_env, cfg.hidden)
        spec_env.close()
        env = PoolCollector(env_id, Act(actor), frames_per_batch=cfg.frames_per_iteration,
                            num_envs=cfg.num_envs, batch_size=cfg.pool_batch_size, seed=seed,
                            deterministic=cfg.pool_deterministic, **(env_options or {}))
    else:
        env = make_env(env_id, cfg.num_envs, seed=seed, obs_norm=cfg.obs_norm, **(env_options or {}))
        actor, critic = make_actor_critic(env, cfg.hidden)
    return PPOLoop(env, actor, critic, cfg)
