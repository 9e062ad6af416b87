"""Helpers shared by the algorithms: config base, networks and small fragments.

* :class:`AlgoConfig` - the ``from_dict``/``to_dict``/``frames_per_iteration``
  protocol every algorithm config follows (as :class:`~torchfrag.algos.ppo.PPOConfig`),
* :func:`mlp` and :class:`NatureCNN` - networks (orthogonal init, CleanRL's),
* :class:`TargetUpdate` - a fragment stepping a TorchRL target-network updater,
* :class:`Anneal` - a fragment annealing an exploration module by frames seen,
* :class:`RandomActor` - uniform random actions (replay warm-up),
* :class:`LoopBase` - checkpoint/close plumbing of a loop module.

Example:
    >>> from torchfrag.algos.common import mlp
    >>> mlp(4, 2, [8]).__class__.__name__
    'MLP'
"""
from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn
from torchrl.envs import EnvBase
from torchrl.modules import MLP, ActorValueOperator, ProbabilisticActor, ValueOperator
from torchrl.objectives import A2CLoss

from torchfrag.fragments import Fragment, Learn, Rollout

logger = logging.getLogger(__name__)

__all__ = [
    "AlgoConfig",
    "AlgoFactory",
    "Anneal",
    "LoopBase",
    "NatureCNN",
    "RandomActor",
    "TargetUpdate",
    "is_discrete",
    "is_image",
    "make_cnn_actor_critic",
    "mlp",
    "prefill",
]


@dataclass
class AlgoConfig:
    """Base of the algorithm configs: plain fields, built from a (Hydra) mapping.

    Subclasses are dataclasses with ``num_envs``, ``steps`` and ``total_frames``.

    Example:
        >>> from torchfrag.algos.a2c import A2CConfig
        >>> A2CConfig.from_dict({"num_envs": 4, "name": "a2c", "unrelated": 1}).num_envs
        4
    """

    LIST_FIELDS: ClassVar[tuple[str, ...]] = ("hidden",)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        """Builds a config from a mapping, ignoring unrelated keys (e.g. ``name``)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: (list(v) if k in cls.LIST_FIELDS and v is not None else v)
                      for k, v in d.items() if k in names})

    @classmethod
    def coerce(cls, cfg: Any) -> Any:
        """``None`` -> defaults; a mapping -> :meth:`from_dict`; an instance -> itself."""
        if cfg is None:
            return cls()
        if isinstance(cfg, cls):
            return cfg
        return cls.from_dict(dict(cfg))

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (picklable, YAML-friendly)."""
        return asdict(self)

    @property
    def frames_per_iteration(self) -> int:
        """``num_envs * steps``."""
        return int(self.num_envs) * int(self.steps)  # type: ignore[attr-defined]


def is_discrete(env: EnvBase) -> bool:
    """Whether ``env`` has a discrete (categorical) action space."""
    spec = env.action_spec_unbatched
    return spec.dtype in (torch.int64, torch.int32) or hasattr(spec.space, "n")


def is_image(env: EnvBase) -> bool:
    """Whether the observation is an image stack (``[C, H, W]`` per env)."""
    return env.observation_spec["observation"].ndim - len(env.batch_size) == 3


def _ortho(layer: nn.Module, gain: float) -> None:
    if isinstance(layer, (nn.Linear, nn.Conv2d)):
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)


def mlp(n_in: int, n_out: int, hidden: list[int], out_gain: float = 1.0,
        activation: type[nn.Module] = nn.ReLU) -> MLP:
    """An MLP with orthogonal init (``sqrt(2)`` hidden gain, ``out_gain`` on the last layer).

    Example:
        >>> import torch
        >>> from torchfrag.algos.common import mlp
        >>> mlp(3, 2, [16, 16])(torch.zeros(5, 3)).shape
        torch.Size([5, 2])
    """
    net = MLP(in_features=n_in, out_features=n_out, num_cells=list(hidden), activation_class=activation)
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    for lin in linears[:-1]:
        _ortho(lin, math.sqrt(2))
    _ortho(linears[-1], out_gain)
    return net


class NatureCNN(nn.Module):
    """The Nature-DQN torso (Mnih et al. 2015) on ``uint8`` frame stacks: 3 convs + 512 units.

    Inputs are scaled by 1/255; weights are orthogonal with gain ``sqrt(2)`` (CleanRL).

    Args:
        in_channels: Stacked frames (4 for the standard Atari preprocessing).
        features: Width of the final hidden layer.

    Example:
        >>> import torch
        >>> from torchfrag.algos.common import NatureCNN
        >>> NatureCNN(4)(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape
        torch.Size([2, 512])
    """

    def __init__(self, in_channels: int = 4, features: int = 512) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(in_channels, 32, 8, stride=4), nn.ReLU(),
            nn.Conv2d(32, 64, 4, stride=2), nn.ReLU(),
            nn.Conv2d(64, 64, 3, stride=1), nn.ReLU(),
            nn.Flatten(),
            nn.Linear(64 * 7 * 7, features), nn.ReLU(),
        )
        for m in self.net:
            _ortho(m, math.sqrt(2))
        self.out_features = features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-3]
        y = self.net(x.reshape(-1, *x.shape[-3:]).float() / 255.0)
        return y.reshape(*lead, self.out_features)


