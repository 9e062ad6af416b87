"""Dispatch of :func:`torchfrag.runtime.run` to the executor of the placement, and the in-process executors.

The graph is placed once; the placement's :attr:`~torchfrag.policies.Placement.kind` names the
executor class that runs it (:func:`~torchfrag.runtime.executor.executor_class`). The two that
run in this process live here: :class:`InProcess` (``local``) and :class:`Fused` (a loop moved
to one device and compiled: ``single_device``); the others start worker processes
(:mod:`torchfrag.runtime.rpc`).

Example:
    >>> from torchfrag.runtime.placed import policy_name
    >>> policy_name({"name": "actors", "actors": 2})
    'actors'
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import torch
from tensordict import TensorDictBase
from tensordict.utils import NestedKey
from torch import nn

from torchfrag.graph import FragmentGraph, capture
from torchfrag.runtime.executor import Executor, executor_class, register_executor

logger = logging.getLogger(__name__)

__all__ = ["Fused", "InProcess", "run_placed", "policy_name", "on_device", "compile_targets", "is_network"]


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
    """Runs a loop under any non-local policy (see :func:`torchfrag.runtime.run`): places it once and
    runs the placement's executor."""
    from torchfrag.policies import as_policy
    from torchfrag.policies.python_state import warn_unsynced_python_state
    from torchfrag.runtime.rpc import run_policy

    pol = as_policy(policy)
    graph = loop_or_graph if isinstance(loop_or_graph, FragmentGraph) else capture(loop_or_graph, in_keys=in_keys)
    placement = pol.place(graph)  # validates everything (devices included) before anything runs
    warn_unsynced_python_state(placement)
    cls = executor_class(placement.kind)
    if cls.runs_in_process:
        return cls.run(graph, placement, factory, iterations, hooks or (), tuple(inputs), start)
    return run_policy(graph, pol, factory, iterations, hooks or (), tuple(inputs), start, placement=placement)


@register_executor
class InProcess(Executor):
    """``in_process``: every fragment in this process, on the CPU (:func:`torchfrag.runtime.local.run`)."""

    kind: ClassVar[str] = "in_process"
    runs_in_process: ClassVar[bool] = True

    @classmethod
    def run(cls, graph: FragmentGraph, placement: Any, factory: Any, iterations: int,
            hooks: Sequence[Any], inputs: Sequence[Any], start: int) -> Any:
        from torchfrag.runtime.local import run as run_local

        result = run_local(graph, "local", iterations, list(hooks), inputs, start=start)
        result.extra["device"] = "cpu"
        result.extra["policy"] = placement.policy.name
        result.extra["executor"] = cls.kind
        return result


@register_executor
class Fused(InProcess):
    """``fused``: the whole loop moved to the learner's device, networks and rollout bodies compiled
    when the policy asks (:func:`on_device`)."""

    kind: ClassVar[str] = "fused"

    @classmethod
    def run(cls, graph: FragmentGraph, placement: Any, factory: Any, iterations: int,
            hooks: Sequence[Any], inputs: Sequence[Any], start: int) -> Any:
        from torchfrag.runtime.local import run as run_local

        pol = placement.policy
        device = pol.device("learner")
        with on_device(graph, device, compile=pol.compile, backend=pol.compile_backend):
            result = run_local(graph, "local", iterations, list(hooks), inputs, start=start)
        result.extra["device"] = device
        result.extra["policy"] = pol.name
        result.extra["executor"] = cls.kind
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


def _holds_tensordicts(module: nn.Module) -> bool:
    """Whether ``module`` takes TensorDicts: a fragment, TorchRL module or loss, or an env."""
    from tensordict.nn import TensorDictModuleBase
    from torchrl.envs import EnvBase

    return isinstance(module, (TensorDictModuleBase, EnvBase)) or hasattr(module, "in_keys")


def is_network(module: nn.Module) -> bool:
    """Whether ``single_device`` compiles ``module`` as one network.

    A network is a callable plain torch module (it defines ``forward``: not a
    ``ModuleList``/``ModuleDict``) with parameters and with no TensorDict module or
    env anywhere inside it: an ``nn.Sequential``, a TorchRL ``MLP``, a user's
    ``nn.Module``.

    Example:
        >>> from torch import nn
        >>> from tensordict.nn import TensorDictModule
        >>> from torchfrag.runtime.placed import is_network
        >>> net = nn.Sequential(nn.Linear(2, 2), nn.Tanh())
        >>> is_network(net), is_network(TensorDictModule(net, ["x"], ["y"])), is_network(nn.Tanh())
        (True, False, False)
    """
    if type(module).forward is nn.Module.forward or next(module.parameters(), None) is None:
        return False
    return not any(_holds_tensordicts(m) for m in module.modules())


