"""The worker side of the RPC executors: module-level functions that RPC pickles by reference.

A worker builds its own fragments from the run's factory (:func:`remote_setup`), then
serves the calls of its role: ``rollout`` (replicated rollout), ``env_reset``/``env_step``
(env calls), ``dp_setup``/``dp_iterate`` (replicated loop).
"""
from __future__ import annotations

import contextlib
import copy
import os
import threading
from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from torchfrag.fragments.replica_state import buffer_digests
from torchfrag.graph import FragmentGraph, capture
from torchfrag.runtime.gradsync import install_gradient_sync
from torchfrag.runtime.state_sync import (allreduce_produced, produced_bases, produced_delta, snapshot,
                                         unpack_state)

__all__ = ["WORKER", "REWARD", "worker_extra"]

#: State of this process when it is a worker.
_WORKER: dict[str, Any] = {}
WORKER = _WORKER

_REWARD = ("next", "reward")
REWARD = _REWARD


def worker_extra(ex: Any, placement: Any) -> dict[str, Any]:
    """What every worker's set-up needs besides the factory: env threads, seed, its role's device."""
    policy = ex.policy
    placed = [r for r in placement.roles.values() if r != "learner"] + list(placement.env_split.values())
    role = placed[0] if placed else "learner"
    return {"env_threads": ex.option("env_threads"), "seed": getattr(ex.factory, "seed", 0),
            "device": policy.device(role)}


def _ping() -> bool:
    """What a torchrun worker calls on the driver to tell that it is still there."""
    return True


def _remote_whereami() -> dict[str, Any]:
    """This worker's rank, pid and the address it reaches the driver from (set by the launcher)."""
    return {"rank": _WORKER.get("rank"), "pid": os.getpid(), "address": _WORKER.get("address")}


def _remote_stop() -> bool:
    ev = _WORKER.get("stop")
    if ev is not None:
        ev.set()
    return True


def _close_worker_state() -> None:
    lock = _WORKER.get("lock")
    # An async_actors rollout may still be in flight when the driver says stop: let it
    # finish (bounded) rather than close its env under it.
    held = lock.acquire(timeout=3.0) if lock is not None else False
    try:
        _close_worker_loop()
    finally:
        if held:
            lock.release()


def _close_worker_loop() -> None:
    ctx = _WORKER.pop("device_ctx", None)
    if ctx is not None:
        with contextlib.suppress(Exception):
            ctx.close()
    _WORKER.pop("placed", None)
    _WORKER.pop("executor", None)
    loop = _WORKER.pop("loop", None)
    if loop is not None and hasattr(loop, "close"):
        with contextlib.suppress(Exception):
            loop.close()
    if _WORKER.pop("pg", False):
        import torch.distributed as dist

        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def _remote_setup(factory: Any, env_slice: Any, role: str, node: str | Sequence[str] | None,
                  seed_offset: int | None, extra: dict[str, Any]) -> dict[str, Any]:
    """Builds this worker's fragments from the factory; returns a short description.

    ``node`` names the fragment this worker runs; an actor gets its chain (the
    rollout first, then the per-env fragments placed with it). The description carries the
    digests of the buffers placement syncs (:func:`~torchfrag.fragments.replica_state.buffer_digests`),
    so that the driver can say which ones the factory built differently.
    """
    from torchfrag.policies.factory import EnvSlice  # noqa: F401 - unpickling needs it importable

    _close_worker_state()
    torch.set_num_threads(1)
    if extra.get("env_threads"):
        factory = _with_env_threads(factory, int(extra["env_threads"]))
    loop = factory(env_slice)
    graph = capture(loop)
    _WORKER.pop("chain", None)
    _WORKER.update(loop=loop, graph=graph, role=role, lock=threading.Lock())
    device = str(extra.get("device") or "cpu")
    _WORKER["device"] = device
    if device != "cpu":
        from torchfrag.runtime.placed import on_device

        stack = contextlib.ExitStack()
        stack.enter_context(on_device(graph, device))
        _WORKER["device_ctx"] = stack
    if seed_offset is not None:
        torch.manual_seed(int(extra.get("seed", 0)) * 1_000_003 + seed_offset)
    if role == "actor":
        names = [node] if isinstance(node, str) else list(node)
        chain = [graph.fragment(n) for n in names]
        _WORKER["fragment"] = chain[0]
        _WORKER["chain"] = chain
    elif role == "env":
        rollout = graph.fragment(node)
        _WORKER["env"] = rollout.env
        _WORKER["fragment"] = rollout
    elif role == "replica":
        _WORKER["fragment"] = graph
    return {"role": role, "envs": None if env_slice is None else env_slice.count,
            "buffers": buffer_digests(graph)}


def _with_env_threads(factory: Any, threads: int) -> Any:
    if hasattr(factory, "env_options"):
        factory = copy.copy(factory)
        factory.env_options = {**dict(factory.env_options), "num_threads": threads}
    return factory


