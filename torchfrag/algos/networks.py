"""The networks the algorithms build: MLPs and the Nature CNN with CleanRL's orthogonal init.

* :func:`mlp` - an MLP, orthogonal weights (``sqrt(2)`` hidden gain, ``out_gain`` last),
* :class:`NatureCNN` - the Nature-DQN torso on ``uint8`` frame stacks,
* :func:`make_actor_critic` - separate actor and critic MLPs (PPO, A2C, IMPALA)
  for discrete or continuous actions, or the shared CNN torso on image stacks,
* :func:`make_cnn_actor_critic` - actor and critic heads on one :class:`NatureCNN`.

Example:
    >>> from torchfrag.algos.networks import mlp
    >>> mlp(4, 2, [8]).__class__.__name__
    'MLP'
"""
from __future__ import annotations

import math
from typing import Any

import torch
from tensordict.nn import AddStateIndependentNormalScale, TensorDictModule
from torch import nn
from torchrl.envs import EnvBase
from torchrl.modules import (MLP, ActorValueOperator, ConvNet, ProbabilisticActor, TanhNormal,
                             ValueOperator)

from torchfrag.algos.envs import is_discrete, is_image

__all__ = ["WEIGHT_INITS", "NatureCNN", "TanhBoundedScale", "make_actor_critic", "make_cnn_actor_critic", "mlp",
           "ortho_init"]


def ortho_init(layer: nn.Module, gain: float) -> None:
    """Orthogonal weights with ``gain`` and zero bias, for linear and conv layers (others untouched)."""
    if isinstance(layer, (nn.Linear, nn.Conv2d)):
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)


WEIGHT_INITS = ("orthogonal", "default")


def mlp(n_in: int, n_out: int, hidden: list[int], out_gain: float = 1.0,
        activation: type[nn.Module] = nn.ReLU, init: str = "orthogonal") -> MLP:
    """An MLP with orthogonal init (``sqrt(2)`` hidden gain, ``out_gain`` on the last layer).

    ``init="default"`` keeps PyTorch's own ``nn.Linear`` init instead (uniform in
    ``+-1/sqrt(fan_in)``, what CleanRL's SAC uses); ``out_gain`` is then unused.

    Example:
        >>> import torch
        >>> from torchfrag.algos.networks import mlp
        >>> mlp(3, 2, [16, 16])(torch.zeros(5, 3)).shape
        torch.Size([5, 2])
    """
    if init not in WEIGHT_INITS:
        raise ValueError(f"mlp: init must be one of {list(WEIGHT_INITS)}, got {init!r}")
    net = MLP(in_features=n_in, out_features=n_out, num_cells=list(hidden), activation_class=activation)
    if init == "default":
        return net
    linears = [m for m in net.modules() if isinstance(m, nn.Linear)]
    for lin in linears[:-1]:
        ortho_init(lin, math.sqrt(2))
    ortho_init(linears[-1], out_gain)
    return net


