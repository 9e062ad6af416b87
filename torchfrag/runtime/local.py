"""The local executor: runs a captured loop in this process."""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tensordict.utils import NestedKey
from torch import nn

from torchfrag.graph import FragmentGraph, capture

logger = logging.getLogger(__name__)

__all__ = ["run", "RunResult", "Hook", "POLICIES"]

#: Hook signature: ``hook(iteration, output, graph)``; return ``True`` to stop the run.
Hook = Callable[[int, Any, FragmentGraph], "bool | None"]

class _PolicyNames(Sequence[str]):
    """The registered policy names (a live view of :data:`torchfrag.policies.POLICY_CLASSES`)."""

    def _names(self) -> tuple[str, ...]:
        from torchfrag.policies.base import POLICY_CLASSES

        return tuple(POLICY_CLASSES)

    def __getitem__(self, i: Any) -> Any:
        return self._names()[i]

    def __len__(self) -> int:
        return len(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __repr__(self) -> str:
        return repr(self._names())


#: Names of the registered distribution policies (one list: the policy registry).
POLICIES: Sequence[str] = _PolicyNames()


@dataclass
class RunResult:
    """What :func:`run` returns.

    Attributes:
        graph: The graph that ran.
        iterations: Iterations completed.
        output: The last iteration's output.
        seconds: Wall time of the iterations (hooks included).
        stopped_by_hook: Whether a hook ended the run early.
    """

    graph: FragmentGraph
    iterations: int
    output: Any = None
    seconds: float = 0.0
    stopped_by_hook: bool = False
    extra: dict = field(default_factory=dict)


def run(
    loop_or_graph: nn.Module | FragmentGraph,
    policy: str = "local",
    iterations: int = 1,
    hooks: Sequence[Hook] | None = None,
    inputs: Iterable[Any] = (),
    *,
    in_keys: Sequence[NestedKey] | Mapping[str, Sequence[NestedKey]] | None = None,
    start: int = 0,
    factory: Any = None,
) -> RunResult:
    """Runs a captured loop ``iterations`` times under a distribution policy.

    ``policy="local"`` runs everything in this process; any other policy (a
    name, a mapping, a Hydra node or a :class:`~torchfrag.policies.Policy`) is
    handed to :func:`torchfrag.runtime.placed.run_placed`. The local executor
    calls the graph's generated code directly, so its overhead over the
    hand-written loop is one Python call per iteration plus the hooks.

    Args:
        loop_or_graph: A loop module (captured first) or a :class:`FragmentGraph`.
        policy: Distribution policy name.
        iterations: How many times to run the loop.
        hooks: Called after every iteration as ``hook(i, output, graph)``;
            a hook returning ``True`` stops the run.
        inputs: Positional inputs of the loop, the same on every iteration.
        in_keys: Passed to :func:`torchfrag.capture` when a module is given.
        start: Index of the first iteration (for resumed runs).
        factory: Picklable ``factory(env_slice=None) -> loop`` that worker processes
            of a distributed policy call to build their fragments
            (:mod:`torchfrag.policies.factory`).

    Returns:
        A :class:`RunResult`.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchfrag.fragments import Fragment
        >>> from torchfrag.runtime import run
        >>> class Count(Fragment):
        ...     impure = True
        ...     def __init__(self):
        ...         super().__init__(out_keys=["n"], passthrough=False)
        ...         self.n = 0
        ...     def forward(self, td=None):
        ...         self.n += 1
        ...         return TensorDict(n=torch.tensor(self.n))
        >>> class Loop(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.count = Count()
        ...     def forward(self):
        ...         return self.count()
        >>> seen = []
        >>> result = run(Loop(), iterations=3, hooks=[lambda i, out, g: seen.append(int(out["n"]))])
        >>> seen, result.iterations
        ([1, 2, 3], 3)
    """
    if not isinstance(policy, str) or policy != "local":
        # Every other policy (a name, a Hydra node or a torchfrag.policies.Policy): see
        # torchfrag.runtime.placed; `factory` builds the fragments on worker processes.
        from torchfrag.runtime.placed import run_placed

        return run_placed(loop_or_graph, policy, iterations, hooks, inputs, in_keys=in_keys,
                          start=start, factory=factory)
    graph = loop_or_graph if isinstance(loop_or_graph, FragmentGraph) else capture(
        loop_or_graph, in_keys=in_keys)
    fn = graph.module
    args = tuple(inputs)
    hooks = list(hooks or ())
    out: Any = None
    done = 0
    stopped = False
    t0 = time.perf_counter()
    if not hooks:
        for _ in range(iterations):
            out = fn(*args)
        done = iterations
    else:
        for i in range(start, start + iterations):
            out = fn(*args)
            done += 1
            if any([bool(h(i, out, graph)) for h in hooks]):
                stopped = True
                break
    seconds = time.perf_counter() - t0
    logger.debug("ran %d iterations of %s in %.3fs", done, graph.name, seconds)
    return RunResult(graph, done, out, seconds, stopped)
