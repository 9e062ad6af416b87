"""The :class:`Act` fragment: runs a TorchRL actor to pick actions."""
from __future__ import annotations

import torch
from tensordict import TensorDictBase
from tensordict.nn import (InteractionType, ProbabilisticTensorDictModule,
                           ProbabilisticTensorDictSequential, TensorDictModule)
from torch import nn
from tensordict.nn.probabilistic import interaction_type
from torchrl.envs.utils import set_exploration_type

from torchfrag.fragments.base import Fragment

__all__ = ["Act"]

_EXPLORATION = {
    "random": InteractionType.RANDOM,
    "deterministic": InteractionType.DETERMINISTIC,
    "mode": InteractionType.MODE,
    "mean": InteractionType.MEAN,
}


class Act(Fragment):
    """Wraps any TorchRL actor (e.g. ``ProbabilisticActor``) as a fragment.

    The actor runs without gradients, with the given exploration type. Its
    parameters are *read* (the learn fragment that trains them owns them),
    which :func:`torchfrag.capture` records as a weight-sync edge.

    Fast path: for the common ``ProbabilisticActor(TensorDictModule(net), ...)``
    with random exploration, the fragment calls the network, builds the
    distribution, samples (``rsample`` when available, as TensorDict does) and
    computes the log-probability itself, skipping TensorDict's per-call
    dispatch; the results are the same tensors (tested). ``fast=False`` always
    calls the actor.

    Args:
        actor: A TensorDict module with ``in_keys``/``out_keys``.
        exploration: ``"random"`` (sample), ``"deterministic"``, ``"mode"`` or ``"mean"``.
        fast: Allow the fast path described above.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchfrag.fragments import Act
        >>> act = Act(TensorDictModule(torch.nn.Linear(4, 1), ["observation"], ["action"]))
        >>> act(TensorDict(observation=torch.zeros(3, 4), batch_size=[3]))["action"].shape
        torch.Size([3, 1])
    """

    role = "act"

    def __init__(self, actor: nn.Module, exploration: str = "random", fast: bool = True) -> None:
        if exploration not in _EXPLORATION:
            raise ValueError(f"exploration must be one of {sorted(_EXPLORATION)}, got {exploration!r}")
        super().__init__(actor.in_keys, actor.out_keys, reads=actor)
        self.actor = actor
        self.exploration = exploration
        self._itype = _EXPLORATION[exploration]
        self._fast = _fast_plan(actor) if fast and exploration == "random" else None

    def describe(self) -> str:
        return f"Act({type(self.actor).__name__}, {self.exploration})"

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        # Contexts are entered only when not already in force (a Rollout sets them once).
        if self._fast is not None:
            if torch.is_grad_enabled():
                with torch.no_grad():
                    return self._fast(tensordict)
            return self._fast(tensordict)
        if torch.is_grad_enabled() or interaction_type() is not self._itype:
            with torch.no_grad(), set_exploration_type(self._itype):
                return self.actor(tensordict)
        return self.actor(tensordict)


