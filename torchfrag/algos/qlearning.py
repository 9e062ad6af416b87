"""The lean DQN update: a circular replay of plain tensors and a Q-learning fragment.

What TorchRL's ``ReplayBuffer(LazyTensorStorage)`` + ``DQNLoss`` + ``Learn``
+ ``HardUpdate`` compute, on plain tensors: DQN's replay is uniform sampling
with replacement from the last ``capacity`` transitions, and its update is a
handful of tensor ops on a small network, so the TensorDict plumbing around
them (key lookups, ``TensorDictParams`` functional calls, the loss's
TensorDict outputs) cost more than the arithmetic: a gradient step of a 256-256
CartPole Q-network on 64 samples took ~4.3 ms through ``Learn(DQNLoss)`` and
~2.1 ms through :class:`QLearn`, each inside the whole DQN loop (~1.4 ms for the
bare step alone), one thread, on the same loaded 2-core host.

* :class:`TensorReplay` - preallocated circular storage; ``extend`` writes a
  flat batch of transitions, ``sample(n)`` gathers ``n`` uniform indices (a
  ``TensorDict`` of the replay keys, as :class:`~torchfrag.fragments.ReplaySample`
  hands on),
* :class:`QLearn` - the learner fragment: ``updates`` gradient steps of the
  TD(0) loss (optionally double DQN) on consecutive slices of the sample,
  gradient-norm clip, fused Adam, and the target network's hard copy every
  ``target_update_interval`` gradient steps (or a soft update per step), at
  the gradient step it is due.

Example:
    >>> import torch
    >>> from tensordict import TensorDict
    >>> from torchfrag.algos.qlearning import QLearn, TensorReplay
    >>> rb = TensorReplay(100)
    >>> td = TensorDict({"observation": torch.randn(8, 4), "action": torch.randint(0, 2, (8,)),
    ...                  ("next", "observation"): torch.randn(8, 4), ("next", "reward"): torch.ones(8, 1),
    ...                  ("next", "terminated"): torch.zeros(8, 1, dtype=torch.bool)}, batch_size=[8])
    >>> rb.extend(td)
    >>> len(rb), rb.sample(5).batch_size
    (8, torch.Size([5]))
    >>> learn = QLearn(torch.nn.Linear(4, 2), lr=1e-3, updates=2, batch_size=4, gamma=0.99)
    >>> sorted(learn(rb.sample(8)).keys())
    ['grad_norm', 'loss', 'lr']
"""
from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from tensordict import TensorDict, TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from torchfrag.fragments import Fragment

logger = logging.getLogger(__name__)

__all__ = ["QLearn", "TensorReplay"]

#: What the Q-learning update reads from a transition.
Q_KEYS: list[NestedKey] = ["observation", "action", ("next", "observation"), ("next", "reward"),
                           ("next", "terminated")]


class TensorReplay:
    """A uniform replay buffer on preallocated tensors (the newest ``capacity`` transitions).

    The storage is allocated at the first :meth:`extend`, with each key's
    per-transition shape and dtype; later writes wrap around.

    Args:
        capacity: Transitions kept.
        keys: Keys stored (the rest of a written batch is ignored).
    """

    def __init__(self, capacity: int, keys: Sequence[NestedKey] = tuple(Q_KEYS)) -> None:
        if isinstance(capacity, bool) or int(capacity) != capacity or capacity < 1:
            raise ValueError(f"TensorReplay: capacity must be a positive integer, got {capacity!r}")
        self.capacity = int(capacity)
        self.keys = list(keys)
        self._columns: dict[NestedKey, torch.Tensor] = {}
        self._cursor = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def extend(self, batch: TensorDictBase) -> None:
        """Writes a flat (1-d batch) of transitions, overwriting the oldest ones when full."""
        n = int(batch.shape[0])
        if not self._columns:
            for k in self.keys:
                v = batch.get(k)
                self._columns[k] = torch.empty((self.capacity, *v.shape[1:]), dtype=v.dtype, device=v.device)
        if n >= self.capacity:  # only the newest capacity transitions survive
            batch, n = batch[n - self.capacity:], self.capacity
        end = self._cursor + n
        first = min(end, self.capacity) - self._cursor
        for k, store in self._columns.items():
            v = batch.get(k)
            store[self._cursor:self._cursor + first] = v[:first]
            if first < n:
                store[:n - first] = v[first:]
        self._cursor = end % self.capacity
        self._size = min(self.capacity, self._size + n)

    def sample(self, n: int) -> TensorDict:
        """``n`` transitions drawn uniformly with replacement."""
        if self._size == 0:
            raise RuntimeError("TensorReplay.sample: the buffer is empty (write transitions first)")
        idx = torch.randint(self._size, (int(n),), device=next(iter(self._columns.values())).device)
        out = {k: v[idx] for k, v in self._columns.items()}
        return TensorDict(out, batch_size=[int(n)])


