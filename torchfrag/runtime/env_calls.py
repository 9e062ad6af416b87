"""The executor of ``env_calls`` placements (``central_inference``): :class:`EnvCalls`.

The rollout stays on the driver; its env step becomes one call per env worker per step
(action slice out, transitions in). Actions are sampled on the driver, so the run equals
``local`` bit for bit.

State the envs produce (their transforms' running statistics: the rollout's
:meth:`~torchfrag.fragments.Fragment.produced_state`) belongs to the driver's rollout: every
call carries the driver's current state, every env worker steps from it and returns what the
step added, and the driver merges those deltas (as it merges an actor's), so the env workers
never keep statistics of their own.
"""
from __future__ import annotations

import contextlib
from typing import Any, ClassVar

import torch
from tensordict import TensorDictBase
from torch import nn
from torchrl.envs.utils import set_exploration_type

from torchfrag.runtime.comm import graph_module_with, split_sizes
from torchfrag.runtime.executor import RpcExecutor, register_executor
from torchfrag.runtime.state_sync import pack_state
from torchfrag.runtime.worker import _remote_env_reset, _remote_env_step, _remote_setup, worker_extra

__all__ = ["EnvCalls"]


class _CentralRollout(nn.Module):
    """The driver's rollout under ``central_inference``: act here, env steps on the env workers."""

    def __init__(self, ex: EnvCalls, rollout: Any, sizes: list[int]) -> None:
        super().__init__()
        self.ex = ex
        self.__dict__["rollout"] = rollout  # the driver's own fragment: not a submodule of this stub
        self.sizes = sizes
        self.carry: TensorDictBase | None = None

    def forward(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        ex, ro = self.ex, self.rollout
        envs = list(ex.env_workers)
        carry = tensordict if tensordict is not None else self.carry
        if carry is None:
            futs = [ex.calls.call(w, _remote_env_reset, self._state()) for w in envs]
            carry = torch.cat(self._merged(ex.calls.wait(futs, envs)), dim=0)
        act = ro.body.act
        out = []
        itype = getattr(ro, "_itype", None)
        ctx = set_exploration_type(itype) if itype is not None else contextlib.nullcontext()
        with torch.no_grad(), ctx:
            return self._steps(ex, ro, act, carry, envs, out)

    def _steps(self, ex: Any, ro: Any, act: Any, carry: TensorDictBase, envs: list[str],
               out: list[TensorDictBase]) -> TensorDictBase:
        for _ in range(ro.steps):
            carry = act(carry)
            parts = carry.split(self.sizes, dim=0)
            state = self._state()
            futs = [ex.calls.call(w, _remote_env_step, part, state) for w, part in zip(envs, parts)]
            results = self._merged(ex.calls.wait(futs, envs))
            transition = torch.cat([r[0] for r in results], dim=0)
            carry = torch.cat([r[1] for r in results], dim=0)
            out.append(transition)
        self.carry = carry
        batch = torch.stack(out, dim=ro._time_dim)
        ex.account(batch)
        return batch

    def _state(self) -> dict[torch.dtype, torch.Tensor] | None:
        """The rollout's produced state, packed for the env workers (``None``: it has none)."""
        produced = self.rollout.produced_state()
        return pack_state([produced]) if produced else None

    def _merged(self, answers: list[tuple[Any, list[torch.Tensor] | None]]) -> list[Any]:
        """The env workers' results; what each added to the produced state merged into the rollout."""
        deltas = [[delta] for _, delta in answers if delta is not None]
        self.ex.merge_produced(deltas)
        return [result for result, _ in answers]


class _CentralAccounting(nn.Module):
    def __init__(self, central: _CentralRollout, rollout: Any) -> None:
        super().__init__()
        self.central = central
        self.__dict__["rollout"] = rollout  # the driver's own fragment: not a submodule of this stub

    def forward(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        batch = self.central(tensordict)
        ro = self.rollout
        ro.frames += batch.numel()
        if ro._time_dim == 1:
            nxt = batch.get("next")
            ro.stats.update(nxt.get("reward"), nxt.get("done"))
        return batch


@register_executor
class EnvCalls(RpcExecutor):
    """``env_calls``: a rollout's act on the driver, its env step one call per env worker per step.

    The driver half is :class:`_CentralRollout` in the rollout's place; the worker half
    :func:`~torchfrag.runtime.worker._remote_env_step` (and ``_remote_env_reset``); each env
    worker steps an even slice of the rollout's envs.

    Attributes:
        env_workers: RPC names of the env workers.
    """

    kind: ClassVar[str] = "env_calls"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env_workers: list[str] = []

    @classmethod
    def crossings(cls, placement: Any) -> list[Any]:
        from torchfrag.policies.explain import env_call_crossings

        return env_call_crossings(placement)

    @classmethod
    def first_slice(cls, placement: Any, total: int) -> Any:
        from torchfrag.policies.factory import EnvSlice

        n = placement.policy.num_workers
        count = total // n + (1 if total % n else 0)
        return EnvSlice(0, count, total, 0, 1)

    @classmethod
    def check(cls, graph: Any, placement: Any, factory: Any) -> None:
        from torchfrag.policies.base import PolicyError

        policy = placement.policy
        nodes = list(placement.env_split)
        if not nodes:
            raise PolicyError(f"policy {policy.name} needs a rollout fragment with an env in the loop")
        total = int(graph.fragment(nodes[0]).env.batch_size.numel())
        if total < policy.num_workers:
            raise PolicyError(f"policy {policy.name}: {policy.num_workers} env workers but the loop has only "
                              f"{total} envs")

    def setup(self, placement: Any, replace: dict[str, nn.Module]) -> Any:
        """Sets the env workers up; returns the driver's placed graph module."""
        from torchfrag.policies.factory import EnvSlice

        policy, graph, calls = self.policy, self.graph, self.calls
        workers = self.cluster.workers
        extra = worker_extra(self, placement)
        node = next(iter(placement.env_split))
        ro = graph.fragment(node)
        total = int(ro.env.batch_size.numel())
        n = len(workers)
        sizes = split_sizes(total, n)
        offsets = [sum(sizes[:i]) for i in range(n)]
        futs = [calls.call(w, _remote_setup, self.factory, EnvSlice(o, s, total, i, i + 1), "env", node, None,
                           extra, timeout=policy.timeout)
                for i, (w, o, s) in enumerate(zip(workers, offsets, sizes))]
        self.wait_setup(futs, workers)
        self.env_workers = list(workers)
        self.state_frags = [ro]
        self.rollout_node = None  # _CentralAccounting accounts the rollout's frames itself
        replace[graph.node(node).target] = _CentralAccounting(_CentralRollout(self, ro, sizes), ro)
        self.reset_counts()
        return graph_module_with(graph, replace)