def make_cnn_actor_critic(env: EnvBase, features: int = 512) -> tuple[ProbabilisticActor, ValueOperator]:
    """Actor and critic on one shared :class:`NatureCNN` torso (CleanRL's Atari PPO network).

    The policy head is a categorical over the discrete actions (gain 0.01),
    the value head a linear layer (gain 1); both read the torso's ``"hidden"`` output.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import Categorical, Composite, Unbounded
        >>> from torchfrag.algos.common import make_cnn_actor_critic
        >>> class FakeEnv:  # just the specs make_cnn_actor_critic reads
        ...     batch_size = torch.Size([2])
        ...     observation_spec = Composite(observation=Unbounded((2, 4, 84, 84)), shape=(2,))
        ...     action_spec_unbatched = Categorical(6)
        >>> actor, critic = make_cnn_actor_critic(FakeEnv())
        >>> td = TensorDict(observation=torch.zeros(2, 4, 84, 84, dtype=torch.uint8), batch_size=[2])
        >>> actor(td)["action"].shape, critic(td)["state_value"].shape
        (torch.Size([2]), torch.Size([2, 1]))
    """
    spec = env.action_spec_unbatched
    n = int(spec.space.n)
    trunk = TensorDictModule(NatureCNN(env.observation_spec["observation"].shape[-3], features),
                             ["observation"], ["hidden"])
    logits = nn.Linear(features, n)
    _ortho(logits, 0.01)
    value = nn.Linear(features, 1)
    _ortho(value, 1.0)
    policy_head = ProbabilisticActor(TensorDictModule(logits, ["hidden"], ["logits"]),
                                     in_keys=["logits"], spec=spec,
                                     distribution_class=torch.distributions.Categorical,
                                     return_log_prob=True)
    shared = ActorValueOperator(trunk, policy_head, ValueOperator(value, in_keys=["hidden"]))
    return shared.get_policy_operator(), shared.get_value_operator()


class TargetUpdate(Fragment):
    """Steps a TorchRL target-network updater (``SoftUpdate``/``HardUpdate``) ``steps`` times.

    Placed after the :class:`~torchfrag.fragments.Learn` fragment it follows
    (it takes and returns that fragment's metrics, which orders it in the
    graph). ``steps`` is the number of gradient steps per learn call, so a
    ``HardUpdate`` interval and a ``SoftUpdate`` tau keep their per-gradient-step meaning.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.modules import QValueActor
        >>> from torchrl.objectives import DQNLoss, SoftUpdate
        >>> from torchfrag.algos.common import TargetUpdate
        >>> loss = DQNLoss(QValueActor(torch.nn.Linear(4, 2), in_keys=["observation"],
        ...                            action_space="categorical"), action_space="categorical")
        >>> upd = TargetUpdate(SoftUpdate(loss, tau=0.5), loss)
        >>> upd(TensorDict(loss=torch.tensor(1.0))).keys() == {"loss"}
        True
    """

    impure = True

    def __init__(self, updater: Any, loss: nn.Module, steps: int = 1) -> None:
        super().__init__((), (), owns=loss)
        self.updater = updater
        self.steps = int(steps)

    def describe(self) -> str:
        return f"TargetUpdate({type(self.updater).__name__} x{self.steps})"

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        for _ in range(self.steps):
            self.updater.step()
        return tensordict


class Anneal(Fragment):
    """Anneals an exploration module (e.g. ``EGreedyModule``) by the frames in each batch.

    Passes the batch through unchanged; calls ``module.step(batch.numel())``.
    The current value of ``attr`` is added to the batch as ``key`` (a metric).

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import Categorical
        >>> from torchrl.modules import EGreedyModule
        >>> from torchfrag.algos.common import Anneal
        >>> eg = EGreedyModule(Categorical(2), eps_init=1.0, eps_end=0.0, annealing_num_steps=10)
        >>> _ = Anneal(eg)(TensorDict(x=torch.zeros(5), batch_size=[5]))
        >>> round(float(eg.eps), 2)
        0.5
    """

    impure = True

    def __init__(self, module: nn.Module) -> None:
        super().__init__((), (), owns=None, reads=None)
        self.module = module

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        self.module.step(int(tensordict.numel()))
        return tensordict


class RandomActor(TensorDictModuleBase):
    """Uniformly random actions from ``env``'s action spec (replay warm-up).

    Example:
        >>> from torchfrag.algos.ppo import make_env
        >>> from torchfrag.algos.common import RandomActor
        >>> env = make_env("Pendulum-v1", 3)
        >>> RandomActor(env)(env.reset())["action"].shape
        torch.Size([3, 1])
    """

    def __init__(self, env: EnvBase) -> None:
        super().__init__()
        self.in_keys = ["observation"]
        self.out_keys = list(env.action_keys)
        self.__dict__["_spec"] = env.full_action_spec_unbatched

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict.update(self._spec.rand(tensordict.batch_size))


