"""SAC's losses in plain tensor operations: TorchRL's ``SACLoss`` without its per-call overhead.

TorchRL's :class:`~torchrl.objectives.SACLoss` builds, per call, several
TensorDicts, a ``TanhNormal`` distribution per actor pass, swaps the actor's
parameters in and out (``to_module``) and runs the twin critics through
``vmap``: ~9 ms of Python per gradient step on top of the arithmetic, more
than the arithmetic itself for SAC's 256x256 networks on a CPU core (profile
in ``docs/benchmarks.md``). :class:`FastSACLoss` is that class with another
``forward``: the same parameters (``actor_network_params``, the stacked
``qvalue_network_params`` and their targets, ``log_alpha``), the same state
dict, the same target-network updaters, the same outputs and, for the same
random draws, the same values and gradients (``tests/test_sac_loss.py`` checks
both against ``SACLoss``). The twin critics run as one batched MLP on their
stacked ``[2, out, in]`` weights (``baddbmm``), the actor as its linear layers
on its parameters, the ``TanhNormal`` sample and log-probability from the
pre-tanh value, the TD(0) target as one expression.

It covers what torchfrag's SAC builds (SAC v2: no value network, TD(0)
targets, mean reduction, no prioritized-replay weights) with networks that are
``nn.Sequential`` trees of ``nn.Linear`` layers and parameter-free modules;
anything else is refused when the loss is built.

Example:
    >>> import torch
    >>> from torchfrag.algos.envs import make_env
    >>> from torchfrag.algos.sac import make_sac_networks
    >>> from torchfrag.algos.sac_loss import FastSACLoss
    >>> env = make_env("Pendulum-v1", 2)
    >>> actor, qnet = make_sac_networks(env, [16])
    >>> loss = FastSACLoss(actor, qnet, num_qvalue_nets=2, delay_qvalue=True,
    ...                    action_spec=env.action_spec_unbatched)
    >>> loss.make_value_estimator(gamma=0.99)
    >>> batch = env.rollout(4, actor, break_when_any_done=False).reshape(-1)
    >>> sorted(loss(batch).keys())
    ['alpha', 'entropy', 'loss_actor', 'loss_alpha', 'loss_qvalue']
"""
from __future__ import annotations

import math
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.modules.distributions.continuous import TanhNormal
from torchrl.objectives import SACLoss
from torchrl.objectives.utils import distance_loss
from torchrl.objectives.value import TD0Estimator

from torchfrag.algos.networks import TanhBoundedScale, _tanh_bounded_scale, _tanh_bounded_scale_grad
from torchfrag.algos.relu_mlp import relu_mlp, relu_mlp_split
from torchfrag.envs._torchrl_compat import new_tensordict

__all__ = ["FastSACLoss", "bounded_squashed_sample", "squashed_gaussian"]

_HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)

# One step of a network plan: ("linear", weight key, bias key or None) or ("call", module).
_Step = tuple[str, Any, Any]


def _plan(module: nn.Module, params: TensorDictBase, what: str) -> list[_Step]:
    """The leaves of a ``Sequential`` tree in call order, linear layers mapped to their keys in ``params``."""
    keys = [k if isinstance(k, tuple) else (k,) for k in params.keys(True, True)]
    steps: list[_Step] = []

    def walk(mod: nn.Module, path: tuple[str, ...]) -> None:
        children = list(mod.named_children())
        if isinstance(mod, nn.Linear):
            found = {}
            for leaf in ("weight", "bias"):
                suffix = (*path, leaf)
                hits = [k for k in keys if k[-len(suffix):] == suffix]
                if len(hits) > 1:
                    raise ValueError(f"FastSACLoss: {what} parameter {'.'.join(suffix)} is ambiguous: {hits}")
                found[leaf] = hits[0] if hits else None
            if found["weight"] is None:
                raise ValueError(f"FastSACLoss: {what} has no parameter for layer {'.'.join(path)}")
            steps.append(("linear", found["weight"], found["bias"]))
        elif not any(True for _ in mod.parameters()):
            steps.append(("call", mod, None))  # activations, NormalParamExtractor: no weights to map
        elif isinstance(mod, nn.Sequential):
            for name, child in children:
                walk(child, (*path, name))
        else:
            raise ValueError(f"FastSACLoss needs nn.Sequential networks of nn.Linear and parameter-free "
                             f"layers; {what} has {type(mod).__name__} at {'.'.join(path) or 'its root'}")

    walk(module, ())
    return steps


