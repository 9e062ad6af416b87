"""Small fragments the shipped algorithms add to the library's: reward scale, target update, anneal.

* :class:`RewardScale` - multiplies ``("next", "reward")`` by a constant,
* :class:`TargetUpdate` - steps a TorchRL target-network updater,
* :class:`Anneal` - anneals an exploration module by the frames seen.

Example:
    >>> from torchfrag.algos.fragments import RewardScale
    >>> RewardScale(0.5).scale
    0.5
"""
from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.envs import RewardScaling

from torchfrag.fragments import Fragment

__all__ = ["Anneal", "RewardScale", "TargetUpdate", "ToDevice"]


class RewardScale(Fragment):
    """Multiplies ``("next", "reward")`` by a constant: TorchRL's ``RewardScaling`` as a fragment.

    The computation is :class:`~torchrl.envs.RewardScaling` (``loc=0``) on the
    batch's ``("next", "reward")``; the fragment face is kept so that a
    placement policy can run it next to the rollout, on the actors: it
    declares :attr:`~torchfrag.fragments.Fragment.per_env` (each env's rows
    are scaled alone), which is what placement reads, never the class name.
    The transform's call costs ~42us where the product cost ~22us
    (``benchmarks/library_parts.py``), once per training iteration: well
    under 0.1% of one.

    Args:
        scale: The factor, ``> 0`` (``RewardScaling`` clamps smaller scales to
            ``1e-6``, so they are refused here rather than changed silently).

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchfrag.algos.fragments import RewardScale
        >>> td = TensorDict({("next", "reward"): torch.ones(2, 1)}, batch_size=[2])
        >>> RewardScale(0.1)(td)["next", "reward"].flatten().tolist()
        [0.10000000149011612, 0.10000000149011612]
    """

    per_env = True

    def __init__(self, scale: float) -> None:
        super().__init__([("next", "reward")], [("next", "reward")])
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale > 0:
            raise ValueError(f"RewardScale: scale must be a number > 0, got {scale!r}")
        self.scale = float(scale)
        key = ("next", "reward")
        # Not a registered submodule: its 0-dim loc/scale buffers stay on the CPU (a CUDA
        # reward times a 0-dim CPU tensor needs no copy, and RewardScaling's
        # ``if self.standard_normal`` then never synchronises with a device), and the
        # fragment's state_dict stays empty, as checkpoints written before expect.
        self.__dict__["transform"] = RewardScaling(loc=0.0, scale=self.scale, in_keys=[key],
                                                   out_keys=[key])

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self.transform(tensordict)


class ToDevice(Fragment):
    """Moves a batch to ``device`` (asynchronously where it can): a learner's input on its device.

    On the device the batch is already on, nothing is copied (the tensors are the same), so a
    loop keeps the same captured graph on every device (no step that exists only on a GPU).

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchfrag.algos.fragments import ToDevice
        >>> td = TensorDict(x=torch.ones(2), batch_size=[2])
        >>> ToDevice("cpu")(td)["x"].data_ptr() == td["x"].data_ptr()
        True
    """

    def __init__(self, device: torch.device | str) -> None:
        super().__init__((), ())
        self.device = torch.device(device)

    def describe(self) -> str:
        return f"ToDevice({self.device})"

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict.to(self.device, non_blocking=True)


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
        >>> from torchfrag.algos.fragments import TargetUpdate
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

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchrl.data import Categorical
        >>> from torchrl.modules import EGreedyModule
        >>> from torchfrag.algos.fragments import Anneal
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
