"""The :class:`Learn` fragment: a TorchRL loss and an optimizer, epochs of minibatches."""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from torchfrag.fragments.base import Fragment

logger = logging.getLogger(__name__)

__all__ = ["Learn"]


class Learn(Fragment):
    """Trains a TorchRL loss module on a batch; returns a TensorDict of metrics.

    The batch is flattened, then for each of ``epochs`` epochs shuffled and
    cut into minibatches; each minibatch runs the loss, sums every
    ``loss_*`` entry, back-propagates, clips the gradient norm and steps the
    optimizer. Metrics are the means over all minibatches of every scalar the
    loss returns, plus ``loss``, ``grad_norm`` and ``lr``.

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
    ) -> None:
        if minibatch_size is not None and num_minibatches is not None:
            raise ValueError("give minibatch_size or num_minibatches, not both")
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
        self._params = [p for g in self.optimizer.param_groups for p in g["params"]]
        self.calls = 0

    def describe(self) -> str:
        return f"Learn({type(self.loss).__name__})"

    def _minibatch(self, n: int) -> int:
        if self.minibatch_size is not None:
            return min(int(self.minibatch_size), n)
        if self.num_minibatches is not None:
            return max(1, n // int(self.num_minibatches))
        return n

    def _set_lr(self) -> float:
        frac = 1.0
        if self.anneal_steps:
            frac = max(0.0, 1.0 - self.calls / float(self.anneal_steps))
        for g, base in zip(self.optimizer.param_groups, self._base_lrs):
            g["lr"] = base * frac
        return self._base_lrs[0] * frac

    def install_gradient_sync(self, reduce: Any) -> Any:
        """Averages gradients with ``reduce`` before every step; the clip then applies to the average."""
        from torchfrag.fragments.base import GradientSyncOptimizer

        inner, clip = self.optimizer, self.max_grad_norm
        self.optimizer = GradientSyncOptimizer(inner, reduce, clip)
        self.max_grad_norm = None

        def undo() -> None:
            self.optimizer, self.max_grad_norm = inner, clip

        return undo

    def state_dict_extra(self) -> dict:
        """Optimizer state and call count (for checkpoints)."""
        return {"optimizer": self.optimizer.state_dict(), "calls": self.calls}

    def load_state_dict_extra(self, state: dict) -> None:
        """Restores what :meth:`state_dict_extra` returned."""
        self.optimizer.load_state_dict(state["optimizer"])
        self.calls = int(state["calls"])

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        lr = self._set_lr()
        data = tensordict.select(*self.select_keys) if self.select_keys else tensordict
        data = data.reshape(-1)
        n = data.shape[0]
        mb = self._minibatch(n)
        sums: dict[str, torch.Tensor] = {}
        steps = 0
        for _ in range(self.epochs):
            perm = torch.randperm(n)
            for start in range(0, n - mb + 1, mb):
                batch = data[perm[start:start + mb]]
                out = self.loss(batch)
                total = sum(v for k, v in out.items() if k.startswith("loss_"))
                self.optimizer.zero_grad(set_to_none=True)
                total.backward()
                if self.max_grad_norm is not None:
                    gn = torch.nn.utils.clip_grad_norm_(self._params, self.max_grad_norm)
                else:
                    gn = torch.nn.utils.get_total_norm([p.grad for p in self._params if p.grad is not None])
                self.optimizer.step()
                steps += 1
                with torch.no_grad():
                    for k, v in out.items():
                        if isinstance(v, torch.Tensor) and v.numel() == 1:
                            v = v.detach().reshape(()).float()
                            sums[k] = sums[k] + v if k in sums else v
                    sums["loss"] = sums["loss"] + total.detach() if "loss" in sums else total.detach()
                    sums["grad_norm"] = sums["grad_norm"] + gn if "grad_norm" in sums else gn.clone()
        self.calls += 1
        metrics = {k: v / steps for k, v in sums.items()}
        metrics["lr"] = torch.tensor(lr)
        return TensorDict(metrics, batch_size=[])