def _fuse(steps: list[_Step]) -> list[_Step]:
    """Runs of ``linear (ReLU linear)*`` become one ``("mlp", [(weight key, bias key), ...], None)`` step,
    computed by :func:`~torchfrag.algos.relu_mlp.relu_mlp` (one autograd node instead of ~3 per layer)."""
    fused: list[_Step] = []
    i = 0
    while i < len(steps):
        if steps[i][0] != "linear":
            fused.append(steps[i])
            i += 1
            continue
        layers = [steps[i][1:]]
        i += 1
        while (i + 1 < len(steps) and steps[i][0] == "call" and type(steps[i][1]) is nn.ReLU
               and steps[i + 1][0] == "linear"):
            layers.append(steps[i + 1][1:])
            i += 2
        fused.append(("mlp", layers, None))
    return fused


def _resolve(steps: list[_Step], params: TensorDictBase) -> list[tuple[str, Any]]:
    """``steps`` bound to tensors: ``("mlp", [(weight, bias), ...])`` or ``("call", callable)``.

    The ``TensorDict`` look-ups (~8 us each, ~30 per loss call) are done once
    here; the tensors are the parameters themselves, so in-place updates (optimizer steps, target lerps, ``load_state_dict``)
    show through. Parameter-free modules without hooks are bound to their
    ``forward`` (``nn.Module.__call__`` costs more than a ``NormalParamExtractor`` computes).
    """
    bound: list[tuple[str, Any]] = []
    for kind, a, _ in steps:
        if kind == "mlp":
            layers = [(params.get(w), params.get(b) if b is not None else None) for w, b in a]
            bound.append(("mlp", layers))
        elif a._forward_hooks or a._forward_pre_hooks:
            bound.append(("call", a))
        else:
            bound.append(("call", a.forward))
    return bound


def _run(bound: list[tuple[str, Any]], x: torch.Tensor, dtype: torch.dtype | None = None,
         cache: dict | None = None, param_rows: int | None = None,
         input_grad_from: tuple[int, int] | None = None) -> Any:
    first = True
    for kind, a in bound:
        if kind == "mlp":  # input_grad_from: of the network's input, so the first layers only
            x = relu_mlp(x, a, dtype, cache, param_rows, input_grad_from if first else None)
        else:
            x = a(x)
        first = False
    return x


