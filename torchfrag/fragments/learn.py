"""The :class:`Learn` fragment: a TorchRL loss and an optimizer, epochs of minibatches."""
from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn
from torch.optim.lr_scheduler import LambdaLR

from torchfrag.fragments.base import Fragment

logger = logging.getLogger(__name__)

__all__ = ["Learn"]


def _linear_to_zero(step: int, total: int) -> float:
    """Learning-rate factor of call ``step``: 1 at the first call, 0 after ``total`` calls."""
    return max(0.0, 1.0 - step / float(total))


class Learn(Fragment):
    """Trains a TorchRL loss module on a batch; returns a TensorDict of metrics.

    The batch is flattened, then for each of ``epochs`` epochs shuffled and cut
    into minibatches (a fresh permutation per epoch, the incomplete last
    minibatch dropped: what TorchRL's ``SamplerWithoutReplacement(drop_last=True)``
    draws; see the comment in :meth:`forward` for why it is not used); each minibatch runs the loss, sums every ``loss_*`` entry, back-propagates,
    clips the gradient norm and steps the optimizer. The learning rate is
    annealed by a ``torch.optim.lr_scheduler.LambdaLR`` stepped once per call;
    its state is in :meth:`state_dict_extra`. Metrics are the means over all
    minibatches of every scalar the loss returns, plus ``loss``, ``grad_norm``
    and ``lr`` (the rate this call used).

    Args:
        loss: A TorchRL :class:`~torchrl.objectives.LossModule` (``ClipPPOLoss``, ...).
        optimizer: Defaults to ``Adam(loss.parameters(), lr=lr, eps=1e-5)``.
        lr: Learning rate of the default optimizer.
        epochs: Passes over the batch per call.
        minibatch_size: Samples per gradient step (whole batch when ``None``
            and ``num_minibatches`` is ``None``).
        num_minibatches: Alternative to ``minibatch_size``.
        max_grad_norm: Gradient-norm clip (``None``: no clipping).
        anneal_steps: Anneal the learning rate linearly to 0 over this many calls.
        select_keys: Keys the loss needs; the batch is cut down to them first
            (faster minibatch gathers). ``None`` keeps every key.
        anneal_buffers: Names of scalar buffers of the loss (TorchRL's schedulable
            buffers, e.g. ``ClipPPOLoss``'s ``clip_epsilon``) annealed by the learning rate's factor (CleanRL's and SB3's
            clip-range annealing); needs ``anneal_steps``.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.objectives import LossModule
        >>> class MSE(LossModule):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = TensorDictModule(torch.nn.Linear(2, 1), ["x"], ["y_hat"])
        ...     def forward(self, td):
        ...         return TensorDict(loss_mse=((self.net(td)["y_hat"] - td["y"]) ** 2).mean())
        >>> from torchfrag.fragments import Learn
        >>> learn = Learn(MSE(), lr=0.1, epochs=2, minibatch_size=4)
        >>> data = TensorDict(x=torch.randn(8, 2), y=torch.randn(8, 1), batch_size=[8])
        >>> sorted(learn(data).keys())
        ['grad_norm', 'loss', 'loss_mse', 'lr']
    """

    #: Calls on this copy: per process by design (every learner replica counts its own).
    local_state = frozenset({"calls"})

    impure = True
    passthrough = False
    role = "learn"

    def __init__(
        self,
        loss: nn.Module,
        optimizer: torch.optim.Optimizer | None = None,
        *,
        lr: float = 3e-4,
        epochs: int = 1,
        minibatch_size: int | None = None,
        num_minibatches: int | None = None,
        max_grad_norm: float | None = None,
        anneal_steps: int | None = None,
        select_keys: Sequence[NestedKey] | None = None,
        anneal_buffers: Sequence[str] = (),
    ) -> None:
        if minibatch_size is not None and num_minibatches is not None:
            raise ValueError("give minibatch_size or num_minibatches, not both")
        if anneal_steps is not None and (isinstance(anneal_steps, bool) or int(anneal_steps) != anneal_steps
                                         or anneal_steps < 0):
            raise ValueError(f"anneal_steps must be a non-negative integer (or None), got {anneal_steps!r}")
        if anneal_buffers and not anneal_steps:
            raise ValueError(f"anneal_buffers={list(anneal_buffers)!r} follow the learning-rate schedule: "
                             f"give anneal_steps > 0 (got {anneal_steps!r})")
        for name in anneal_buffers:
            if not isinstance(getattr(loss, name, None), torch.Tensor):
                raise ValueError(f"anneal_buffers: {type(loss).__name__} has no buffer {name!r}")
        if epochs < 1:
            raise ValueError(f"epochs must be >= 1, got {epochs}")
        for name, value in (("minibatch_size", minibatch_size), ("num_minibatches", num_minibatches)):
            if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
                raise ValueError(f"{name} must be a positive integer (or None), got {value!r}")
        in_keys = list(select_keys) if select_keys is not None else list(getattr(loss, "in_keys", []))
        out_keys = [k for k in getattr(loss, "out_keys", []) or []] + ["loss", "grad_norm", "lr"]
        super().__init__(in_keys, out_keys, owns=loss)
        self.loss = loss
        self.optimizer = optimizer if optimizer is not None else torch.optim.Adam(
            loss.parameters(), lr=lr, eps=1e-5)
        self.epochs = int(epochs)
        self.minibatch_size = minibatch_size
        self.num_minibatches = num_minibatches
        self.max_grad_norm = max_grad_norm
        self.anneal_steps = anneal_steps
        self.select_keys = list(select_keys) if select_keys is not None else None
        self._base_lrs = [g["lr"] for g in self.optimizer.param_groups]
        # A partial (not a lambda): picklable, and LambdaLR's state_dict does not override its total.
        self.scheduler = (LambdaLR(self.optimizer, functools.partial(_linear_to_zero, total=int(anneal_steps)))
                          if anneal_steps else None)
        self._anneal_bases = {name: float(getattr(loss, name)) for name in anneal_buffers}
        self._params = [p for g in self.optimizer.param_groups for p in g["params"]]
        self.calls = 0

    def describe(self) -> str:
        return f"Learn({type(self.loss).__name__})"

    def optimizer_steps(self, frames: int) -> int | None:
        """``epochs`` times the whole minibatches of ``frames`` (the short tail is dropped)."""
        if frames <= 0:
            return None
        return int(self.epochs) * (frames // self._minibatch(frames))

    def _minibatch(self, n: int) -> int:
        if self.minibatch_size is not None:
            return min(int(self.minibatch_size), n)
        if self.num_minibatches is not None:
            return max(1, n // int(self.num_minibatches))
        return n

    def state_dict_extra(self) -> dict:
        """Optimizer and learning-rate scheduler state, and the call count (for checkpoints)."""
        state = {"optimizer": self.optimizer.state_dict(), "calls": self.calls}
        if self.scheduler is not None:
            state["scheduler"] = self.scheduler.state_dict()
        return state

    def load_state_dict_extra(self, state: dict) -> None:
        """Restores what :meth:`state_dict_extra` returned.

        A checkpoint without scheduler state (written before the scheduler
        existed) puts the schedule at its call count.
        """
        self.optimizer.load_state_dict(state["optimizer"])
        self.calls = int(state["calls"])
        if self.scheduler is None:  # no schedule: this Learn's own rate, whatever the checkpoint's was
            for g, base in zip(self.optimizer.param_groups, self._base_lrs):
                g["lr"] = base
        elif "scheduler" in state:
            self.scheduler.load_state_dict(state["scheduler"])
        else:
            self.scheduler.last_epoch = self.calls
            for g, base, fn in zip(self.optimizer.param_groups, self.scheduler.base_lrs,
                                   self.scheduler.lr_lambdas):
                g["lr"] = base * fn(self.calls)
            self.scheduler._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        lr = float(self.optimizer.param_groups[0]["lr"])
        if self._anneal_bases:
            factor = self.scheduler.lr_lambdas[0](self.scheduler.last_epoch)
            for name, base in self._anneal_bases.items():
                getattr(self.loss, name).fill_(base * factor)
        data = tensordict.select(*self.select_keys) if self.select_keys else tensordict
        data = data.reshape(-1)
        n = data.shape[0]
        mb = self._minibatch(n)
        # Minibatches from our own randperm, not TorchRL's SamplerWithoutReplacement (same indices:
        # a permutation per epoch, the short tail dropped): the sampler needs a TorchRL storage, and
        # wrapping each batch in a TensorStorage costs ~2.3 ms (it allocates shared-memory counters),
        # filling a persistent LazyTensorStorage ~1.2 ms per call, and gathering through it ~0.1 ms
        # more per minibatch than indexing the batch (measured on PPO's 2048 x 5-key batches):
        # ~2% of the main job's learn step, ~15% of DQN's (64 minibatches of 64 per call).
        # One minibatch of the whole batch (DQN's and SAC's one update per replay sample) is the
        # batch as it is: the order inside a minibatch does not change its loss.
        whole = mb == n
        metrics_sum = _MetricSums()
        for _ in range(self.epochs):
            perm = None if whole else torch.randperm(n, device=data.device)
            for start in range(0, n - mb + 1, mb):
                batch = data if perm is None else data[perm[start:start + mb]]
                out = self.loss(batch)
                total = _sum_losses(out)
                self.optimizer.zero_grad(set_to_none=True)
                total.backward()
                if self.max_grad_norm is not None:
                    gn = torch.nn.utils.clip_grad_norm_(self._params, self.max_grad_norm)
                else:
                    gn = _total_norm([p.grad for p in self._params if p.grad is not None])
                self.optimizer.step()
                metrics_sum.add(out, total, gn)
        self.calls += 1
        if self.scheduler is not None:
            self.scheduler.step()
        metrics = metrics_sum.means()
        metrics["lr"] = torch.tensor(lr)
        return TensorDict(metrics, batch_size=[])


def _sum_losses(out: TensorDictBase) -> Any:
    """The sum of ``out``'s ``loss_*`` entries, from the first one (``sum()`` starts from the int 0:
    one more operation and one more autograd node per minibatch, and the same value).

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> _sum_losses(TensorDict(loss_a=torch.tensor(1.0), loss_b=torch.tensor(2.0), other=torch.tensor(5.0)))
        tensor(3.)
    """
    losses = [v for k, v in out.items() if k.startswith("loss_")]
    if not losses:
        return sum(losses)
    total = losses[0]
    for v in losses[1:]:
        total = total + v
    return total


def _total_norm(grads: list[torch.Tensor]) -> torch.Tensor:
    """``torch.nn.utils.get_total_norm(grads)`` (the 2-norm), the same value in fewer calls.

    Where every gradient is a dense tensor of one device and dtype (the usual case) the
    per-tensor norms come from one ``torch._foreach_norm`` call: on the CPU
    ``get_total_norm`` has no foreach kernel and calls ``vector_norm`` once per tensor
    after grouping them (~67 us against ~39 us for SAC's 13 gradients, one thread); the
    foreach call computes each norm with the same kernel, so the result is bit-for-bit
    equal. Anything else goes through ``get_total_norm``.

    Example:
        >>> import torch
        >>> g = [torch.tensor([3.0]), torch.tensor([[4.0]])]
        >>> float(_total_norm(g))
        5.0
    """
    if not grads:
        return torch.nn.utils.get_total_norm(grads)
    first = grads[0]
    if all(g.device == first.device and g.dtype == first.dtype and g.layout is torch.strided
           for g in grads):
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    return torch.nn.utils.get_total_norm(grads)


class _MetricSums:
    """Sums of a learner's per-minibatch scalars (``loss``'s entries, ``loss``, ``grad_norm``).

    The common case (every entry a 0-dim float32 tensor on one device, the same keys each
    minibatch) costs one ``torch.stack`` per minibatch and one sum at the end, where adding
    each entry to a running sum took ~25 tensor calls per minibatch (~20 us: 1.6 ms of a PPO
    iteration of 80 minibatches, see ``docs/benchmarks.md``); anything else is summed entry by
    entry as before. :meth:`means` gives the same values either way (to float32 rounding).

    Example:
        >>> import torch
        >>> sums = _MetricSums()
        >>> for x in (1.0, 3.0):
        ...     sums.add({"loss_a": torch.tensor(x)}, torch.tensor(x), torch.tensor(2 * x))
        >>> {k: float(v) for k, v in sums.means().items()}
        {'loss_a': 2.0, 'loss': 2.0, 'grad_norm': 4.0}
    """

    def __init__(self) -> None:
        self.keys: list[str] | None = None
        self.rows: list[torch.Tensor] = []
        self.sums: dict[str, torch.Tensor] = {}
        self.steps = 0

    def add(self, out: Any, total: torch.Tensor, grad_norm: torch.Tensor) -> None:
        """Adds one minibatch: the loss's output, the summed loss and the gradient norm."""
        self.steps += 1
        with torch.no_grad():
            vals = [(k, v) for k, v in out.items() if isinstance(v, torch.Tensor) and v.numel() == 1]
            row = [v for _, v in vals] + [total, grad_norm]
            keys = [k for k, _ in vals]
            if not self.sums and (self.keys is None or keys == self.keys):
                try:  # one row when every entry is a 0-dim tensor on one device
                    stacked = torch.stack(row)
                except RuntimeError:
                    stacked = None
                if stacked is not None and stacked.dim() == 1 and stacked.dtype is torch.float32:
                    self.keys = keys
                    self.rows.append(stacked)
                    return
            self._spill()
            for k, v in vals:
                v = v.detach().reshape(()).float()
                self.sums[k] = self.sums[k] + v if k in self.sums else v
            self.sums["loss"] = self.sums["loss"] + total.detach() if "loss" in self.sums else total.detach()
            self.sums["grad_norm"] = (self.sums["grad_norm"] + grad_norm if "grad_norm" in self.sums
                                      else grad_norm.clone())

    def _spill(self) -> None:
        """Moves the stacked rows into the per-entry sums (the slow path takes over)."""
        if not self.rows:
            return
        total = torch.stack(self.rows).sum(0)
        self.rows = []
        for k, v in zip([*self.keys, "loss", "grad_norm"], total.unbind(0)):
            self.sums[k] = self.sums[k] + v if k in self.sums else v

    def means(self) -> dict[str, torch.Tensor]:
        """Every entry's mean over the minibatches added.

        One stacked minibatch (DQN's and SAC's one update per call) is its row as it is:
        dividing by one changes no value, and the stack, sum and per-entry divisions cost
        ~0.1 ms of a SAC frame.
        """
        if self.steps == 1 and len(self.rows) == 1 and not self.sums:
            return dict(zip([*self.keys, "loss", "grad_norm"], self.rows[0].unbind(0)))
        self._spill()
        return {k: v / self.steps for k, v in self.sums.items()}
