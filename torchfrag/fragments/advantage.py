"""The :class:`Advantage` fragment: a TorchRL value estimator (GAE, TD(lambda), V-trace)."""
from __future__ import annotations

import torch
from tensordict import TensorDictBase
from torchrl.objectives.value import GAE, TD0Estimator, TD1Estimator, TDLambdaEstimator, ValueEstimatorBase

from torchfrag.fragments.base import Fragment

__all__ = ["Advantage"]

#: Value estimators that work on each env's trajectory alone (no statistic over the whole batch).
_PER_ENV_ESTIMATORS = (GAE, TD0Estimator, TD1Estimator, TDLambdaEstimator)


class Advantage(Fragment):
    """Computes advantages and value targets with a TorchRL value estimator.

    Runs without gradients on a ``[*batch, time]`` TensorDict and writes the
    estimator's ``out_keys`` (``"advantage"``, ``"value_target"`` for GAE).

    Args:
        estimator: A :class:`~torchrl.objectives.value.ValueEstimatorBase`
            (e.g. ``GAE(gamma=0.99, lmbda=0.95, value_network=critic)``).

    Example:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from torchrl.objectives.value import GAE
        >>> from torchfrag.fragments import Advantage
        >>> critic = TensorDictModule(torch.nn.Linear(4, 1), ["observation"], ["state_value"])
        >>> adv = Advantage(GAE(gamma=0.99, lmbda=0.95, value_network=critic))
        >>> sorted(map(str, adv.out_keys))
        ['advantage', 'value_target']
    """

    def __init__(self, estimator: ValueEstimatorBase) -> None:
        value_net = getattr(estimator, "value_network", None)
        super().__init__(estimator.in_keys, estimator.out_keys, reads=value_net)
        self.estimator = estimator

    @property
    def per_env(self) -> bool:  # type: ignore[override]
        """True for GAE / TD estimators without batch-wide averaging (each env's trajectory alone)."""
        est = self.estimator
        return (isinstance(est, _PER_ENV_ESTIMATORS) and not getattr(est, "average_gae", False)
                and not getattr(est, "average_rewards", False))

    def describe(self) -> str:
        return f"Advantage({type(self.estimator).__name__})"

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        with torch.no_grad():
            return self.estimator(tensordict)
