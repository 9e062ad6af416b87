"""The RPC executors: run a placed :class:`~torchfrag.graph.FragmentGraph` across processes.

:func:`run_policy` checks what can be checked before a process starts, then hands the run to
the executor class the placement's kind names (:mod:`torchfrag.runtime.executor`): one class
per way of running, each in its own module (``replicated_rollout``, ``env_calls``,
``replicated_loop``, ``replicated_learners``, ``replay``).

The driver (rank 0) runs the loop's generated fx code. Every fragment placed on
another process is replaced, in a copy of that code, by a *stub* module whose
``forward`` makes RPC calls (``torch.distributed.rpc``, TensorPipe) carrying
TensorDicts, issued to all workers at once and awaited as futures. Workers
build their own fragments by calling the run's picklable *factory*
(:mod:`torchfrag.policies.factory`): no fragment is ever pickled.

* ``actors``: one call per actor per iteration, ``rollout(weights)`` -> batch; the
  weights of the graph's shared-parameter edges (learn -> rollout, and learn ->
  advantage when the advantage runs on the actors) travel with the request every
  ``sync_every`` iterations. Each actor runs its rollout (then the per-env
  fragments placed with it: ``advantage="actors"``) under ``torch.inference_mode``;
  the driver runs a passthrough in their place. With ``advantage="on_arrival"``
  the driver runs those fragments on each actor's batch as it arrives, while it
  still waits for the others; by default (``"learner"``) on the gathered batch.
  Batches are concatenated along the env dimension, so with deterministic actions
  the run equals ``local`` up to the rounding of the smaller matmuls.
* ``async_actors``: requests stay in flight; a learner step takes the first
  rollouts to arrive, drops those older than the staleness bound and reports
  ``policy_lag`` in its metrics.
* ``central_inference``: the rollout stays on the driver; its env step becomes
  one call per env worker per step (action slice out, transitions in).
* ``data_parallel``: every rank runs the whole loop; the learn fragment's
  optimizer all-reduces gradients through a ``gloo`` process group.
* ``multi_learner``: several learners (the driver and learner workers), each with its own
  actors as under ``actors``; the learners all-reduce their gradients.
* ``apex``: actors write their batches into a replay worker; the learner samples from it.

Faults: every wait checks the worker processes; a worker that raises gives a
:class:`~torchfrag.runtime.launcher.WorkerError` with its traceback, one that
dies a :class:`~torchfrag.runtime.launcher.WorkerDied`, one that does not answer
within ``policy.timeout`` a :class:`~torchfrag.runtime.launcher.WorkerTimeout`.
All processes are stopped on every exit path (``Ctrl-C`` included).

Example:
    >>> from torchfrag.runtime.rpc import CommStats
    >>> CommStats().per_iteration(1)
    {'bytes': 0.0, 'calls': 0.0}
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from torchfrag.graph import FragmentGraph
from torchfrag.runtime.comm import CommStats, envs_of
from torchfrag.runtime.executor import EXECUTORS, executor_class
from torchfrag.runtime.launcher import WorkerDied, WorkerError, WorkerTimeout

logger = logging.getLogger(__name__)

__all__ = ["EXECUTORS", "run_policy", "CommStats", "WorkerError", "WorkerDied", "WorkerTimeout"]


def run_policy(
    graph: FragmentGraph,
    policy: Any,
    factory: Any,
    iterations: int,
    hooks: Sequence[Any] = (),
    inputs: Sequence[Any] = (),
    start: int = 0,
    placement: Any = None,
) -> Any:
    """Runs ``graph`` for ``iterations`` under a distributed ``policy``.

    Args:
        graph: The captured loop (built on the driver from ``factory()``).
        policy: A :class:`~torchfrag.policies.Policy` (or name / mapping).
        factory: Picklable ``factory(env_slice=None) -> loop`` that workers call.
        iterations: Iterations to run.
        hooks: ``hook(i, output, graph)``; returning ``True`` stops the run.
        inputs: Positional inputs of the loop.
        start: Index of the first iteration.
        placement: ``policy.place(graph)`` when the caller placed it already (placed once).

    Returns:
        A :class:`~torchfrag.runtime.RunResult`; ``extra`` holds ``comm``
        (bytes/calls per iteration), ``policy_lag`` (async) and ``failed`` workers.

    Raises:
        PolicyError: Before any process starts, for a policy that cannot be placed.
        WorkerError: A worker raised, died (:class:`WorkerDied`) or timed out (:class:`WorkerTimeout`).
    """
    from torchfrag.policies import as_policy
    from torchfrag.policies.base import PolicyError
    from torchfrag.runtime.executor import RpcExecutor

    policy = as_policy(policy)
    if placement is None:
        placement = policy.place(graph)
    cls = executor_class(placement.kind)
    if not issubclass(cls, RpcExecutor):
        raise PolicyError(f"policy {policy.name}: a placement of kind {placement.kind!r} runs in "
                          "process, not on the RPC executor")
    if factory is None:
        factory = getattr(graph.loop, "factory", None)
    if factory is None:
        raise PolicyError(f"policy {policy.name} builds fragments on worker processes and needs a "
                          "picklable loop factory: run(..., factory=PPOFactory(...)) or set loop.factory")
    _check_picklable(factory, policy)
    cls.check(graph, placement, factory)
    from torchfrag.policies.contract import check_factory, sliced_rollout

    node = sliced_rollout(placement)
    check_factory(factory, placement, envs_of(graph, factory, node) if node else None, node)
    return cls.run(graph, placement, factory, iterations, hooks, inputs, start)


def _check_picklable(factory: Any, policy: Any) -> None:
    import pickle

    from torchfrag.policies.base import PolicyError

    try:
        pickle.dumps(factory)
    except Exception as err:  # noqa: BLE001
        raise PolicyError(f"policy {policy.name}: the loop factory {factory!r} cannot be pickled "
                          f"({err}); use a module-level function, functools.partial or a dataclass") from None