class QLearn(Fragment):
    """DQN's learner: ``updates`` gradient steps of the TD(0) loss, with its target network.

    Each call takes a sample of ``updates * batch_size`` transitions and cuts
    it into ``updates`` consecutive minibatches (the sample is already uniform
    and independent: no shuffling needed). Per minibatch: ``y = r + gamma *
    (1 - terminated) * max_a' Q_target(s', a')`` (double DQN: ``Q_target(s',
    argmax_a' Q(s', a'))``), the MSE (``"l2"``) or Huber (``"smooth_l1"``)
    loss of ``Q(s, a)`` against ``y``, backward, gradient-norm clip, an Adam
    step; then the target network copies the online one every
    ``target_update_interval`` gradient steps (``tau == 1``) or moves by ``tau``
    each step (``tau < 1``). Metrics: means of ``loss`` and ``grad_norm`` over
    the call's steps and the learning rate ``lr``.

    Args:
        net: The Q-network, a plain module ``observation -> action values``.
        lr: Adam's learning rate.
        updates: Gradient steps per call.
        batch_size: Samples per gradient step.
        gamma: Discount.
        double_dqn: Double-DQN targets.
        loss_function: ``"l2"`` or ``"smooth_l1"``.
        max_grad_norm: Gradient-norm clip (``None``: none).
        target_update_interval: Gradient steps between hard target copies (``tau == 1``).
        tau: Soft update rate per gradient step (``1.0``: hard copies).
        adam_eps: Adam's epsilon.
        one_hot: Actions are one-hot vectors (else integer indices).
    """

    #: Calls and gradient steps on this copy: per process by design (the learner's own clocks;
    #: replicas of a replicated learner step in lockstep).
    local_state = frozenset({"calls", "steps"})

    impure = True
    passthrough = False
    role = "learn"

    def __init__(self, net: nn.Module, *, lr: float, updates: int = 1, batch_size: int = 32,
                 gamma: float = 0.99, double_dqn: bool = False, loss_function: str = "l2",
                 max_grad_norm: float | None = None, target_update_interval: int = 1, tau: float = 1.0,
                 adam_eps: float = 1e-8, one_hot: bool = False) -> None:
        losses: dict[str, Callable[..., torch.Tensor]] = {"l2": F.mse_loss, "smooth_l1": F.smooth_l1_loss}
        if loss_function not in losses:
            raise ValueError(f"loss_function must be one of {sorted(losses)}, got {loss_function!r}")
        for name, value in (("updates", updates), ("batch_size", batch_size),
                            ("target_update_interval", target_update_interval)):
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not 0.0 < float(tau) <= 1.0:
            raise ValueError(f"tau must be in (0, 1], got {tau!r}")
        target = copy.deepcopy(net).requires_grad_(False)
        super().__init__(Q_KEYS, ["loss", "grad_norm", "lr"], owns=[net, target])
        self.net = net
        self.target = target
        self.updates, self.batch_size = int(updates), int(batch_size)
        self.gamma, self.double_dqn, self.loss_function = float(gamma), bool(double_dqn), loss_function
        self._loss = losses[loss_function]
        self.max_grad_norm = max_grad_norm
        self.target_update_interval, self.tau = int(target_update_interval), float(tau)
        self.one_hot = bool(one_hot)
        # fused: one kernel updates every parameter (CleanRL's 120-84 Q-net: ~55 us a step instead
        # of ~195 us, measured alone)
        self.optimizer: torch.optim.Optimizer = torch.optim.Adam(net.parameters(), lr=lr, eps=adam_eps,
                                                                 fused=True)
        self._params = list(net.parameters())
        self._target_params = list(target.parameters())
        self.calls = 0
        self.steps = 0  # gradient steps so far (the target copy's clock)

    def optimizer_steps(self, frames: int) -> int | None:
        """``updates``: one gradient step per minibatch of the replay sample, whatever ``frames``."""
        return self.updates

    def describe(self) -> str:
        return f"QLearn({'double ' if self.double_dqn else ''}DQN, {self.updates}x{self.batch_size})"

    def state_dict_extra(self) -> dict:
        """Optimizer state, the target network and the call and gradient-step counts."""
        return {"optimizer": self.optimizer.state_dict(), "calls": self.calls, "steps": self.steps,
                "target": self.target.state_dict()}

    def load_state_dict_extra(self, state: dict) -> None:
        """Restores what :meth:`state_dict_extra` returned."""
        self.optimizer.load_state_dict(state["optimizer"])
        self.calls = int(state["calls"])
        self.steps = int(state.get("steps", 0))
        if "target" in state:
            self.target.load_state_dict(state["target"])

    @torch.no_grad()
    def sync_target(self) -> None:
        """Copies the online network into the target network (in place)."""
        torch._foreach_copy_(self._target_params, self._params)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        obs = tensordict.get("observation")
        action = tensordict.get("action")
        action = action.argmax(-1) if self.one_hot else action.reshape(action.shape[0], -1)[:, 0]
        action = action.long().unsqueeze(-1)
        next_obs = tensordict.get(("next", "observation"))
        reward = tensordict.get(("next", "reward")).reshape(-1).float()
        live = (~tensordict.get(("next", "terminated")).reshape(-1)).float()
        n = obs.shape[0]
        mb = min(self.batch_size, n)
        steps = max(1, min(self.updates, n // mb))
        loss_sum = torch.zeros((), device=obs.device)
        norm_sum = torch.zeros((), device=obs.device)
        lr = float(self.optimizer.param_groups[0]["lr"])
        for i in range(steps):
            s = slice(i * mb, (i + 1) * mb)
            with torch.no_grad():
                q_next = self.target(next_obs[s])
                if self.double_dqn:
                    best = self.net(next_obs[s]).argmax(-1, keepdim=True)
                    v_next = q_next.gather(-1, best).squeeze(-1)
                else:
                    v_next = q_next.max(-1).values
                y = reward[s] + self.gamma * live[s] * v_next
            q = self.net(obs[s]).gather(-1, action[s]).squeeze(-1)
            loss = self._loss(q, y)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if self.max_grad_norm is not None:
                gn = torch.nn.utils.clip_grad_norm_(self._params, self.max_grad_norm, foreach=True)
            else:
                gn = torch.nn.utils.get_total_norm([p.grad for p in self._params if p.grad is not None],
                                                   foreach=True)
            self.optimizer.step()
            self.steps += 1
            with torch.no_grad():
                if self.tau < 1.0:
                    torch._foreach_lerp_(self._target_params, self._params, self.tau)
                elif self.steps % self.target_update_interval == 0:
                    self.sync_target()
                loss_sum += loss.detach()
                norm_sum += gn.detach()
        self.calls += 1
        return TensorDict({"loss": loss_sum / steps, "grad_norm": norm_sum / steps,
                           "lr": torch.tensor(lr)}, batch_size=[])