def _squashed_forward(loc: torch.Tensor, scale: torch.Tensor, eps: torch.Tensor, act_scale: torch.Tensor | None,
                      act_loc: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The action, its log-probability, the clamped and the plain ``tanh`` of the pre-tanh value."""
    pre = loc + scale * eps
    # log N(pre; loc, scale) - log|d tanh(pre)/d pre| - log|affine scale|, summed over the action.
    log_prob = (-0.5 * eps.pow(2) - scale.log() - _HALF_LOG_2PI
                - 2.0 * (_LOG_2 - pre - nn.functional.softplus(-2.0 * pre)))
    th = pre.tanh()
    lim = 1.0 - torch.finfo(pre.dtype).resolution  # TorchRL's safetanh_noeps
    squashed = th.clamp(-lim, lim)
    action = squashed
    if act_scale is not None:
        action = squashed * act_scale + act_loc
        log_prob = log_prob - act_scale.abs().log()
    return action, log_prob.sum(-1), squashed, th


class _SquashedGaussian(torch.autograd.Function):
    """:func:`squashed_gaussian` as one autograd node (the ~15 elementwise nodes of its formula,
    each with its own saved tensors and backward call, cost more than they compute at SAC's sizes)."""

    @staticmethod
    def forward(ctx: Any, loc: torch.Tensor, scale: torch.Tensor, eps: torch.Tensor,
                act_scale: torch.Tensor | None, act_loc: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        action, log_prob, squashed, th = _squashed_forward(loc, scale, eps, act_scale, act_loc)
        ctx.save_for_backward(scale, eps, squashed, th, act_scale)
        return action, log_prob

    @staticmethod
    def backward(ctx: Any, g_action: torch.Tensor | None, g_log_prob: torch.Tensor | None
                 ) -> tuple[torch.Tensor | None, ...]:
        d_pre, d_scale = _squashed_grad(g_action, g_log_prob, *ctx.saved_tensors)
        if d_pre is None:
            return None, None, None, None, None
        return (d_pre if ctx.needs_input_grad[0] else None, d_scale if ctx.needs_input_grad[1] else None,
                None, None, None)


def _squashed_grad(g_action: torch.Tensor | None, g_log_prob: torch.Tensor | None, scale: torch.Tensor,
                   eps: torch.Tensor, squashed: torch.Tensor, th: torch.Tensor, act_scale: torch.Tensor | None
                   ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The gradients of ``loc`` (that of the pre-tanh value) and ``scale`` from those of the
    action and the log-probability (the other tensors as :func:`_squashed_forward` made them)."""
    d_pre = None
    if g_action is not None:  # d action / d pre: the affine scale times tanh' (from the clamped value, as TorchRL)
        d_pre = g_action * (1.0 - squashed.pow(2))
        if act_scale is not None:
            d_pre = d_pre * act_scale
    g_lp = None
    if g_log_prob is not None:
        # d/d pre of -2 (log 2 - pre - softplus(-2 pre)) is 2 tanh(pre); d/d scale of -log(scale) is -1/scale
        g_lp = g_log_prob.unsqueeze(-1)
        d_lp = 2.0 * g_lp * th
        d_pre = d_lp if d_pre is None else d_pre + d_lp
    if d_pre is None:
        return None, None
    d_scale = d_pre * eps
    if g_lp is not None:
        d_scale = d_scale - g_lp / scale
    return d_pre, d_scale


def squashed_gaussian(loc: torch.Tensor, scale: torch.Tensor, eps: torch.Tensor,
                      act_scale: torch.Tensor | None = None, act_loc: torch.Tensor | None = None
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """``TanhNormal(loc, scale)``'s reparameterised sample for the draw ``eps`` and its log-probability.

    The sample is ``tanh(loc + scale * eps)`` (clamped inside (-1, 1) as TorchRL's
    ``safetanh_noeps``), mapped onto ``act_loc +- act_scale`` when those are given; the
    log-probability is summed over the last dimension. With gradients it is one autograd
    node with a hand-written backward (the same gradients as the formula's own,
    ``tests/test_sac_optim.py``).

    Args:
        loc: ``[..., A]`` means of the pre-tanh Gaussian.
        scale: ``[..., A]`` standard deviations (> 0).
        eps: ``[..., A]`` standard normal draws.
        act_scale: ``[A]`` half-widths of the action box (``None``: the box is (-1, 1)).
        act_loc: ``[A]`` centres of the action box (with ``act_scale``).

    Returns:
        ``(action [..., A], log_prob [...])``.

    Example:
        >>> import torch
        >>> from torchfrag.algos.sac_loss import squashed_gaussian
        >>> a, lp = squashed_gaussian(torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2, 3))
        >>> a.abs().max().item(), lp.shape
        (0.0, torch.Size([2]))
    """
    if torch.is_grad_enabled() and (loc.requires_grad or scale.requires_grad):
        return _SquashedGaussian.apply(loc, scale, eps, act_scale, act_loc)
    return _squashed_forward(loc, scale, eps, act_scale, act_loc)[:2]


class _BoundedSquashedSample(torch.autograd.Function):
    """The actor's :class:`~torchfrag.algos.networks.TanhBoundedScale` head and the squashed-Gaussian
    sample with its log-probability, on the next observations' rows (constants) and the replayed
    observations' rows (differentiable) at once: one set of ~25 small operations instead of one
    per batch (each a dispatch that costs more than it computes at SAC's sizes) and one autograd
    node instead of two. The rows are stacked next observations first, as ``SACLoss`` draws their
    noise first; the backward runs on the replayed rows alone.
    """

    @staticmethod
    def forward(ctx: Any, head_out: torch.Tensor, tail_out: torch.Tensor, eps: torch.Tensor, lo: float, hi: float,
                act_scale: torch.Tensor | None, act_loc: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        n, m = tail_out.shape[-2], head_out.shape[-2]
        loc, scale, th_s = _tanh_bounded_scale(torch.cat([tail_out, head_out], -2), lo, hi)
        action, log_prob, squashed, th = _squashed_forward(loc, scale, eps, act_scale, act_loc)
        ctx.save_for_backward(*(t.narrow(-2, n, m) for t in (scale, eps, squashed, th, th_s)), act_scale)
        ctx.half = 0.5 * (hi - lo)
        next_action, next_log_prob = action.narrow(-2, 0, n), log_prob.narrow(-1, 0, n)
        ctx.mark_non_differentiable(next_action, next_log_prob)
        return action.narrow(-2, n, m), log_prob.narrow(-1, n, m), next_action, next_log_prob

    @staticmethod
    def backward(ctx: Any, g_action: torch.Tensor | None, g_log_prob: torch.Tensor | None, *_next: Any
                 ) -> tuple[torch.Tensor | None, ...]:
        scale, eps, squashed, th, th_s, act_scale = ctx.saved_tensors
        d_pre, d_scale = _squashed_grad(g_action, g_log_prob, scale, eps, squashed, th, act_scale)
        g_out = None if d_pre is None else _tanh_bounded_scale_grad(d_pre, d_scale, scale, th_s, ctx.half)
        return g_out, None, None, None, None, None, None


def bounded_squashed_sample(head_out: torch.Tensor, tail_out: torch.Tensor, eps: torch.Tensor, lo: float, hi: float,
                            act_scale: torch.Tensor | None = None, act_loc: torch.Tensor | None = None
                            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``TanhBoundedScale(lo, hi)`` then :func:`squashed_gaussian`, on two batches of raw actor outputs at once.

    Args:
        head_out: ``[m, 2A]`` raw outputs whose samples are differentiated (the replayed observations').
        tail_out: ``[n, 2A]`` raw outputs whose samples are constants (the next observations').
        eps: ``[n + m, A]`` standard normal draws, the ``tail_out`` rows' first.
        lo: The head's ``log_std_min``.
        hi: The head's ``log_std_max``.
        act_scale: As for :func:`squashed_gaussian`.
        act_loc: As for :func:`squashed_gaussian`.

    Returns:
        ``(action [m, A], log_prob [m], next_action [n, A], next_log_prob [n])``: what the head and
        :func:`squashed_gaussian` give on each batch (the same values, ``tests/test_sac_loss.py``).

    Example:
        >>> import torch
        >>> from torchfrag.algos.sac_loss import bounded_squashed_sample
        >>> a, lp, na, nlp = bounded_squashed_sample(torch.zeros(2, 6), torch.zeros(4, 6), torch.zeros(6, 3), -5.0, 2.0)
        >>> a.shape, lp.shape, na.shape, nlp.shape
        (torch.Size([2, 3]), torch.Size([2]), torch.Size([4, 3]), torch.Size([4]))
    """
    if torch.is_grad_enabled() and head_out.requires_grad:
        return _BoundedSquashedSample.apply(head_out, tail_out, eps, lo, hi, act_scale, act_loc)
    n, m = tail_out.shape[-2], head_out.shape[-2]
    loc, scale, _ = _tanh_bounded_scale(torch.cat([tail_out, head_out], -2), lo, hi)
    action, log_prob = _squashed_forward(loc, scale, eps, act_scale, act_loc)[:2]
    return action.narrow(-2, n, m), log_prob.narrow(-1, n, m), action.narrow(-2, 0, n), log_prob.narrow(-1, 0, n)


class _SACObjective(torch.autograd.Function):
    """SAC's three losses from the critics' outputs as one autograd node (the L2 critic loss).

    Inputs: ``both`` ``[N, 2n, 1]`` (the ``N`` critics on the replayed actions, then on the
    policy's), ``log_prob`` ``[n]`` of the policy's actions, ``log_alpha``, the TD ``target``
    ``[n]``, ``alpha`` (a constant, as ``SACLoss._alpha``) and ``target_entropy``. Outputs
    ``loss_qvalue``, ``loss_actor``, ``loss_alpha`` and the (constant) entropy. What ~15 small
    autograd nodes did (slices, ``min``, ``mse_loss``, sums, means, products), each with its
    own backward call, now is one forward and one hand-written backward.
    """

    @staticmethod
    def forward(ctx: Any, both: torch.Tensor, log_prob: torch.Tensor, log_alpha: torch.Tensor,
                target: torch.Tensor, alpha: torch.Tensor, target_entropy: Any
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        n = log_prob.shape[-1]
        out = both.squeeze(-1)
        diff = out[:, :n] - target  # the critics' TD errors on the replayed actions
        # distance_loss(q, target, "l2").sum(0).mean(): mean over the batch of the summed squares
        loss_q = diff.pow(2).sum(0).mean()
        q_pi, pick = out[:, n:].min(0)
        loss_actor = (alpha * log_prob - q_pi).mean()
        entropy_term = log_prob + target_entropy
        loss_alpha = (-log_alpha * entropy_term).mean()
        entropy = -log_prob.mean()
        ctx.save_for_backward(diff, pick, alpha, entropy_term)
        ctx.shape = both.shape
        ctx.mark_non_differentiable(entropy)
        return loss_q, loss_actor, loss_alpha, entropy

    @staticmethod
    def backward(ctx: Any, g_q: torch.Tensor, g_actor: torch.Tensor, g_alpha: torch.Tensor,
                 _g_entropy: Any) -> tuple[torch.Tensor | None, ...]:
        diff, pick, alpha, entropy_term = ctx.saved_tensors
        n = diff.shape[-1]
        g_both = g_log_prob = g_log_alpha = None
        if ctx.needs_input_grad[0]:
            g_both = diff.new_zeros(ctx.shape)
            g_both[:, :n, 0] = diff * (g_q * (2.0 / n))
            # min's gradient: to the critic it picked, per row (the index min(0) returned)
            g_both[:, n:, 0].scatter_(0, pick.unsqueeze(0), (-g_actor / n).expand(1, n))
        if ctx.needs_input_grad[1]:
            g_log_prob = (g_actor * alpha / n).expand(n)
        if ctx.needs_input_grad[2]:
            g_log_alpha = -g_alpha * entropy_term.mean()
        return g_both, g_log_prob, g_log_alpha, None, None, None


class FastSACLoss(SACLoss):
    """TorchRL's ``SACLoss`` (v2: twin critics, learned temperature) with a plain-tensor ``forward``.

    Takes ``SACLoss``'s arguments; refuses (``ValueError``) what its ``forward``
    does not cover: a value network, a non-``TanhNormal`` actor, reductions
    other than ``"mean"``, networks that are not ``nn.Sequential`` trees of
    ``nn.Linear`` and parameter-free layers, inputs other than
    ``["observation"]`` (actor) and ``["observation", "action"]`` (critic).
    The value estimator must be TD(0) (``make_value_estimator(gamma=...)``).

    ``matmul_dtype=torch.bfloat16`` runs the ReLU MLPs' matrix products in
    bfloat16 (float32 parameters, gradients and losses; see
    :func:`~torchfrag.algos.relu_mlp.relu_mlp`): a numerics change, off by default
    (``None``: the parameters' dtype).

    Example:
        >>> from torchfrag.algos.envs import make_env
        >>> from torchfrag.algos.sac import make_sac_networks
        >>> from torchfrag.algos.sac_loss import FastSACLoss
        >>> env = make_env("Pendulum-v1", 2)
        >>> actor, qnet = make_sac_networks(env, [16])
        >>> FastSACLoss(actor, qnet, reduction="sum")
        Traceback (most recent call last):
        ...
        ValueError: FastSACLoss supports reduction='mean' only, got 'sum'
    """

    def __init__(self, actor_network: Any, qvalue_network: Any, *args: Any,
                 matmul_dtype: torch.dtype | None = None, **kwargs: Any) -> None:
        if matmul_dtype not in (None, torch.float32, torch.bfloat16):
            raise ValueError(f"FastSACLoss: matmul_dtype must be None, torch.float32 or torch.bfloat16, "
                             f"got {matmul_dtype!r}")
        reduction = kwargs.get("reduction", "mean")
        if reduction not in (None, "mean"):
            raise ValueError(f"FastSACLoss supports reduction='mean' only, got {reduction!r}")
        super().__init__(actor_network, qvalue_network, *args, **kwargs)
        if self._version != 2:
            raise ValueError("FastSACLoss computes SAC v2 (no value_network); got a value network")
        actor_in = list(actor_network.in_keys)
        q_in = list(qvalue_network.in_keys)
        if actor_in != ["observation"] or q_in != ["observation", "action"]:
            raise ValueError(f"FastSACLoss needs actor in_keys ['observation'] and critic in_keys "
                             f"['observation', 'action']; got {actor_in} and {q_in}")
        body, head = actor_network.module[0], actor_network.module[-1]
        if getattr(head, "distribution_class", None) is not TanhNormal:
            raise ValueError(f"FastSACLoss needs a TanhNormal actor, got "
                             f"{getattr(head, 'distribution_class', type(head)).__name__}")
        dist_kwargs = dict(head.distribution_kwargs)
        if dist_kwargs.get("tanh_loc", False) or dist_kwargs.get("safe_tanh", True) is not True:
            raise ValueError("FastSACLoss needs TanhNormal(tanh_loc=False, safe_tanh=True) (TanhNormal's defaults)")
        low = torch.as_tensor(dist_kwargs.get("low", -1.0), dtype=torch.float32)
        high = torch.as_tensor(dist_kwargs.get("high", 1.0), dtype=torch.float32)
        # TanhNormal maps tanh's (-1, 1) onto [low, high] only when the box is not (-1, 1).
        self._affine = bool((low != -1.0).any() or (high != 1.0).any())
        device = self.log_alpha.device  # the networks' (SACLoss puts log_alpha there)
        self.register_buffer("_act_loc", ((high + low) / 2).to(device), persistent=False)
        self.register_buffer("_act_scale", ((high - low) / 2).to(device), persistent=False)
        self.matmul_dtype = matmul_dtype
        self._casts: dict = {}  # parameters cast to matmul_dtype, for one forward (see relu_mlp)
        self._actor_plan = _fuse(_plan(body.module, self.actor_network_params, "the actor"))
        self._q_plan = _fuse(_plan(qvalue_network.module, self.qvalue_network_params, "the critic"))
        self._bound: dict[str, list[tuple[str, Any]]] = {}  # see _net; emptied when parameters are replaced
        self.register_load_state_dict_post_hook(lambda module, keys: module._bound.clear())

    def _apply(self, fn: Any, *args: Any, **kwargs: Any) -> FastSACLoss:
        # .to()/.cuda()/.double() may replace the parameter tensors the bound plans hold
        self._bound = {}
        return super()._apply(fn, *args, **kwargs)

    def _net(self, which: str) -> list[tuple[str, Any]]:
        """The bound plan of ``"actor"``, ``"q"`` (critics) or ``"q_target"``."""
        hit = self._bound.get(which)
        if hit is None:
            if which == "actor":
                hit = _resolve(self._actor_plan, self.actor_network_params)
            else:
                params = self.target_qvalue_network_params if which == "q_target" else self.qvalue_network_params
                hit = _resolve(self._q_plan, params)
            self._bound[which] = hit
        return hit

    def _actor(self, obs: torch.Tensor, next_obs: torch.Tensor) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """The actor's outputs (``loc, scale``) on ``obs`` (differentiable) and on ``next_obs``
        (constants), from one pass over the stacked rows (:func:`~torchfrag.algos.relu_mlp.relu_mlp_split`)."""
        n = obs.shape[-2]
        x: Any = torch.cat([obs, next_obs], -2)
        head = tail = None
        for kind, a in self._net("actor"):
            if head is None:
                if kind == "mlp":
                    head, tail = relu_mlp_split(x, a, n, self.matmul_dtype, self._casts)
                else:
                    x = a(x)
                continue
            head = relu_mlp(head, a, self.matmul_dtype, self._casts) if kind == "mlp" else a(head)
            with torch.no_grad():
                tail = relu_mlp(tail, a, self.matmul_dtype, self._casts) if kind == "mlp" else a(tail)
        return head[:2], tail[:2]

    def _bounded_head(self) -> tuple[list, float, float] | None:
        """``(layers, log_std_min, log_std_max)`` when the actor is one ReLU MLP then a plain
        :class:`~torchfrag.algos.networks.TanhBoundedScale` (no hook, its own ``forward``), else ``None``."""
        bound = self._net("actor")
        if len(bound) != 2 or bound[0][0] != "mlp" or bound[1][0] != "call":
            return None
        head = getattr(bound[1][1], "__self__", None)
        if not isinstance(head, TanhBoundedScale) or getattr(bound[1][1], "__func__", None) is not TanhBoundedScale.forward:
            return None
        return bound[0][1], head.log_std_min, head.log_std_max

    def _q(self, which: str, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q(s, a) of every critic (``which``: see :meth:`_net`): ``[num_qvalue_nets, batch]``."""
        return _run(self._net(which), torch.cat([obs, action], -1), self.matmul_dtype, self._casts).squeeze(-1)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        """SAC's critic, actor and temperature losses (what ``SACLoss.forward`` returns, not the
        ``td_error`` it writes into the batch for prioritized replay)."""
        estimator = self.value_estimator
        if not isinstance(estimator, TD0Estimator):
            raise TypeError(f"FastSACLoss computes TD(0) targets; the value estimator is {type(estimator).__name__}")
        self._casts = {}  # the parameters may have changed since the last call
        obs = tensordict.get("observation")
        nxt = tensordict.get("next")
        alpha = self._alpha
        affine = (self._act_scale, self._act_loc) if self._affine else (None, None)
        bounded = self._bounded_head()
        if bounded is not None:  # the head and both samples as one node (_BoundedSquashedSample)
            layers, lo, hi = bounded
            n = obs.shape[-2]
            head_out, tail_out = relu_mlp_split(torch.cat([obs, nxt.get("observation")], -2), layers, n,
                                                self.matmul_dtype, self._casts)
            eps = tail_out.new_empty((tail_out.shape[-2] + n, tail_out.shape[-1] // 2))
            # the next observations' draw first, as SACLoss makes them (the same random stream)
            eps.narrow(-2, 0, tail_out.shape[-2]).normal_()
            eps.narrow(-2, tail_out.shape[-2], n).normal_()
            action, log_prob, next_action, next_log_prob = bounded_squashed_sample(
                head_out, tail_out, eps, lo, hi, *affine)
        else:
            (loc, scale), (next_loc, next_scale) = self._actor(obs, nxt.get("observation"))
            with torch.no_grad():
                # the next observations' draw first, as SACLoss makes them (the same random stream)
                next_action, next_log_prob = squashed_gaussian(next_loc, next_scale, torch.randn_like(next_loc),
                                                               *affine)
        with torch.no_grad():
            next_q = self._q("q_target", nxt.get("observation"), next_action)
            next_value = (next_q - alpha * next_log_prob).min(0)[0]
            reward = nxt.get("reward").squeeze(-1)
            live = (~nxt.get("terminated").squeeze(-1)).to(reward.dtype)
            target = reward + estimator.gamma * live * next_value
        if bounded is None:
            action, log_prob = squashed_gaussian(loc, scale, torch.randn_like(loc), *affine)
        # The critics on the replayed actions (their loss trains them) and on the policy's
        # (differentiated through for the actor only: TorchRL detaches the critics there) as one
        # batch of stacked rows, the parameters' gradients from the first rows alone (param_rows),
        # the input's gradient only where it reaches the actor: the policy rows' action columns.
        n = obs.shape[-2]
        x = torch.cat([torch.cat([obs, tensordict.get("action")], -1), torch.cat([obs, action], -1)], -2)
        both = _run(self._net("q"), x, self.matmul_dtype, self._casts, param_rows=n,
                    input_grad_from=(n, obs.shape[-1]))
        if self.loss_function == "l2":  # the losses as one node (other distances: op by op)
            loss_qvalue, loss_actor, loss_alpha, entropy = _SACObjective.apply(
                both, log_prob, self.log_alpha, target, alpha, self.target_entropy)
        else:
            both = both.squeeze(-1)
            q, q_pi = both[..., :n], both[..., n:].min(0)[0]
            loss_qvalue = distance_loss(q, target.expand_as(q), loss_function=self.loss_function).sum(0).mean()
            loss_actor = (alpha * log_prob - q_pi).mean()
            log_prob = log_prob.detach()
            loss_alpha = (-self.log_alpha * (log_prob + self.target_entropy)).mean()
            entropy = -log_prob.mean()
        return new_tensordict({"loss_actor": loss_actor, "loss_qvalue": loss_qvalue, "loss_alpha": loss_alpha,
                               "alpha": alpha, "entropy": entropy}, torch.Size([]))
