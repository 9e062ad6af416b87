"""The RPC executor: runs a placed :class:`~torchfrag.graph.FragmentGraph` across processes.

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

import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase
from torch import nn

from torchfrag.graph import FragmentGraph
from torchfrag.runtime.comm import Calls, CommStats, RpcExecutor, envs_of
from torchfrag.runtime.env_calls import prepare_env_calls
from torchfrag.runtime.launcher import Cluster, WorkerDied, WorkerError, WorkerTimeout
from torchfrag.runtime.replicated_learners import finish_learners_iteration, prepare_replicated_learners
from torchfrag.runtime.replicated_loop import finish_iteration, prepare_replicated_loop
from torchfrag.runtime.replicated_rollout import prepare_replicated_rollout

logger = logging.getLogger(__name__)

__all__ = ["EXECUTORS", "FINISH", "run_policy", "CommStats", "WorkerError", "WorkerDied", "WorkerTimeout"]

#: Placement kind -> the function that sets its workers up (one module per executor kind).
EXECUTORS = {
    "replicated_rollout": prepare_replicated_rollout,
    "async_replicated_rollout": prepare_replicated_rollout,
    "replicated_learners": prepare_replicated_learners,
    "env_calls": prepare_env_calls,
    "replicated_loop": prepare_replicated_loop,
}

#: Placement kind -> what ends an iteration on the driver (waiting for the other replicas).
FINISH = {"replicated_loop": finish_iteration, "replicated_learners": finish_learners_iteration}


def run_policy(
    graph: FragmentGraph,
    policy: Any,
    factory: Any,
    iterations: int,
    hooks: Sequence[Any] = (),
    inputs: Sequence[Any] = (),
    start: int = 0,
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

    Returns:
        A :class:`~torchfrag.runtime.RunResult`; ``extra`` holds ``comm``
        (bytes/calls per iteration), ``policy_lag`` (async) and ``failed`` workers.

    Raises:
        PolicyError: Before any process starts, for a policy that cannot be placed.
        WorkerError: A worker raised, died (:class:`WorkerDied`) or timed out (:class:`WorkerTimeout`).
    """
    from torchfrag.policies import as_policy
    from torchfrag.policies.base import PolicyError
    from torchfrag.runtime.local import RunResult

    policy = as_policy(policy)
    placement = policy.place(graph)
    if factory is None:
        factory = getattr(graph.loop, "factory", None)
    if factory is None:
        raise PolicyError(f"policy {policy.name} builds fragments on worker processes and needs a "
                          "picklable loop factory: run(..., factory=PPOFactory(...)) or set loop.factory")
    _check_picklable(factory, policy)
    _check_envsplit_sizes(graph, policy, placement, factory)
    from torchfrag.policies.contract import check_factory, sliced_rollout

    node = sliced_rollout(placement)
    check_factory(factory, placement, envs_of(graph, factory, node) if node else None, node)
    cluster = Cluster(policy.num_workers, timeout=policy.timeout, addr=policy.master_addr,
                      port=policy.master_port)
    stats = CommStats()
    ex = RpcExecutor(policy, graph, factory, cluster, Calls(cluster, policy.timeout, stats), stats)
    replace: dict[str, nn.Module] = {}
    hooks = list(hooks or ())
    out: Any = None
    done = 0
    stopped = False
    t0 = time.perf_counter()
    stack = contextlib.ExitStack()
    driver_device = policy.device("replica" if placement.kind == "replicated_loop" else "learner")
    try:
        if driver_device != "cpu":  # the driver's fragments on their role's device
            from torchfrag.runtime.placed import on_device

            stack.enter_context(on_device(graph, driver_device))
        cluster.start()
        fn = _prepare(ex, placement, replace)
        args = tuple(inputs)
        for i in range(start, start + iterations):
            ex.iteration = i - start
            out = fn(*args) if fn is not None else None
            if placement.kind in FINISH:
                out = FINISH[placement.kind](ex, out)
            ex.version += 1
            _report_lag(ex, out)
            done += 1
            if hooks and any([bool(h(i, out, graph)) for h in hooks]):
                stopped = True
                break
    finally:
        stack.close()
        cluster.shutdown()
        if placement.kind in FINISH:
            import torch.distributed as dist

            if dist.is_initialized():
                with contextlib.suppress(Exception):
                    dist.destroy_process_group()
            for _opt, undo in ex.dp_opts:  # give the driver's learners their optimizers back
                undo()
    seconds = time.perf_counter() - t0
    if ex.frames_missing:
        logger.warning("policy %s: %d frames fewer than asked were collected (failed actors: %s; "
                       "on_failure=continue)", policy.name, ex.frames_missing, ", ".join(ex.failed))
    extra = {"comm": stats.per_iteration(done), "comm_total": stats, "failed": list(ex.failed),
             "frames_missing": ex.frames_missing,
             "policy": policy.name}
    if ex.lags:
        extra["policy_lag"] = {"mean": sum(ex.lags) / len(ex.lags), "max": max(ex.lags),
                               "dropped": ex.dropped, "batches": len(ex.lags)}
    if "learner_outputs" in ex.__dict__:
        extra["learner_outputs"] = ex.__dict__["learner_outputs"]
    if ex.dp_opts:
        opts = [o for o, _ in ex.dp_opts if o is not None]
        extra["comm"]["allreduce_bytes"] = sum(getattr(o, "reduced_bytes", 0) for o in opts) / max(1, done)
        extra["comm"]["allreduce_calls"] = sum(getattr(o, "reduce_calls", 0) for o in opts) / max(1, done)
    return RunResult(graph, done, out, seconds, stopped, extra)