def _fast_plan(actor: nn.Module):
    """A direct implementation of ``actor`` under random exploration, or ``None``."""
    if not isinstance(actor, ProbabilisticTensorDictSequential):
        return None
    mods = list(actor.module)
    if len(mods) != 2:
        return None
    body, prob = mods
    if type(body) not in (TensorDictModule,) or body.method is not None or body.method_kwargs:
        return None
    if not isinstance(prob, ProbabilisticTensorDictModule) or getattr(prob, "safe", False):
        return None
    if prob.num_samples is not None or len(prob.out_keys) != (2 if prob.return_log_prob else 1):
        return None
    if type(prob).forward not in (ProbabilisticTensorDictModule.forward,) and \
            type(prob).__mro__[1].forward is not ProbabilisticTensorDictModule.forward:
        return None
    if list(body.out_keys) != list(prob.in_keys):
        return None
    if not all(isinstance(k, str) for k in [*body.in_keys, *body.out_keys, *prob.out_keys]):
        return None
    net = body.module
    in_keys = list(body.in_keys)
    param_keys = list(body.out_keys)
    dist_keys = [k[-1] if isinstance(k, tuple) else k for k in prob.dist_keys]
    dist_cls = prob.distribution_class
    # TorchRL's own distributions (TanhNormal, ...) may cache values between
    # sampling and log_prob; only torch's are reproduced exactly when a
    # log-probability is asked for. A sample alone (SAC's actor) is one rsample.
    log_prob = bool(prob.return_log_prob)
    if log_prob and not getattr(dist_cls, "__module__", "").startswith("torch.distributions"):
        return None
    dist_kwargs = dict(prob.distribution_kwargs)
    action_key, logp_key = prob.out_keys if log_prob else (prob.out_keys[0], None)
    squashed = None if log_prob else _tanh_normal_sampler(dist_cls, dist_kwargs, dist_keys)

    def forward(td: TensorDictBase) -> TensorDictBase:
        out = net(*[td.get(k) for k in in_keys])
        params = (out,) if isinstance(out, torch.Tensor) else tuple(out)
        action = squashed(*params) if squashed is not None else None
        if action is None:
            dist = dist_cls(**dict(zip(dist_keys, params)), **dist_kwargs)
            action = dist.rsample() if dist.has_rsample else dist.sample()
        for k, v in zip(param_keys, params):
            td.set(k, v)
        td.set(action_key, action)
        if log_prob:
            td.set(logp_key, dist.log_prob(action))
        return td

    # What a Rollout's direct step needs to run this plan on plain tensors (see Rollout).
    forward.tensors = (net, in_keys, param_keys, action_key, squashed) if squashed is not None else None
    return forward


def _tanh_normal_sampler(dist_cls: type, kwargs: dict, dist_keys: list[str]):
    """``TanhNormal(loc, scale, **kwargs).rsample()`` without building the distribution, or ``None``.

    TorchRL's ``TanhNormal`` (``tanh_loc=False``, ``safe_tanh=True``, its defaults; SAC's
    actor) samples ``loc + eps * scale`` with ``eps`` from
    ``torch.distributions.utils._standard_normal`` (``Normal.rsample``), squashes it with
    ``tanh`` clamped to ``1 - finfo.resolution`` (``SafeTanhTransform``) and, for bounds other
    than [-1, 1], maps it by ``(high + low) / 2 + (high - low) / 2 * y``
    (``AffineTransform``). The sampler does those operations in that order on the same
    random draw, so the actions are the same tensors, without the distribution objects
    (their construction was ~0.1 ms of the ~0.2 ms act step at batch 1 on one thread).
    Other parameters (a callable or broadcast scale) return ``None`` per call and the caller
    builds the distribution; other classes or options give no sampler at all.
    """
    from torch.distributions.utils import _standard_normal
    from torchrl.modules import TanhNormal

    if dist_cls is not TanhNormal or list(dist_keys) != ["loc", "scale"]:
        return None
    if set(kwargs) - {"low", "high", "event_dims", "tanh_loc", "safe_tanh", "upscale"}:
        return None
    if kwargs.get("tanh_loc", False) or not kwargs.get("safe_tanh", True):
        return None
    low, high = kwargs.get("low", -1.0), kwargs.get("high", 1.0)
    if not isinstance(low, torch.Tensor) or not isinstance(high, torch.Tensor):
        return None  # numbers: TorchRL's as_tensor dtype rules; keep its own path
    if not bool((high > low).all()):
        return None  # TorchRL raises; let it
    affine = bool((high != 1.0).any()) or bool((low != -1.0).any())
    shift, half = (high + low) / 2, (high - low) / 2
    moved: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def sample(loc: torch.Tensor, scale: torch.Tensor) -> torch.Tensor | None:
        if (not isinstance(scale, torch.Tensor) or scale.shape != loc.shape
                or scale.dtype != loc.dtype or scale.device != loc.device
                or torch._C._get_tracing_state()):
            return None
        eps = _standard_normal(loc.shape, dtype=loc.dtype, device=loc.device)
        x = loc + eps * scale
        lim = 1.0 - torch.finfo(x.dtype).resolution
        y = x.tanh().clamp(-lim, lim)
        if not affine:
            return y
        if loc.device not in moved:
            moved[loc.device] = (shift.to(loc.device), half.to(loc.device))
        a, b = moved[loc.device]
        return a + b * y

    return sample
