"""Adam with ``fused=True`` whose step skips ``torch.optim.Adam``'s per-step gathering.

``torch.optim.Adam.step`` walks every parameter group each call: it checks
each parameter, builds the lists of parameters, gradients, moments and step
counters, groups them by device and dtype, and only then calls the fused
kernel. For SAC's small networks at one gradient step per frame that Python
work costs about as much as the kernel (~0.2 ms of ~0.45 ms per step on one
CPU core, ``benchmarks/sac_frame.py``). :class:`CachedFusedAdam` gathers the
lists once, after the first step has created the state, and from then on
does only what ``Adam._fused_adam`` does on them: one ``_foreach_add_`` on
the step counters and one ``torch._fused_adam_`` call per group. The state is
``Adam``'s own (same ``state_dict``, loadable both ways), and the update is
the same kernel on the same tensors, so values are bit-for-bit those of
``torch.optim.Adam(..., fused=True)`` (``tests/test_sac_speed.py``). Anything
the cached path does not cover (a closure, a parameter without a gradient,
AMSGrad, ``maximize``, tensor learning rates, parameters on several devices or
dtypes) runs ``Adam.step`` itself.

Example:
    >>> import torch
    >>> from torchfrag.algos.sac_optim import CachedFusedAdam
    >>> w = torch.nn.Parameter(torch.ones(3))
    >>> opt = CachedFusedAdam([w], lr=0.1)
    >>> for _ in range(2):
    ...     opt.zero_grad()
    ...     (w * 2).sum().backward()
    ...     opt.step()
    >>> [round(v, 4) for v in w.tolist()]
    [0.8, 0.8, 0.8]
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.optim import optimizer as _optim

__all__ = ["CachedFusedAdam"]

# One group's cached lists: (group, params, exp_avgs, exp_avg_sqs, steps).
_GroupPlan = tuple[dict[str, Any], list[torch.Tensor], list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]


class CachedFusedAdam(torch.optim.Adam):
    """``torch.optim.Adam(params, ..., fused=True)`` with a cached step (see the module docstring).

    Args:
        params: Parameters or parameter groups, as for ``torch.optim.Adam``.
        lr: Learning rate (a float; per group in the groups).
        betas: Moment decay rates.
        eps: Added to the denominator.
        weight_decay: L2 penalty (Adam's, not AdamW's).
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, fused=True)
        self._plan: list[_GroupPlan] | None = None
        self._steps: list[torch.Tensor] = []
        self._params: list[torch.Tensor] | None = None  # every group's parameters, with the plan

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """``Adam.load_state_dict``; the cached lists are gathered again at the next step."""
        super().load_state_dict(state_dict)
        self._plan = self._params = None

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """``Adam.add_param_group``; the cached lists are gathered again at the next step."""
        super().add_param_group(param_group)
        self._plan = self._params = None

    def _gather(self) -> list[_GroupPlan] | None:
        """Every group's lists, or ``None`` where the cached step would not be ``Adam``'s."""
        plan: list[_GroupPlan] = []
        kinds = set()
        for group in self.param_groups:
            if (group["amsgrad"] or group["maximize"] or group.get("differentiable") or group.get("capturable")
                    or group.get("decoupled_weight_decay", False) or isinstance(group["lr"], torch.Tensor)
                    or isinstance(group["betas"][0], torch.Tensor) or isinstance(group["betas"][1], torch.Tensor)):
                return None
            params, avgs, sqs, steps = [], [], [], []
            for p in group["params"]:
                state = self.state.get(p)
                if not state or "exp_avg" not in state:
                    return None
                kinds.add((p.device, p.dtype, state["step"].device))
                params.append(p)
                avgs.append(state["exp_avg"])
                sqs.append(state["exp_avg_sq"])
                steps.append(state["step"])
            plan.append((group, params, avgs, sqs, steps))
        if len(kinds) != 1:
            return None
        return plan

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One Adam step (``closure``: as ``torch.optim.Adam.step``, which then runs it).

        ``Optimizer`` wraps every optimizer's ``step`` in a function that opens a profiler
        range and runs the registered step hooks (~10 us per call on one CPU core, as much as
        the Python of the cached step itself); this class calls that wrapper only where it does
        something: a hook registered (on this optimizer or globally), a profiler running, a
        closure, or no cached lists yet.
        """
        if closure is None and self._plan is not None and not self._hooked():
            with torch.no_grad():
                return self._cached_step()
        return self._wrapped_step(closure)

    # Optimizer.__init__ wraps a class's step unless it is marked as already wrapped: this one
    # calls the wrapper itself (above), around the step below.
    step.hooked = True  # type: ignore[attr-defined]

    def _hooked(self) -> bool:
        return bool(torch.autograd.profiler._is_profiler_enabled or self._optimizer_step_pre_hooks
                    or self._optimizer_step_post_hooks or _optim._global_optimizer_pre_hooks
                    or _optim._global_optimizer_post_hooks)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """``Optimizer.zero_grad``; with ``set_to_none`` and the cached lists, the gradients are
        dropped without its profiler range and per-group walk (unless a profiler is running)."""
        params = self._params
        if not set_to_none or params is None or torch.autograd.profiler._is_profiler_enabled:
            super().zero_grad(set_to_none)
            return
        for p in params:
            p.grad = None

    @torch.no_grad()
    def _step(self, closure: Callable[[], Any] | None = None) -> Any:
        plan = self._plan
        if closure is not None or plan is None:
            loss = _adam_step(self, closure)
            self._plan = self._gather()
            self._steps = [s for _, _, _, _, steps in self._plan or () for s in steps]
            self._params = None if self._plan is None else [p for _, ps, _, _, _ in self._plan for p in ps]
            return loss
        return self._cached_step()

    def _cached_step(self) -> None:
        plan = self._plan
        grads = [[p.grad for p in params] for _, params, _, _, _ in plan]
        if any(g is None for gs in grads for g in gs):  # a parameter left out of this backward
            return _adam_step(self)
        torch._foreach_add_(self._steps, 1)
        for (group, params, avgs, sqs, steps), gs in zip(plan, grads):
            if not params:
                continue
            beta1, beta2 = group["betas"]
            torch._fused_adam_(params, gs, avgs, sqs, [], steps, amsgrad=False, lr=group["lr"],
                               beta1=beta1, beta2=beta2, weight_decay=group["weight_decay"],
                               eps=group["eps"], maximize=False, grad_scale=None, found_inf=None)
        return None



def _adam_step(opt: torch.optim.Adam, closure: Callable[[], Any] | None = None) -> Any:
    """``Adam.step`` itself: without the hook wrapper ``Optimizer`` puts on it once a plain ``Adam``
    exists (the caller's own wrapper has run the hooks already)."""
    step = torch.optim.Adam.step
    if getattr(step, "hooked", False):
        step = step.__wrapped__
    return step(opt, closure)


CachedFusedAdam._wrapped_step = torch.optim.Optimizer.profile_hook_step(CachedFusedAdam._step)