def _report_lag(ex: RpcExecutor, out: Any) -> None:
    """Puts this iteration's policy lag into a scalar output (a batched one, a collection-only
    loop's batch, keeps its keys: the lag is in ``RunResult.extra["policy_lag"]`` after the run)."""
    if ex.last_lag and isinstance(out, TensorDictBase) and out.batch_dims == 0:
        out.set("policy_lag", torch.tensor(sum(ex.last_lag) / len(ex.last_lag)))
        out.set("policy_lag_max", torch.tensor(float(max(ex.last_lag))))


def _check_picklable(factory: Any, policy: Any) -> None:
    import pickle

    from torchfrag.policies.base import PolicyError

    try:
        pickle.dumps(factory)
    except Exception as err:  # noqa: BLE001
        raise PolicyError(f"policy {policy.name}: the loop factory {factory!r} cannot be pickled "
                          f"({err}); use a module-level function, functools.partial or a dataclass") from None


def _check_envsplit_sizes(graph: FragmentGraph, policy: Any, placement: Any, factory: Any) -> None:
    """Fails (before any process starts) when the envs cannot be split over the workers."""
    from torchfrag.policies.base import PolicyError, rollout_nodes

    name, kind = policy.name, placement.kind
    if kind in ("replicated_rollout", "async_replicated_rollout", "replicated_learners"):
        nodes = [n for n, r in placement.roles.items() if r != "learner"]
        if not nodes or nodes[0] not in rollout_nodes(graph):
            raise PolicyError(f"policy {name} places {nodes} on the actors; a rollout fragment "
                              "(and the chain after it) is needed")
        if getattr(policy, "envs_per_actor", None) is None:
            total = envs_of(graph, factory, nodes[0])
            # every learner splits the loop's envs over its own actors
            actors = placement.workers(placement.roles[nodes[0]]) // max(1, placement.workers("learner"))
            if total < actors:
                raise PolicyError(f"policy {name}: {actors} actors per learner but the loop has only "
                                  f"{total} envs (set policy.envs_per_actor or use fewer actors)")
    elif kind == "env_calls":
        nodes = list(placement.env_split)
        if not nodes:
            raise PolicyError(f"policy {name} needs a rollout fragment with an env in the loop")
        total = int(graph.fragment(nodes[0]).env.batch_size.numel())
        if total < policy.num_workers:
            raise PolicyError(f"policy {name}: {policy.num_workers} env workers but the loop has only "
                              f"{total} envs")


def _prepare(ex: RpcExecutor, placement: Any, replace: dict[str, nn.Module]) -> Any:
    from torchfrag.policies.base import PolicyError

    prepare = EXECUTORS.get(placement.kind)
    if prepare is None:
        raise PolicyError(f"policy {ex.policy.name}: a placement of kind {placement.kind!r} runs in "
                          "process, not on the RPC executor")
    return prepare(ex, placement, replace)