def _remote_rollout(state: dict[torch.dtype, torch.Tensor] | None, version: int
                    ) -> tuple[TensorDictBase, int, torch.Tensor | None, list[list[torch.Tensor]]]:
    """Runs the actor's chain once (rollout, then e.g. advantage) after loading ``state`` when given.

    ``state`` holds the :meth:`~torchfrag.fragments.Fragment.shared_state` (parameters,
    buffers, produced state) of every fragment of the chain, packed by
    :func:`~torchfrag.runtime.state_sync.pack_state`; each fragment gets its part through
    its :meth:`~torchfrag.fragments.Fragment.load_shared_state`. The chain runs under
    ``torch.inference_mode`` (no autograd bookkeeping: the same arithmetic, less CPU per
    step); the state is loaded outside it.

    Returns:
        ``(batch, state version, raw reward, produced state)``; the raw reward is the
        rollout's own ``("next", "reward")`` when a later fragment of the chain replaced it
        (reward scaling), for the driver's episode statistics, else ``None``; the produced
        state is what this run added to each fragment's
        :meth:`~torchfrag.fragments.Fragment.produced_state`
        (:func:`~torchfrag.runtime.state_sync.produced_delta`, relative to the state this
        actor held when the run started: the driver's version ``state`` when it came, else
        the actor's own), which the driver merges into its current state.
    """
    with _WORKER["lock"]:
        chain = _WORKER.get("chain") or [_WORKER["fragment"]]
        if state is not None:
            for frag, values in zip(chain, unpack_state(state, [f.shared_state() for f in chain])):
                frag.load_shared_state(values)
            _WORKER["version"] = version
        before = [snapshot(frag.produced_state()) for frag in chain]
        raw = None
        with torch.inference_mode():
            batch = chain[0]()
            if len(chain) > 1 and _REWARD in batch.keys(True):
                raw = batch.get(_REWARD)
            for frag in chain[1:]:
                batch = frag(batch)
        if raw is not None and batch.get(_REWARD) is raw:
            raw = None
        produced = [produced_delta(b, frag.produced_state()) for b, frag in zip(before, chain)]
        if _WORKER.get("device", "cpu") != "cpu":  # the driver gets CPU tensors, whatever the device
            batch = batch.to("cpu")
            raw = raw.to("cpu") if raw is not None else None
        return batch, int(_WORKER.get("version", 0)), raw, produced


def _remote_env_reset(state: dict[torch.dtype, torch.Tensor] | None = None
                      ) -> tuple[TensorDictBase, list[torch.Tensor] | None]:
    """Resets this env worker's envs; see :func:`_remote_env_step` for ``state`` and the delta."""
    return _with_produced_state(state, _WORKER["env"].reset)


def _remote_env_step(td: TensorDictBase, state: dict[torch.dtype, torch.Tensor] | None = None
                     ) -> tuple[tuple[TensorDictBase, TensorDictBase], list[torch.Tensor] | None]:
    """Steps this env worker's envs with the actions of ``td`` (auto-reset).

    Args:
        td: This worker's slice of the carry, with actions.
        state: The driver's rollout's produced state (its env transforms' statistics),
            packed; ``None`` when it has none.

    Returns:
        ``((transition, carry), delta)``: the delta is what this step added to ``state``
        (:func:`~torchfrag.runtime.state_sync.produced_delta`), ``None`` without ``state``.
    """
    return _with_produced_state(state, lambda: _WORKER["env"].step_and_maybe_reset(td))


def _with_produced_state(state: dict[torch.dtype, torch.Tensor] | None, call: Any
                         ) -> tuple[Any, list[torch.Tensor] | None]:
    """Runs ``call`` on the rollout's env from the driver's produced ``state``; returns its delta too."""
    if state is None:
        return call(), None
    rollout = _WORKER["fragment"]
    (values,) = unpack_state(state, [rollout.produced_state()])
    rollout.load_produced_state(values)
    before = snapshot(rollout.produced_state())
    out = call()
    return out, produced_delta(before, rollout.produced_state())


def _remote_dp_setup(rank: int, world: int, init_method: str, backend: str, timeout: float) -> bool:
    import datetime

    import torch.distributed as dist

    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout))
    _WORKER["pg"] = True
    install_gradient_sync(_WORKER["graph"], world)
    return True


def _remote_dp_iterate(iteration: int = 0) -> dict[str, Any]:
    """One iteration of a replica's (or a learner's) loop; its frames, episodes, output, traffic.

    ``frames`` and ``episodes`` are keyed by node: every rollout's own running total.

    A learner with actors of its own runs its placed module (``placed``, whose rollout stub
    calls them) and reports the bytes and calls it exchanged with them (``comm``).
    """
    graph: FragmentGraph = _WORKER["graph"]
    ex = _WORKER.get("executor")
    if ex is not None:
        ex.iteration = int(iteration)
        out = _WORKER["placed"]()
    else:
        out = run_replica_iteration(graph, graph.module)
    comm: dict[str, int] = {}
    if ex is not None:
        ex.version += 1
        comm = {"sent": ex.stats.bytes_sent, "received": ex.stats.bytes_received, "calls": ex.stats.calls}
        ex.stats.bytes_sent = ex.stats.bytes_received = ex.stats.calls = 0
    frames: dict[str, int] = {}
    stats: dict[str, Any] = {}
    for n in graph.nodes:
        fr = getattr(n.module, "frames", None)
        if isinstance(fr, int):
            frames[n.name] = fr
            st = getattr(n.module, "stats", None)
            if st is not None:
                stats[n.name] = {"returns": list(st.returns), "lengths": list(st.lengths)}
                st.returns, st.lengths = [], []
    return {"frames": frames, "episodes": stats, "metrics": out, "comm": comm}


def run_replica_iteration(graph: FragmentGraph, loop: Any, *args: Any) -> Any:
    """One iteration of a replicated loop on this rank; then its produced state merged over the ranks.

    Every rank takes a snapshot of its fragments' produced state (the same on every rank: the
    previous iteration's merge), runs ``loop`` on its own envs, and merges what the ranks
    produced (:func:`~torchfrag.runtime.state_sync.allreduce_produced`, collective: every
    rank calls it in the same order, after the same fragments' gradient all-reduces).
    """
    bases = produced_bases([n.module for n in graph.nodes])
    out = loop(*args)
    for frag, base in bases:
        allreduce_produced(frag, base)
    return out