def _tanh_bounded_scale(x: torch.Tensor, lo: float, hi: float
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``loc``, ``scale`` and ``tanh(raw)`` of :class:`TanhBoundedScale`."""
    loc, raw = x.chunk(2, -1)
    th = raw.tanh()
    return loc, (lo + 0.5 * (hi - lo) * (th + 1.0)).exp(), th


class _TanhBoundedScaleFn(torch.autograd.Function):
    """:class:`TanhBoundedScale` as one autograd node (its five elementwise nodes, each with a
    backward call, cost more than they compute on an actor's ``[batch, 2 * actions]`` output)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, lo: float, hi: float) -> tuple[torch.Tensor, torch.Tensor]:
        loc, scale, th = _tanh_bounded_scale(x, lo, hi)
        ctx.save_for_backward(scale, th)
        ctx.half = 0.5 * (hi - lo)
        return loc, scale

    @staticmethod
    def backward(ctx: Any, g_loc: torch.Tensor | None, g_scale: torch.Tensor | None
                 ) -> tuple[torch.Tensor | None, None, None]:
        scale, th = ctx.saved_tensors
        return _tanh_bounded_scale_grad(g_loc, g_scale, scale, th, ctx.half), None, None


def _tanh_bounded_scale_grad(g_loc: torch.Tensor | None, g_scale: torch.Tensor | None, scale: torch.Tensor,
                             th: torch.Tensor, half: float) -> torch.Tensor:
    """The gradient of :class:`TanhBoundedScale`'s input from those of ``loc`` and ``scale``
    (``scale`` and ``th = tanh(raw)`` as the forward computed them, ``half = (max - min) / 2``)."""
    # d scale / d raw = scale * half * (1 - tanh(raw)^2)
    g_raw = torch.zeros_like(scale) if g_scale is None else g_scale * scale * half * (1.0 - th * th)
    g_loc = torch.zeros_like(scale) if g_loc is None else g_loc
    return torch.cat([g_loc, g_raw], -1)


class TanhBoundedScale(nn.Module):
    """Splits the last dimension into ``loc`` and a raw log-std, the log-std squashed into
    ``[log_std_min, log_std_max]`` by ``tanh``: ``scale = exp(min + (max - min) * (tanh(raw) + 1) / 2)``.

    The actor head of CleanRL's (and Haarnoja et al.'s reference) SAC, in the role of
    :class:`~tensordict.nn.NormalParamExtractor` (whose default maps the raw value through a
    biased softplus, starting at a scale of 1 with no upper bound). With near-zero raw
    outputs the scale starts at ``exp((min + max) / 2)`` (0.22 for ``[-5, 2]``). No parameters.

    Args:
        log_std_min: Lower bound of the log-std.
        log_std_max: Upper bound of the log-std (``> log_std_min``).

    Example:
        >>> import torch
        >>> from torchfrag.algos.networks import TanhBoundedScale
        >>> loc, scale = TanhBoundedScale(-5.0, 2.0)(torch.zeros(3, 4))
        >>> loc.shape, round(scale[0, 0].item(), 4)
        (torch.Size([3, 2]), 0.2231)
    """

    def __init__(self, log_std_min: float = -5.0, log_std_max: float = 2.0) -> None:
        super().__init__()
        lo, hi = float(log_std_min), float(log_std_max)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"TanhBoundedScale needs finite bounds with log_std_min < log_std_max, "
                             f"got [{log_std_min}, {log_std_max}]")
        self.log_std_min, self.log_std_max = lo, hi

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if torch.is_grad_enabled() and x.requires_grad:
            return _TanhBoundedScaleFn.apply(x, self.log_std_min, self.log_std_max)
        return _tanh_bounded_scale(x, self.log_std_min, self.log_std_max)[:2]

    def extra_repr(self) -> str:
        return f"log_std_min={self.log_std_min}, log_std_max={self.log_std_max}"


class NatureCNN(nn.Module):
    """The Nature-DQN torso (Mnih et al. 2015) on ``uint8`` frame stacks: 3 convs + 512 units.

    Built from TorchRL's :class:`~torchrl.modules.ConvNet` (32x8 stride 4,
    64x4 stride 2, 64x3 stride 1, ReLU, flattened) and
    :class:`~torchrl.modules.MLP` (one ReLU layer of ``features`` units), the
    layers of ``ConvNet.default_atari_dqn`` without its action head. Inputs
    are scaled by 1/255; weights are orthogonal with gain ``sqrt(2)``, biases
    zero (CleanRL). The layers are built and initialised in the order of the
    hand-written ``nn.Sequential`` this replaced, so a given seed gives the
    same weights as before.

    Args:
        in_channels: Stacked frames (4 for the standard Atari preprocessing; 3 for an RGB
            picture such as CarRacing's).
        features: Width of the final hidden layer.
        in_size: Height and width of the frames (84x84 Atari, 96x96 CarRacing): sets the
            width of the flattened conv output.

    Example:
        >>> import torch
        >>> from torchfrag.algos.networks import NatureCNN
        >>> NatureCNN(4)(torch.zeros(2, 4, 84, 84, dtype=torch.uint8)).shape
        torch.Size([2, 512])
        >>> NatureCNN(3, 256, in_size=(96, 96))(torch.zeros(2, 3, 96, 96, dtype=torch.uint8)).shape
        torch.Size([2, 256])
    """

    def __init__(self, in_channels: int = 4, features: int = 512,
                 in_size: tuple[int, int] = (84, 84)) -> None:
        super().__init__()
        kernels, strides = [8, 4, 3], [4, 2, 1]
        self.conv = ConvNet(in_features=in_channels, num_cells=[32, 64, 64], kernel_sizes=kernels,
                            strides=strides, activation_class=nn.ReLU)
        h, w = in_size
        for k, st in zip(kernels, strides):  # valid convolutions
            h, w = (h - k) // st + 1, (w - k) // st + 1
        if h < 1 or w < 1:
            raise ValueError(f"NatureCNN needs frames of at least 36x36, got {tuple(in_size)}")
        self.fc = MLP(in_features=64 * h * w, out_features=features, num_cells=[],
                      activation_class=nn.ReLU, activate_last_layer=True)
        for m in (*self.conv, *self.fc):
            ortho_init(m, math.sqrt(2))
        self.out_features = features
        self.register_load_state_dict_pre_hook(_rename_hand_written_keys)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # ConvNet folds any leading batch dimensions itself (and takes one unbatched frame stack).
        return self.fc(self.conv(x.float() / 255.0))


#: Parameter names of the hand-written ``nn.Sequential`` NatureCNN (``net.<i>``) -> these layers.
_HAND_WRITTEN_KEYS = {"net.0.": "conv.0.", "net.2.": "conv.2.", "net.4.": "conv.4.",
                      "net.7.": "fc.0."}


def _rename_hand_written_keys(module: nn.Module, state_dict: dict, prefix: str,
                              *args: object) -> None:
    """Loads checkpoints written before NatureCNN was built from ConvNet + MLP (same tensors)."""
    for old, new in _HAND_WRITTEN_KEYS.items():
        for suffix in ("weight", "bias"):
            key = prefix + old + suffix
            if key in state_dict:
                state_dict[prefix + new + suffix] = state_dict.pop(key)


def make_cnn_actor_critic(env: EnvBase, features: int = 512,
                          init_scale: float = 1.0) -> tuple[ProbabilisticActor, ValueOperator]:
    """Actor and critic on one shared :class:`NatureCNN` torso (CleanRL's Atari PPO network).

    The policy head is a categorical over the discrete actions (gain 0.01), or
    for continuous actions (CarRacing) a ``TanhNormal`` squashed into the action
    bounds with a state-independent scale starting at ``init_scale``, as
    :func:`make_actor_critic`'s; the value head is a linear layer (gain 1).
    All read the torso's ``"hidden"`` output.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import Categorical, Composite, Unbounded
        >>> from torchfrag.algos.networks import make_cnn_actor_critic
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
    frames = env.observation_spec["observation"].shape
    trunk = TensorDictModule(NatureCNN(frames[-3], features, in_size=(frames[-2], frames[-1])),
                             ["observation"], ["hidden"])
    value = nn.Linear(features, 1)
    ortho_init(value, 1.0)
    if is_discrete(env):
        logits = nn.Linear(features, int(spec.space.n))
        ortho_init(logits, 0.01)
        policy_head = ProbabilisticActor(TensorDictModule(logits, ["hidden"], ["logits"]),
                                         in_keys=["logits"], spec=spec,
                                         distribution_class=torch.distributions.Categorical,
                                         return_log_prob=True)
    else:
        if not init_scale > 0:
            raise ValueError(f"init_scale must be > 0, got {init_scale!r}")
        act_dim = spec.shape[-1]
        loc = nn.Linear(features, act_dim)
        ortho_init(loc, 0.01)
        net = nn.Sequential(loc, AddStateIndependentNormalScale(act_dim, scale_lb=1e-4,
                                                                init_value=math.log(init_scale)))
        policy_head = ProbabilisticActor(TensorDictModule(net, ["hidden"], ["loc", "scale"]),
                                         in_keys=["loc", "scale"], spec=spec,
                                         distribution_class=TanhNormal,
                                         distribution_kwargs={"low": spec.space.low,
                                                              "high": spec.space.high},
                                         return_log_prob=True)
    shared = ActorValueOperator(trunk, policy_head, ValueOperator(value, in_keys=["hidden"]))
    return shared.get_policy_operator(), shared.get_value_operator()


def make_actor_critic(env: EnvBase, hidden: list[int],
                      init_scale: float = 1.0) -> tuple[ProbabilisticActor, ValueOperator]:
    """Separate tanh-MLP actor and critic for ``env``'s action space.

    Discrete actions: a categorical policy over logits. Continuous actions: a
    ``TanhNormal`` squashed into the action bounds, with a state-independent
    scale (as TorchRL's and CleanRL's MuJoCo PPO) that starts at
    ``init_scale`` (the standard deviation before the squash; 1.0 as theirs).
    Image stacks (Atari, CarRacing): the shared Nature-CNN torso of :func:`make_cnn_actor_critic`.

    Example:
        >>> from torchfrag.algos.envs import make_env
        >>> from torchfrag.algos.networks import make_actor_critic
        >>> actor, critic = make_actor_critic(make_env("Pendulum-v1", 2), [16])
        >>> actor.out_keys
        ['loc', 'scale', 'action', 'action_log_prob']
    """
    if is_image(env):
        return make_cnn_actor_critic(env, init_scale=init_scale)
    obs_dim = env.observation_spec["observation"].shape[-1]
    spec = env.action_spec_unbatched
    if is_discrete(env):
        body = TensorDictModule(mlp(obs_dim, spec.space.n, hidden, 0.01, nn.Tanh), ["observation"], ["logits"])
        actor = ProbabilisticActor(body, in_keys=["logits"], spec=spec,
                                   distribution_class=torch.distributions.Categorical,
                                   return_log_prob=True)
    else:
        act_dim = spec.shape[-1]
        if not init_scale > 0:
            raise ValueError(f"init_scale must be > 0, got {init_scale!r}")
        net = nn.Sequential(mlp(obs_dim, act_dim, hidden, 0.01, nn.Tanh),
                            AddStateIndependentNormalScale(act_dim, scale_lb=1e-4,
                                                           init_value=math.log(init_scale)))
        body = TensorDictModule(net, ["observation"], ["loc", "scale"])
        actor = ProbabilisticActor(body, in_keys=["loc", "scale"], spec=spec,
                                   distribution_class=TanhNormal,
                                   distribution_kwargs={"low": spec.space.low, "high": spec.space.high},
                                   return_log_prob=True)
    critic = ValueOperator(mlp(obs_dim, 1, hidden, 1.0, nn.Tanh), in_keys=["observation"])
    return actor, critic
