"""SAC (continuous actions) as a loop of fragments on SACLoss, a replay buffer and target critics.

The loop is ``rollout -> replay write -> replay sample -> learn -> target update``:

* :class:`~torchfrag.fragments.Rollout` samples a ``TanhNormal`` actor,
* :class:`~torchfrag.fragments.ReplayWrite`/:class:`~torchfrag.fragments.ReplaySample`
  fill and sample a TorchRL ``ReplayBuffer`` (``updates * batch_size`` samples per iteration),
* :class:`~torchfrag.fragments.Learn` takes ``updates`` gradient steps of TorchRL's
  ``SACLoss`` (twin Q-networks, learned temperature),
* :class:`~torchfrag.algos.fragments.TargetUpdate` steps a ``SoftUpdate`` of the target critics.

The buffer starts with ``learning_starts`` random-action transitions (CleanRL's recipe).

Example:
    >>> from torchfrag.algos.sac import SACConfig, make_sac
    >>> cfg = SACConfig(num_envs=2, steps=4, batch_size=8, updates=2, learning_starts=16, hidden=[16])
    >>> loop = make_sac("Pendulum-v1", cfg, seed=0)
    >>> sorted(k for k in loop().keys() if k.startswith("loss_"))
    ['loss_actor', 'loss_alpha', 'loss_qvalue']
    >>> loop.close()
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from tensordict import TensorDictBase
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictModuleBase
from torch import nn
from torchrl.data import LazyTensorStorage, ReplayBuffer
from torchrl.envs import EnvBase
from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
from torchrl.objectives import SoftUpdate

from torchfrag.algos.config import AlgoConfig, _is_real, _require
from torchfrag.algos.envs import is_discrete
from torchfrag.algos.fragments import TargetUpdate, ToDevice
from torchfrag.algos.loop import LoopBase
from torchfrag.algos.networks import WEIGHT_INITS, TanhBoundedScale, mlp
from torchfrag.algos.replay import REPLAY_KEYS as _REPLAY_KEYS
from torchfrag.algos.replay import prefill
from torchfrag.algos.sac_loss import FastSACLoss
from torchfrag.algos.sac_optim import CachedFusedAdam
from torchfrag.fragments import Learn, ReplaySample, ReplayWrite, Rollout

logger = logging.getLogger(__name__)

__all__ = ["ActOnDevice", "ForeachSoftUpdate", "SACConfig", "SACLoop", "build_sac", "make_sac", "make_sac_networks",
           "sac_param_groups"]


class ForeachSoftUpdate(SoftUpdate):
    """TorchRL's ``SoftUpdate`` (``target <- lerp(target, source, 1 - eps)``) in one ``_foreach_lerp_``.

    ``SoftUpdate.step`` walks the loss's parameter TensorDicts and lerps one
    tensor at a time: ~0.65 ms per step for SAC's twin 256x256 critics, ~6%
    of an iteration at one gradient step per frame. The same update on the
    flat lists of target and source tensors (gathered once; a checkpoint's
    ``load_state_dict`` copies into those same tensors) takes a fraction of it.

    Example:
        >>> import copy, torch
        >>> from torchrl.modules import QValueActor
        >>> from torchrl.objectives import DQNLoss, SoftUpdate
        >>> from torchfrag.algos.sac import ForeachSoftUpdate
        >>> net = QValueActor(torch.nn.Linear(2, 2), in_keys=["observation"], action_space="categorical")
        >>> a, b = (DQNLoss(copy.deepcopy(net), action_space="categorical", delay_value=True)
        ...         for _ in range(2))
        >>> for loss in (a, b):
        ...     with torch.no_grad():
        ...         _ = loss.value_network_params.apply(lambda p: p.data.add_(1.0))
        >>> SoftUpdate(a, tau=0.1).step(); ForeachSoftUpdate(b, tau=0.1).step()
        >>> targets = [x.target_value_network_params.values(True, True) for x in (a, b)]
        >>> all(torch.equal(x, y) for x, y in zip(*targets))
        True
    """

    _pairs: tuple[list[torch.Tensor], list[torch.Tensor]] | None = None

    def _gather(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        sources, targets = [], []
        for key, params in self._sources.items():
            target = self._targets.get(f"target_{key}")
            for name, p in params.items(True, True):
                t = target.get(name)
                if t.requires_grad:
                    raise RuntimeError("the target parameter is part of a graph.")
                sources.append(p.data)
                targets.append(t.data)
        return sources, targets

    def step(self) -> None:
        if not self.initialized:
            raise RuntimeError(f"{type(self).__name__} must be initialized (init_()) before step()")
        if self._pairs is None:
            self._pairs = self._gather()
        sources, targets = self._pairs
        torch._foreach_lerp_(targets, sources, 1.0 - self.eps)

#: ``SACConfig.matmul_dtype`` values and the dtype each gives ``FastSACLoss`` (``None``: the parameters').
MATMUL_DTYPES: dict[str, torch.dtype | None] = {"float32": None, "bfloat16": torch.bfloat16}


@dataclass
class SACConfig(AlgoConfig):
    """SAC hyper-parameters (defaults: a fast Pendulum-v1 recipe; MuJoCo: ``conf/algo/sac_mujoco.yaml``).

    Attributes:
        num_envs: Envs in the pool.
        steps: Env steps per env per iteration.
        updates: Gradient steps per iteration (update-to-data ratio: ``updates / (num_envs * steps)``).
        batch_size: Samples per gradient step.
        buffer_size: Replay capacity.
        learning_starts: Random-action transitions in the buffer before training.
        gamma: Discount.
        lr: Adam learning rate of the actor (and of the critics and the temperature unless
            ``critic_lr`` is given).
        critic_lr: Adam learning rate of the critics and the temperature (``None``: ``lr``);
            CleanRL's ``sac_continuous_action.py`` uses 1e-3 there and 3e-4 for the actor.
        total_frames: Training length.
        tau: Soft target update rate per gradient step.
        alpha_init: Initial entropy temperature.
        loss_function: Critic loss, ``"l2"`` or ``"smooth_l1"``.
        max_grad_norm: Gradient-norm clip (``None``: none).
        hidden: Hidden layer sizes of the actor and the Q-networks.
        weight_init: ``"orthogonal"`` (hidden gain ``sqrt(2)``, zero biases; the actor's
            output layer at gain 0.01) or ``"default"`` (PyTorch's ``nn.Linear`` init, CleanRL's).
        log_std_bounds: ``[min, max]``: the actor's log-std is ``tanh``-squashed into that range
            (:class:`~torchfrag.algos.networks.TanhBoundedScale`, CleanRL's ``[-5, 2]``);
            ``None``: TorchRL's ``NormalParamExtractor`` (a biased softplus, scale 1 at zero).
        adam_eps: Adam's epsilon (CleanRL and PyTorch: 1e-8).
        matmul_dtype: ``"float32"`` (default) or ``"bfloat16"``: the dtype of the networks' matrix
            products in the gradient step (parameters, gradients, Adam and the losses stay
            float32; acting stays float32). bfloat16 uses the bf16 matrix units of recent CPUs
            (AMX, AVX-512-BF16) and GPUs: a faster step, with ~3 significant digits in the
            products (``benchmarks/sac_update.py``; what it learns: ``docs/benchmarks.md``).
        device: Where the networks, the losses and the gradient steps run (``"cpu"``,
            ``"cuda"``, ``"cuda:1"``, ...). The env pool and the replay buffer stay on
            the CPU; each replay sample and each step's observations go to the device,
            the actions come back.
    """

    LIST_FIELDS: ClassVar[tuple[str, ...]] = ("hidden", "log_std_bounds")

    num_envs: int = 4
    steps: int = 16
    updates: int = 16
    batch_size: int = 128
    buffer_size: int = 1_000_000
    learning_starts: int = 1000
    gamma: float = 0.99
    lr: float = 1e-3
    critic_lr: float | None = None
    total_frames: int = 20_000
    tau: float = 0.005
    alpha_init: float = 1.0
    loss_function: str = "l2"
    max_grad_norm: float | None = None
    hidden: list[int] = field(default_factory=lambda: [64, 64])
    weight_init: str = "orthogonal"
    log_std_bounds: list[float] | None = None
    adam_eps: float = 1e-5
    matmul_dtype: str = "float32"
    device: str = "cpu"

    def validate(self, prefix: str = "algo.") -> None:
        """The shared checks, and ``device`` a torch device (an available one for CUDA).

        Example:
            >>> from torchfrag.algos.sac import SACConfig
            >>> SACConfig(device="gpu0").validate()
            Traceback (most recent call last):
            ...
            ValueError: algo.device must be a torch device such as 'cpu' or 'cuda:0', got 'gpu0'
        """
        super().validate(prefix)
        _require(isinstance(self.weight_init, str) and self.weight_init in WEIGHT_INITS,
                 f"{prefix}weight_init must be one of {list(WEIGHT_INITS)}", self.weight_init)
        if self.log_std_bounds is not None:
            bounds = list(self.log_std_bounds)
            _require(len(bounds) == 2 and all(_is_real(b) and math.isfinite(b) for b in bounds)
                     and bounds[0] < bounds[1],
                     f"{prefix}log_std_bounds must be [min, max] with finite min < max (or null)", bounds)
        _require(_is_real(self.adam_eps) and math.isfinite(self.adam_eps) and self.adam_eps > 0,
                 f"{prefix}adam_eps must be a finite number > 0", self.adam_eps)
        _require(isinstance(self.matmul_dtype, str) and self.matmul_dtype in MATMUL_DTYPES,
                 f"{prefix}matmul_dtype must be one of {sorted(MATMUL_DTYPES)}", self.matmul_dtype)
        if self.critic_lr is not None:
            _require(_is_real(self.critic_lr) and math.isfinite(self.critic_lr) and self.critic_lr > 0,
                     f"{prefix}critic_lr must be a finite number > 0 (or null: lr)", self.critic_lr)
        try:
            dev = torch.device(self.device)
        except (RuntimeError, TypeError):
            raise ValueError(f"{prefix}device must be a torch device such as 'cpu' or 'cuda:0', "
                             f"got {self.device!r}") from None
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"{prefix}device={self.device!r}: CUDA is not available on this machine")


def make_sac_networks(env: EnvBase, hidden: list[int], weight_init: str = "orthogonal",
                      log_std_bounds: list[float] | None = None) -> tuple[ProbabilisticActor, ValueOperator]:
    """A ``TanhNormal`` actor squashed into the action bounds and a Q(s, a) network.

    Args:
        env: The env (its action spec and ``observation`` size).
        hidden: Hidden layer sizes of both networks.
        weight_init: See :attr:`SACConfig.weight_init`.
        log_std_bounds: See :attr:`SACConfig.log_std_bounds`.

    Example:
        >>> from torchfrag.algos.envs import make_env
        >>> from torchfrag.algos.sac import make_sac_networks
        >>> actor, q = make_sac_networks(make_env("Pendulum-v1", 2), [16])
        >>> q.out_keys
        ['state_action_value']
    """
    spec = env.action_spec_unbatched
    obs_dim = env.observation_spec["observation"].shape[-1]
    act_dim = spec.shape[-1]
    head = (NormalParamExtractor(scale_lb=1e-4) if log_std_bounds is None
            else TanhBoundedScale(*log_std_bounds))
    body = TensorDictModule(nn.Sequential(mlp(obs_dim, 2 * act_dim, hidden, out_gain=0.01, init=weight_init),
                                          head),
                            ["observation"], ["loc", "scale"])
    actor = ProbabilisticActor(body, in_keys=["loc", "scale"], spec=spec,
                               distribution_class=TanhNormal,
                               distribution_kwargs={"low": spec.space.low, "high": spec.space.high},
                               return_log_prob=False)
    qnet = ValueOperator(mlp(obs_dim + act_dim, 1, hidden, out_gain=1.0, init=weight_init),
                         in_keys=["observation", "action"], out_keys=["state_action_value"])
    return actor, qnet


class SACLoop(LoopBase):
    """One SAC iteration (see the module docstring).

    Args:
        env: The training env (batched).
        actor: ``TanhNormal`` actor.
        qnet: Q(s, a) network (duplicated into twin critics by ``SACLoss``).
        cfg: Hyper-parameters.
    """

    MODELS = ("actor", "loss")

    def __init__(self, env: EnvBase, actor: ProbabilisticActor, qnet: ValueOperator,
                 cfg: SACConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.env = env
        self.actor = actor
        self.device = torch.device(cfg.device)
        on_cpu = self.device.type == "cpu"
        self.rollout = Rollout(actor if on_cpu else ActOnDevice(actor, self.device), env, steps=cfg.steps)
        self.buffer = ReplayBuffer(storage=LazyTensorStorage(cfg.buffer_size))
        self.write = ReplayWrite(self.buffer, in_keys=_REPLAY_KEYS)
        self.sample = ReplaySample(self.buffer, batch_size=cfg.updates * cfg.batch_size,
                                   out_keys=_REPLAY_KEYS)
        self.to_device = ToDevice(self.device)
        self.loss = FastSACLoss(actor, qnet, num_qvalue_nets=2, loss_function=cfg.loss_function,
                                alpha_init=cfg.alpha_init, delay_qvalue=True,
                                action_spec=env.action_spec_unbatched,
                                matmul_dtype=MATMUL_DTYPES[cfg.matmul_dtype])
        self.loss.make_value_estimator(gamma=cfg.gamma)
        # Adam (eps cfg.adam_eps), fused: one kernel for all parameters instead of a
        # Python loop over them (~0.6 -> ~0.25 ms per step for 256x256 networks on one CPU core),
        # its lists gathered once (CachedFusedAdam: the same values as Adam(fused=True)).
        # Two groups: the actor at lr, the critics and the temperature at critic_lr.
        optimizer = CachedFusedAdam(sac_param_groups(self.loss, cfg), eps=cfg.adam_eps)
        self.learn = Learn(self.loss, optimizer, lr=cfg.lr, epochs=1, minibatch_size=cfg.batch_size,
                           max_grad_norm=cfg.max_grad_norm, select_keys=_REPLAY_KEYS)
        self.updater = ForeachSoftUpdate(self.loss, tau=cfg.tau)
        self.target = TargetUpdate(self.updater, self.loss, steps=cfg.updates)
        prefill(self.rollout, env, cfg.learning_starts, self.write)

    def forward(self) -> TensorDictBase:
        batch = self.rollout()
        batch = self.write(batch.select(*_REPLAY_KEYS))
        sample = self.to_device(self.sample(batch))
        metrics = self.learn(sample)
        return self.target(metrics)


def sac_param_groups(loss: nn.Module, cfg: SACConfig) -> list[dict[str, Any]]:
    """The optimizer's parameter groups: the actor's at ``cfg.lr``, the rest (critics,
    temperature) at ``cfg.critic_lr`` (``cfg.lr`` when that is ``None``).

    Example:
        >>> from torchfrag.algos.sac import make_sac, sac_param_groups
        >>> loop = make_sac("Pendulum-v1", {"hidden": [8], "lr": 3e-4, "critic_lr": 1e-3})
        >>> [(len(g["params"]), g["lr"]) for g in sac_param_groups(loop.loss, loop.cfg)]
        [(4, 0.0003), (5, 0.001)]
    """
    actor, rest = [], []
    for name, p in loss.named_parameters():
        (actor if name.startswith("actor_network_params.") else rest).append(p)
    critic_lr = cfg.lr if cfg.critic_lr is None else cfg.critic_lr
    return [{"params": actor, "lr": cfg.lr}, {"params": rest, "lr": critic_lr}]


def make_sac(env_id: str, cfg: SACConfig | dict | None = None, seed: int = 0,
             env_options: dict[str, Any] | None = None) -> SACLoop:
    """Builds a :class:`SACLoop` for all envs (``AlgoFactory(..., algo="sac")()``, seeding torch first).

    Args:
        env_id: A registered env id with continuous actions.
        cfg: A :class:`SACConfig` or a mapping of its fields.
        seed: Seeds torch and the env pool.
        env_options: Extra env options for :func:`torchfrag.envs.make`.

    Example:
        >>> from torchfrag.algos.sac import make_sac
        >>> loop = make_sac("Pendulum-v1", {"num_envs": 2, "steps": 4, "learning_starts": 8})
        >>> len(loop.buffer)
        8
        >>> loop.close()
    """
    from torchfrag.algos.factory import AlgoFactory

    return AlgoFactory(env_id, SACConfig.coerce(cfg), seed=seed, env_options=dict(env_options or {}),
                       algo="sac")()


def build_sac(env: EnvBase, cfg: SACConfig) -> SACLoop:
    """Builds the networks and the loop on an existing env (used by :func:`make_sac` and the
    distribution policies' factories; seed torch before calling it)."""
    if is_discrete(env):
        env.close()
        raise ValueError(f"SAC needs continuous actions; the env has {env.action_spec_unbatched}")
    try:
        cfg.validate()
    except ValueError:
        env.close()
        raise
    actor, qnet = make_sac_networks(env, cfg.hidden, cfg.weight_init, cfg.log_std_bounds)
    device = torch.device(cfg.device)
    return SACLoop(env, actor.to(device), qnet.to(device), cfg)


class ActOnDevice(TensorDictModuleBase):
    """Runs an actor on ``device`` for an env on the CPU: observations go there, actions come back.

    Example:
        >>> import torch
        >>> from torchfrag.algos.envs import make_env
        >>> from torchfrag.algos.sac import ActOnDevice, make_sac_networks
        >>> env = make_env("Pendulum-v1", 3)
        >>> actor, _ = make_sac_networks(env, [8])
        >>> ActOnDevice(actor, torch.device("cpu"))(env.reset())["action"].shape
        torch.Size([3, 1])
    """

    def __init__(self, actor: TensorDictModuleBase, device: torch.device) -> None:
        super().__init__()
        self.actor = actor
        self.device = device
        self.in_keys = list(actor.in_keys)
        self.out_keys = ["action"]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        out = self.actor(tensordict.select(*self.in_keys).to(self.device, non_blocking=True))
        tensordict.set("action", out.get("action").to("cpu"))
        return tensordict
