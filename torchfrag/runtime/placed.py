"""Dispatch of :func:`torchfrag.runtime.run` to the executor a policy needs.

``local`` runs in process (:mod:`torchfrag.runtime.local`), ``single_device``
runs in process after moving and compiling, every other policy runs on the
RPC executor (:mod:`torchfrag.runtime.rpc`).

Example:
    >>> from torchfrag.runtime.placed import policy_name
    >>> policy_name({"name": "actors", "actors": 2})
    'actors'
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from torchfrag.graph import FragmentGraph, capture

logger = logging.getLogger(__name__)

__all__ = ["run_placed", "policy_name", "on_device"]


def policy_name(policy: Any) -> str:
    """The name of a policy given as a string, mapping, Hydra node or :class:`~torchfrag.policies.Policy`."""
    if isinstance(policy, str):
        return policy
    name = getattr(policy, "name", None)
    if name is None and hasattr(policy, "get"):
        name = policy.get("name")
    return str(name or "local")


def run_placed(loop_or_graph: nn.Module | FragmentGraph, policy: Any, iterations: int = 1,
               hooks: Sequence[Any] | None = None, inputs: Iterable[Any] = (), *,
               in_keys: Sequence[NestedKey] | Mapping[str, Sequence[NestedKey]] | None = None,
               start: int = 0, factory: Any = None) -> Any:
    """Runs a loop under any non-local policy (see :func:`torchfrag.runtime.run`)."""
    from torchfrag.policies import as_policy
    from torchfrag.runtime.local import run as run_local
    from torchfrag.runtime.rpc import run_policy

    pol = as_policy(policy)
    graph = loop_or_graph if isinstance(loop_or_graph, FragmentGraph) else capture(loop_or_graph, in_keys=in_keys)
    placement = pol.place(graph)  # validates everything (devices included) before anything runs
    if placement.kind != "in_process":
        return run_policy(graph, pol, factory, iterations, hooks or (), tuple(inputs), start)
    device = pol.device("learner")
    if device == "cpu" and not pol.compile:
        result = run_local(graph, "local", iterations, hooks, inputs, start=start)
    else:
        with on_device(graph, device, compile=pol.compile, backend=pol.compile_backend):
            result = run_local(graph, "local", iterations, hooks, inputs, start=start)
    result.extra["device"] = device
    result.extra["policy"] = pol.name
    return result


class _ToDevice(nn.Module):
    """Calls a fragment with every TensorDict argument, positional or keyword, on ``device``."""

    def __init__(self, inner: nn.Module, device: str) -> None:
        super().__init__()
        self.inner = inner
        self.device = torch.device(device)

    def _moved(self, value: Any) -> Any:
        return value.to(self.device) if isinstance(value, TensorDictBase) else value

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        args = tuple(self._moved(a) for a in args)
        return self.inner(*args, **{k: self._moved(v) for k, v in kwargs.items()})


def _compile_targets(graph: FragmentGraph) -> list[nn.Module]:
    from tensordict.nn import TensorDictModule

    seen: set[int] = set()
    out = []
    for n in graph.nodes:
        for m in n.module.modules():
            if isinstance(m, TensorDictModule) and not hasattr(m.module, "in_keys") and \
                    any(True for _ in m.module.parameters()) and id(m.module) not in seen:
                seen.add(id(m.module))
                out.append(m.module)
    return out


def _param_device(module: nn.Module) -> torch.device:
    for p in module.parameters():
        return p.device
    return torch.device("cpu")


def _move_optimizer_state(loop: nn.Module, device: torch.device) -> None:
    # Optimizer moments live next to their parameters; a step counter (0-d)
    # stays where the optimizer keeps it.
    for m in loop.modules():
        opt = getattr(m, "optimizer", None)
        if isinstance(opt, torch.optim.Optimizer):
            for state in opt.state.values():
                for k, v in state.items():
                    if isinstance(v, torch.Tensor) and v.dim() > 0:
                        state[k] = v.to(device)


@contextlib.contextmanager
def on_device(graph: FragmentGraph, device: str, compile: bool = False,
              backend: str = "inductor") -> Iterator[FragmentGraph]:
    """Puts a whole loop on ``device`` for the ``with`` block: env, act and learn together.

    One code path for every device (the CPU runs it too). The loop's
    parameters and every TorchRL env inside it move to ``device``: a
    torch-native :class:`~torchfrag.envs.batched.BatchedEnv` moves its state
    there and steps there, a :class:`~torchfrag.envs.PoolEnv` hands its results
    over once per step. Each :class:`~torchfrag.fragments.Rollout` runs its
    per-step body fused (:func:`torchfrag.runtime.fused.fuse_rollout`: counted
    in ``rollout.fused_steps``, compiled whole when its envs are torch-native
    and ``compile`` is set). The input of every other fragment is moved to
    ``device`` (data from collectors that live elsewhere). On exit the
    parameters and envs go back where they were and compilation is undone.

    Args:
        graph: The captured loop.
        device: Target device.
        compile: Compile every network (``nn.Module.compile``, in place: parameters
            and state-dict keys are unchanged) and the rollouts' bodies.
        backend: ``torch.compile`` backend (``"inductor"``, ``"aot_eager"``, ``"eager"``).
    """
    from torchrl.envs import EnvBase

    from torchfrag.fragments import EnvReset, EnvStep, Rollout
    from torchfrag.runtime.fused import fuse_rollout

    dev = torch.device(device)
    envs = {id(m): (m, m.device) for m in graph.loop.modules() if isinstance(m, EnvBase)}
    home = _param_device(graph.loop)
    graph.loop.to(dev)
    _move_optimizer_state(graph.loop, dev)
    compiled = _compile_targets(graph) if compile else []
    for m in compiled:
        m.compile(backend=backend, dynamic=True)
    moved: list[tuple[Any, str, nn.Module]] = []
    undo: list[Any] = []
    gm = graph.module
    for n in graph.nodes:
        frag = n.module
        if isinstance(frag, Rollout):
            undo.append(fuse_rollout(frag, compile=compile, backend=backend))
        elif not isinstance(frag, (EnvStep, EnvReset)):
            moved.append((gm, n.target, frag))
            setattr(gm, n.target, _ToDevice(frag, device))
    try:
        yield graph
    finally:
        for restore in reversed(undo):
            restore()
        for owner, attr, mod in reversed(moved):
            setattr(owner, attr, mod)
        graph.loop.to(home)
        _move_optimizer_state(graph.loop, home)
        for env, env_device in envs.values():
            env.to(env_device)
        for m in compiled:
            m._compiled_call_impl = None