def compile_targets(graph: FragmentGraph) -> list[nn.Module]:
    """The networks ``single_device`` compiles: the outermost :func:`is_network` modules of each fragment.

    Found by walking every fragment's registered submodules (through TensorDict
    modules, losses and containers, which are not compiled themselves); each
    network once, however many fragments share it.
    """
    seen: set[int] = set()
    out: list[nn.Module] = []

    def visit(module: nn.Module) -> None:
        if id(module) in seen:
            return
        seen.add(id(module))
        if is_network(module):
            out.append(module)
            return
        for child in module.children():
            visit(child)

    for node in graph.nodes:
        visit(node.module)
    return out


def _compile_in_place(module: nn.Module, backend: str) -> None:
    """Compiles every call of ``module`` in place (undone by ``module._compiled_call_impl = None``).

    What ``nn.Module.compile`` does, through a function of this module: ``torch.compile``
    skips frames in ``torch.nn``, so ``nn.Module.compile`` (which compiles the module's
    ``_call_impl``) silently leaves an ``nn.Sequential``, ``nn.Linear``, ... uncompiled.
    Parameters, state-dict keys and hooks are unchanged.
    """
    call_impl = module._call_impl

    def call(*args: Any, **kwargs: Any) -> Any:
        return call_impl(*args, **kwargs)

    # Dynamo caches compiled graphs on the code object, guarded by the module's structure
    # but not its backend: a code object of its own keeps a later run from reusing a graph
    # that an earlier run compiled with another backend.
    call.__code__ = call.__code__.replace()
    module._compiled_call_impl = torch.compile(call, backend=backend, dynamic=True)


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


def _carry_on(rollout: nn.Module, device: torch.device, home: torch.device) -> Callable[[], None]:
    """Moves a rollout's carried env state (the last step's observation, written by an earlier
    rollout or by a replay prefill before the run) to ``device``; returns the move back to
    ``home`` (also of a carry first made during the run).

    The carry is state like the parameters: left behind, the first fused step would feed
    host observations to networks on the device.
    """
    carry = getattr(rollout, "_carry", None)
    if carry is not None:
        home = carry.device or home
        rollout._carry = carry.to(device)

    def back() -> None:
        if getattr(rollout, "_carry", None) is not None:
            rollout._carry = rollout._carry.to(home)

    return back


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
        compile: Compile every network (:func:`compile_targets`: plain torch modules with
            parameters, ``nn.Sequential`` included; in place: parameters and state-dict keys
            are unchanged) and the rollouts' bodies. One log line lists the compiled networks.
        backend: ``torch.compile`` backend (``"inductor"``, ``"aot_eager"``, ``"eager"``).
    """
    from torchrl.envs import EnvBase

    from torchfrag.fragments import EnvReset, EnvStep, Rollout
    from torchfrag.runtime.fused import fuse_rollout

    dev = torch.device(device)
    envs = {id(m): (m, m.device) for m in graph.loop.modules() if isinstance(m, EnvBase)}
    home = _param_device(graph.loop)
    graph.loop.to(dev)
    # nn.Module.to reaches a child env only through _apply (its parameters and buffers): an
    # env's own ``to`` moves its specs and its state (a BatchedEnv's physics, seeds, counters).
    for env, _ in envs.values():
        env.to(dev)
    _move_optimizer_state(graph.loop, dev)
    compiled = compile_targets(graph) if compile else []
    for m in compiled:
        _compile_in_place(m, backend)
    if compile:
        logger.info("single_device compiles %d networks (backend %s): %s", len(compiled), backend,
                    ", ".join(type(m).__name__ for m in compiled) or "none")
    moved: list[tuple[Any, str, nn.Module]] = []
    undo: list[Any] = []
    gm = graph.module
    for n in graph.nodes:
        frag = n.module
        if isinstance(frag, Rollout):
            undo.append(fuse_rollout(frag, compile=compile, backend=backend))
            undo.append(_carry_on(frag, dev, home))
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
