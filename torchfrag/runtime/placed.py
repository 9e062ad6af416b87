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
    """Moves a fragment's TensorDict input to ``device`` (and, for env steps, back to the env's device)."""

    def __init__(self, inner: nn.Module, device: str) -> None:
        super().__init__()
        self.inner = inner
        self.device = torch.device(device)

    def forward(self, tensordict: TensorDictBase | None = None) -> Any:
        if isinstance(tensordict, TensorDictBase):
            tensordict = tensordict.to(self.device)
        return self.inner(tensordict)


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


@contextlib.contextmanager
def on_device(graph: FragmentGraph, device: str, compile: bool = False,
              backend: str = "inductor") -> Iterator[FragmentGraph]:
    """Moves a graph's parameters to ``device`` and compiles its networks, for the ``with`` block.

    Env fragments keep producing tensors on the env's device: the input of every
    other fragment (and of the rollout's act) is moved to ``device``. On exit the
    parameters go back to the CPU and compilation is undone.

    Args:
        graph: The captured loop.
        device: Target device.
        compile: Compile every network (``nn.Module.compile``, in place: parameters
            and state-dict keys are unchanged).
        backend: ``torch.compile`` backend (``"inductor"``, ``"aot_eager"``, ``"eager"``).
    """
    from torchfrag.fragments import EnvReset, EnvStep, Rollout

    dev = torch.device(device)
    compiled = _compile_targets(graph) if compile else []
    for m in compiled:
        m.compile(backend=backend, dynamic=True)
    moved: list[tuple[Any, str, nn.Module]] = []
    if dev.type != "cpu":
        graph.loop.to(dev)
        gm = graph.module
        for n in graph.nodes:
            frag = n.module
            if isinstance(frag, Rollout):
                step = frag._step_fn
                moved.append((step, "act", step.act))
                setattr(step, "act", _ToDevice(step.act, device))
                env_step = step.env_step
                moved.append((step, "env_step", env_step))
                setattr(step, "env_step", _ToDevice(env_step, str(frag.env.device)))
            elif not isinstance(frag, (EnvStep, EnvReset)):
                moved.append((gm, n.target, frag))
                setattr(gm, n.target, _ToDevice(frag, device))
    try:
        yield graph
    finally:
        for owner, attr, mod in reversed(moved):
            setattr(owner, attr, mod)
        if dev.type != "cpu":
            graph.loop.to("cpu")
        for m in compiled:
            m._compiled_call_impl = None