def prefill(rollout: Rollout, env: EnvBase, frames: int, write: Fragment) -> int:
    """Fills a replay buffer with ``frames`` random-action transitions before training.

    The random rollout continues from, and hands back to, ``rollout``'s env
    state, and its frames and episodes count as ``rollout``'s.

    Returns:
        Frames written.
    """
    if frames <= 0:
        return 0
    n = max(1, int(env.batch_size.numel()))
    warm = Rollout(RandomActor(env), env, steps=max(1, math.ceil(frames / n)))
    batch = warm(rollout._carry)  # noqa: SLF001 - carry handed over between rollouts
    write(batch.select(*write.in_keys) if write.in_keys else batch)
    rollout._carry = warm._carry  # noqa: SLF001
    rollout.frames += warm.frames
    nxt = batch.get("next")
    rollout.stats.update(nxt.get("reward"), nxt.get("done"))
    logger.debug("prefilled the replay buffer with %d random frames", warm.frames)
    return warm.frames


def actor_critic_learn(actor: ProbabilisticActor, critic: ValueOperator, cfg: Any,
                       rmsprop_eps: float) -> Learn:
    """The learn fragment A2C and IMPALA share: one pass of ``A2CLoss`` per batch.

    ``cfg`` provides ``entropy_coef``, ``critic_coef``, ``loss_critic_type``,
    ``optimizer`` (``"adam"`` or ``"rmsprop"``), ``lr``, ``max_grad_norm``,
    ``anneal_lr``, ``total_frames`` and ``frames_per_iteration``; the two
    algorithms' published recipes differ only in RMSprop's ``eps``.
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
    iterations = max(1, cfg.total_frames // cfg.frames_per_iteration)
    return Learn(
        loss, opt, epochs=1, max_grad_norm=cfg.max_grad_norm,
        anneal_steps=iterations if cfg.anneal_lr else None,
        select_keys=["observation", "action", "advantage", "value_target"],
    )


@dataclass
class AlgoFactory:
    """Picklable factory of an algorithm's loop, for the distribution policies.

    ``factory(env_slice=None)`` seeds torch, builds a :class:`~torchfrag.envs.PoolEnv`
    with all envs (or only the slice's, each seeded as in the full pool) and
    the algorithm's networks and loop (``build_<algo>(env, cfg)``), so every
    worker starts from the same weights as the driver.

    Example:
        >>> from torchfrag.algos.common import AlgoFactory
        >>> loop = AlgoFactory("impala", "CartPole-v1", {"num_envs": 2, "steps": 4})()
        >>> type(loop).__name__
        'IMPALALoop'
        >>> loop.close()
    """

    algo: str
    env_id: str
    cfg: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    env_options: dict[str, Any] = field(default_factory=dict)

    def config(self) -> Any:
        """The algorithm's config object."""
        from torchfrag.algos import get_algo

        return get_algo(self.algo)[0].coerce(self.cfg)

    @property
    def num_envs(self) -> int:
        """Envs of the whole run."""
        return int(self.config().num_envs)

    def __call__(self, env_slice: Any = None) -> nn.Module:
        import importlib

        from torchfrag.algos import ALGOS
        from torchfrag.envs import PoolEnv

        cfg = self.config()
        torch.manual_seed(int(self.seed))
        opts = dict(self.env_options)
        if env_slice is None:
            env = PoolEnv(self.env_id, num_envs=cfg.num_envs, seed=int(self.seed), info_keys=[], **opts)
        else:
            from torchfrag.policies.factory import slice_seeds

            env = PoolEnv(self.env_id, num_envs=env_slice.count,
                          seed=slice_seeds(int(self.seed), env_slice), info_keys=[], **opts)
        build = getattr(importlib.import_module(ALGOS[self.algo]), f"build_{self.algo}")
        return build(env, cfg)


class LoopBase(nn.Module):
    """Checkpoint and close plumbing shared by the algorithm loops.

    Subclasses set ``env``, ``rollout``, ``learn`` and list their networks in
    ``MODELS`` (attribute names), exactly as :class:`~torchfrag.algos.ppo.PPOLoop`.
    """

    MODELS: ClassVar[tuple[str, ...]] = ()

    def extra_state(self) -> dict[str, Any]:
        """Algorithm-specific counters to checkpoint (exploration, target updaters)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restores :meth:`extra_state`."""

    def training_state(self) -> dict[str, Any]:
        """Everything needed to resume: weights, optimizer, counters."""
        return {"model": {m: getattr(self, m).state_dict() for m in self.MODELS},
                "learn": self.learn.state_dict_extra(), "frames": self.rollout.frames,
                "extra": self.extra_state()}

    def load_training_state(self, state: dict[str, Any]) -> None:
        """Restores :meth:`training_state` (the env restarts from a reset)."""
        for m in self.MODELS:
            getattr(self, m).load_state_dict(state["model"][m])
        self.learn.load_state_dict_extra(state["learn"])
        self.load_extra_state(state.get("extra", {}))
        self.rollout.frames = int(state["frames"])
        self.rollout.reset()

    def close(self) -> None:
        """Closes the env."""
        if not getattr(self.env, "is_closed", True):
            self.env.close()
