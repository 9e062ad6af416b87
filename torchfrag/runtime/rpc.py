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
import copy
import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx as fx
from tensordict import TensorDictBase
from torch import nn
from torchrl.envs.utils import set_exploration_type

from torchfrag.graph import FragmentGraph, capture
from torchfrag.runtime.launcher import Cluster, WorkerDied, WorkerError, WorkerTimeout

logger = logging.getLogger(__name__)

__all__ = ["run_policy", "CommStats", "WorkerError", "WorkerDied", "WorkerTimeout"]

#: State of this process when it is a worker.
_WORKER: dict[str, Any] = {}


# ---------------------------------------------------------------------------------------------
# helpers
def _nbytes(obj: Any) -> int:
    if obj is None:
        return 0
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, TensorDictBase):
        return sum(_nbytes(v) for v in obj.values(True, True))
    if isinstance(obj, dict):
        return sum(_nbytes(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_nbytes(v) for v in obj)
    return 0


@dataclass
class CommStats:
    """Bytes and RPC calls between the driver and its workers.

    Attributes:
        bytes_sent: Tensor bytes the driver sent.
        bytes_received: Tensor bytes the driver received.
        calls: RPC calls issued by the driver (start-up and shutdown excluded).
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    calls: int = 0

    def per_iteration(self, iterations: int) -> dict[str, float]:
        """Mean bytes (both ways) and calls per iteration."""
        n = max(1, iterations)
        return {"bytes": (self.bytes_sent + self.bytes_received) / n, "calls": self.calls / n}


def _flat(params: Sequence[nn.Parameter]) -> torch.Tensor:
    with torch.no_grad():
        return torch.cat([p.detach().reshape(-1) for p in params]).clone()


def _load_flat(params: Sequence[nn.Parameter], flat: torch.Tensor) -> None:
    with torch.no_grad():
        i = 0
        for p in params:
            n = p.numel()
            p.copy_(flat[i:i + n].view_as(p))
            i += n


def _graph_module_with(graph: FragmentGraph, replace: dict[str, nn.Module]) -> fx.GraphModule:
    """A copy of the graph's fx module with some fragment submodules swapped for stubs."""
    gm = graph.module
    root: dict[str, Any] = {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            root[node.target] = replace.get(node.target, gm.get_submodule(node.target))
    return fx.GraphModule(root, copy.deepcopy(gm.graph), class_name="Placed" + type(gm).__name__)


# ---------------------------------------------------------------------------------------------
# worker side (module-level functions: RPC pickles them by reference)
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
    rollout first, then the per-env fragments placed with it).
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
    if seed_offset is not None:
        torch.manual_seed(int(extra.get("seed", 0)) * 1_000_003 + seed_offset)
    if role == "actor":
        names = [node] if isinstance(node, str) else list(node)
        chain = [graph.fragment(n) for n in names]
        _WORKER["fragment"] = chain[0]
        _WORKER["chain"] = chain
        _WORKER["state_keys"] = [list(f.shared_state()) for f in chain]
    elif role == "env":
        rollout = graph.fragment(node)
        _WORKER["env"] = rollout.env
        _WORKER["fragment"] = rollout
    elif role == "replica":
        _WORKER["fragment"] = graph
    return {"role": role, "envs": None if env_slice is None else env_slice.count}


def _with_env_threads(factory: Any, threads: int) -> Any:
    if hasattr(factory, "env_options"):
        factory = copy.copy(factory)
        factory.env_options = {**dict(factory.env_options), "num_threads": threads}
    return factory


_REWARD = ("next", "reward")


def _remote_rollout(state: list[list[torch.Tensor]] | None, version: int
                    ) -> tuple[TensorDictBase, int, torch.Tensor | None, list[list[torch.Tensor]]]:
    """Runs the actor's chain once (rollout, then e.g. advantage) after loading ``state`` when given.

    ``state`` holds, for each fragment of the chain, the values of its
    :meth:`~torchfrag.fragments.Fragment.shared_state` (parameters, buffers, produced
    state) in the order of its keys. The chain runs under ``torch.inference_mode`` (no
    autograd bookkeeping: the same arithmetic, less CPU per step); the state is loaded
    outside it.

    Returns:
        ``(batch, state version, raw reward, produced state)``; the raw reward is the
        rollout's own ``("next", "reward")`` when a later fragment of the chain replaced it
        (reward scaling), for the driver's episode statistics, else ``None``; the produced
        state is each fragment's :meth:`~torchfrag.fragments.Fragment.produced_state` values
        after the run (merged back on the driver).
    """
    with _WORKER["lock"]:
        chain = _WORKER.get("chain") or [_WORKER["fragment"]]
        if state is not None:
            for frag, keys, values in zip(chain, _WORKER["state_keys"], state):
                frag.load_shared_state(dict(zip(keys, values)))
            _WORKER["version"] = version
        raw = None
        with torch.inference_mode():
            batch = chain[0]()
            if len(chain) > 1 and _REWARD in batch.keys(True):
                raw = batch.get(_REWARD)
            for frag in chain[1:]:
                batch = frag(batch)
        if raw is not None and batch.get(_REWARD) is raw:
            raw = None
        produced = [[v.detach().clone() for v in frag.produced_state().values()] for frag in chain]
        return batch, int(_WORKER.get("version", 0)), raw, produced


def _remote_env_reset() -> TensorDictBase:
    return _WORKER["env"].reset()


def _remote_env_step(td: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase]:
    return _WORKER["env"].step_and_maybe_reset(td)


def _remote_dp_setup(rank: int, world: int, init_method: str, backend: str, timeout: float) -> bool:
    import datetime

    import torch.distributed as dist

    dist.init_process_group(backend, init_method=init_method, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout))
    _WORKER["pg"] = True
    _install_allreduce(_WORKER["graph"], world)
    return True


def _remote_dp_iterate() -> dict[str, Any]:
    graph: FragmentGraph = _WORKER["graph"]
    out = graph.module()
    frames = 0
    stats: dict[str, Any] = {}
    for n in graph.nodes:
        fr = getattr(n.module, "frames", None)
        if isinstance(fr, int):
            frames = fr
            st = getattr(n.module, "stats", None)
            if st is not None:
                stats = {"returns": list(st.returns), "lengths": list(st.lengths)}
                st.returns, st.lengths = [], []
    return {"frames": frames, "episodes": stats, "metrics": out}


# ---------------------------------------------------------------------------------------------
# data parallel: gradients averaged through each learner's declared gradient-sync hook
def _allreduce_mean(world: int) -> Any:
    import torch.distributed as dist

    def reduce(flat: torch.Tensor) -> None:
        dist.all_reduce(flat)
        flat.div_(world)

    return reduce


def _install_allreduce(graph: FragmentGraph, world: int) -> list[tuple[Any, Any]]:
    """Broadcasts rank 0's state, installs the gradient sync of every learner; ``[(optimizer, undo)]``."""
    import torch.distributed as dist

    from torchfrag.policies.base import PolicyError

    # Every rank starts from rank 0's state (parameters and buffers), in the graph's node order.
    seen: set[int] = set()
    with torch.no_grad():
        for n in graph.nodes:
            for k, t in n.module.shared_state().items():
                if k.startswith("produced.") or id(t) in seen or t.dtype == torch.bool:
                    continue
                seen.add(id(t))
                dist.broadcast(t.data, src=0)
    out = []
    for n in graph.nodes:
        frag = n.module
        if frag.has_gradient_sync():
            undo = frag.install_gradient_sync(_allreduce_mean(world))
            out.append((getattr(frag, "optimizer", None), undo))
    if not out:
        raise PolicyError("data_parallel needs a fragment that owns an optimizer and declares "
                          "gradient sync (Fragment.has_gradient_sync)")
    return out


# ---------------------------------------------------------------------------------------------
# driver side
class _Calls:
    """Issues RPCs, counts them, waits on futures while watching the worker processes."""

    def __init__(self, cluster: Cluster, timeout: float, stats: CommStats) -> None:
        self.cluster = cluster
        self.timeout = float(timeout)
        self.stats = stats

    def call(self, worker: str, fn: Any, *args: Any, timeout: float | None = None) -> Any:
        from torch.distributed import rpc

        self.stats.calls += 1
        self.stats.bytes_sent += _nbytes(args)
        fut = rpc.rpc_async(worker, fn, args=args, timeout=self.timeout if timeout is None else timeout)
        return fut

    def wait(self, futs: Sequence[Any], workers: Sequence[str], count_bytes: bool = True) -> list[Any]:
        """Results of all ``futs`` (raising the first failure as a WorkerError)."""
        return [self.wait_one(f, w, count_bytes) for f, w in zip(futs, workers)]

    def wait_one(self, fut: Any, worker: str, count_bytes: bool = True) -> Any:
        ev = threading.Event()
        fut.add_done_callback(lambda _f: ev.set())
        deadline = time.monotonic() + self.timeout + 10.0
        while not ev.wait(0.2):
            self.cluster.check_alive([worker])
            if time.monotonic() > deadline:
                raise WorkerTimeout(f"{worker} did not answer within {self.timeout:.1f}s "
                                    "(policy.timeout)", worker)
        try:
            value = fut.wait()
        except Exception as err:  # noqa: BLE001 - translated
            raise self.translate(err, worker) from None
        if count_bytes:
            self.stats.bytes_received += _nbytes(value)
        return value

    def translate(self, err: BaseException, worker: str) -> WorkerError:
        text = str(err)
        dead = self.cluster.dead()
        if worker in dead or (dead and ("connection" in text.lower() or "eof" in text.lower()
                                        or "pipe" in text.lower())):
            who = worker if worker in dead else dead[0]
            try:
                self.cluster.check_alive([who])
            except WorkerDied as died:
                return WorkerDied(f"{died} (while waiting for {worker})", who)
        if "timed out" in text.lower() or "timeout" in text.lower():
            return WorkerTimeout(f"{worker} did not answer within {self.timeout:.1f}s "
                                 f"(policy.timeout): {text.splitlines()[0] if text else ''}", worker)
        if not self.cluster.torchrun:
            # Wait briefly: a connection error is often the first sign of a death.
            time.sleep(0.3)
            if worker in self.cluster.dead():
                try:
                    self.cluster.check_alive([worker])
                except WorkerDied as died:
                    return died
        return WorkerError(f"{worker} raised:\n{text}", worker)


def _cat_raw(raws: Sequence[torch.Tensor | None]) -> torch.Tensor | None:
    """The actors' raw rewards concatenated along the env dimension (``None`` when none were sent)."""
    if not raws or any(r is None for r in raws):
        return None
    return torch.cat(list(raws), dim=0) if len(raws) > 1 else raws[0]


class _Passthrough(nn.Module):
    """Stands in on the driver for a fragment that ran on the actors after their rollout."""

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return tensordict


class _ActorsStub(nn.Module):
    """Stands in for the rollout fragment under ``actors``: one RPC per actor per iteration."""

    def __init__(self, ex: _RpcExecutor, node: str) -> None:
        super().__init__()
        self.__dict__["ex"] = ex
        self.node = node

    def forward(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        ex = self.ex
        weights = ex.weights_for_sync()
        actors = list(ex.actors)
        futs = [ex.calls.call(w, _remote_rollout, weights, ex.version) for w in actors]
        arrived: queue.SimpleQueue[int] = queue.SimpleQueue()
        for j, f in enumerate(futs):
            f.add_done_callback(lambda _f, j=j: arrived.put(j))
        batches: list[TensorDictBase | None] = [None] * len(actors)
        raws: list[torch.Tensor | None] = [None] * len(actors)
        answered: set[int] = set()
        produced: list[list[list[torch.Tensor]]] = []
        for _ in range(len(actors)):
            # In arrival order: the per-env fragments run on one batch while the others travel.
            j = self._next_arrival(arrived, [w for k, w in enumerate(actors) if k not in answered])
            answered.add(j)
            try:
                batch, _, raw, made = ex.calls.wait_one(futs[j], actors[j])
            except WorkerError as err:
                if not ex.continue_on_failure(actors[j], err):
                    raise
                continue
            produced.append(made)
            if ex.arrival_chain:
                batch, raw = _run_chain(ex.arrival_chain, batch, raw)
            batches[j], raws[j] = batch, raw
        got = [b for b in batches if b is not None]
        if not got:
            raise WorkerError("every actor failed")
        kept = [r for b, r in zip(batches, raws) if b is not None]
        ex.merge_produced(produced)
        batch = torch.cat(got, dim=0) if len(got) > 1 else got[0]
        if not ex.failed and not ex.full_frames:
            ex.full_frames = batch.numel()
        elif ex.full_frames:
            # Fewer actors than asked answer (on_failure=continue): fewer frames.
            ex.frames_missing += max(0, ex.full_frames - batch.numel())
        ex.account(batch, _cat_raw(kept))
        return batch

    def _next_arrival(self, arrived: queue.SimpleQueue[int], pending: list[str]) -> int:
        """Index of the next actor whose answer (or failure) arrived; watches the pending workers."""
        ex = self.ex
        deadline = time.monotonic() + ex.calls.timeout + 10.0
        while True:
            try:
                return arrived.get(timeout=0.2)
            except queue.Empty:
                ex.cluster.check_alive(list(pending))
                if time.monotonic() > deadline:
                    raise WorkerTimeout(f"{', '.join(pending)} did not answer within "
                                        f"{ex.calls.timeout:.1f}s (policy.timeout)",
                                        pending[0] if pending else None) from None


def _run_chain(chain: Sequence[nn.Module], batch: TensorDictBase,
               raw: torch.Tensor | None) -> tuple[TensorDictBase, torch.Tensor | None]:
    """Runs per-env fragments on one actor's batch; keeps its raw reward if a fragment rescales it."""
    before = batch.get(_REWARD, None) if raw is None else raw
    for frag in chain:
        batch = frag(batch)
    if raw is None and before is not None and batch.get(_REWARD, None) is not before:
        raw = before
    return batch, raw


class _AsyncActorsStub(nn.Module):
    """Stands in for the rollout fragment under ``async_actors``: requests stay in flight."""

    def __init__(self, ex: _RpcExecutor, node: str) -> None:
        super().__init__()
        self.__dict__["ex"] = ex
        self.node = node
        self.__dict__["inflight"] = []  # (future, worker, version)
        self.__dict__["ready"] = deque()
        self.__dict__["cv"] = threading.Condition()

    def _issue(self, worker: str) -> None:
        ex = self.ex
        weights = ex.weights_for_sync(force=True)
        fut = ex.calls.call(worker, _remote_rollout, weights, ex.version)
        entry = (fut, worker)

        def done(_f: Any, entry: Any = entry) -> None:
            with self.cv:
                self.ready.append(entry)
                self.cv.notify_all()

        fut.add_done_callback(done)

    def start(self) -> None:
        for _ in range(int(self.ex.policy.prefetch)):
            for w in self.ex.actors:
                self._issue(w)

    def _next(self) -> tuple[Any, str]:
        ex = self.ex
        deadline = time.monotonic() + ex.calls.timeout + 10.0
        with self.cv:
            while not self.ready:
                self.cv.wait(0.2)
                ex.cluster.check_alive(list(ex.actors))
                if time.monotonic() > deadline:
                    raise WorkerTimeout(f"no rollout arrived within {ex.calls.timeout:.1f}s (policy.timeout)")
            return self.ready.popleft()

    def forward(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        ex = self.ex
        if not self.__dict__.get("started"):
            self.__dict__["started"] = True
            self.start()
        need = int(ex.policy.batches_per_learn or len(ex.actors))
        batches, lags, raws, produced = [], [], [], []
        while len(batches) < need:
            fut, worker = self._next()
            try:
                batch, version, raw, made = ex.calls.wait_one(fut, worker)
            except WorkerError as err:
                if not ex.continue_on_failure(worker, err):
                    raise
                need = min(need, len(ex.actors)) if ex.actors else need
                continue
            lag = ex.version - int(version)
            if worker in ex.actors:
                self._issue(worker)
            if lag > int(ex.policy.staleness):
                ex.dropped += 1
                continue
            batches.append(batch)
            raws.append(raw)
            lags.append(lag)
            produced.append(made)
        ex.lags.extend(lags)
        ex.last_lag = lags
        ex.merge_produced(produced)
        batch = torch.cat(batches, dim=0) if len(batches) > 1 else batches[0]
        ex.account(batch, _cat_raw(raws))
        return batch


class _CentralRollout(nn.Module):
    """The driver's rollout under ``central_inference``: act here, env steps on the env workers."""

    def __init__(self, ex: _RpcExecutor, rollout: Any, sizes: list[int]) -> None:
        super().__init__()
        self.__dict__["ex"] = ex
        self.__dict__["rollout"] = rollout
        self.sizes = sizes
        self.__dict__["carry"] = None

    def forward(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        ex, ro = self.ex, self.rollout
        envs = list(ex.env_workers)
        carry = tensordict if tensordict is not None else self.carry
        if carry is None:
            futs = [ex.calls.call(w, _remote_env_reset) for w in envs]
            carry = torch.cat(ex.calls.wait(futs, envs), dim=0)
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
            futs = [ex.calls.call(w, _remote_env_step, part) for w, part in zip(envs, parts)]
            results = ex.calls.wait(futs, envs)
            transition = torch.cat([r[0] for r in results], dim=0)
            carry = torch.cat([r[1] for r in results], dim=0)
            out.append(transition)
        self.__dict__["carry"] = carry
        batch = torch.stack(out, dim=ro._time_dim)
        ex.account(batch)
        return batch


@dataclass
class _RpcExecutor:
    policy: Any
    graph: FragmentGraph
    factory: Any
    cluster: Cluster
    calls: _Calls = None  # type: ignore[assignment]
    stats: CommStats = field(default_factory=CommStats)
    version: int = 0
    synced_version: int = -1
    actors: list[str] = field(default_factory=list)
    env_workers: list[str] = field(default_factory=list)
    lags: list[int] = field(default_factory=list)
    last_lag: list[int] = field(default_factory=list)
    dropped: int = 0
    failed: list[str] = field(default_factory=list)
    frames_missing: int = 0
    full_frames: int = 0
    rollout_node: str | None = None
    arrival_chain: list[nn.Module] = field(default_factory=list)
    iteration: int = 0
    dp_opts: list[tuple[Any, Any]] = field(default_factory=list)
    state_frags: list[Any] = field(default_factory=list)

    def weights_for_sync(self, force: bool = False) -> list[list[torch.Tensor]] | None:
        """The actors' chain state to send with this request (``None``: no sync this iteration)."""
        every = int(getattr(self.policy, "sync_every", 1))
        if self.synced_version == self.version:
            return None if not force else self._state_cached
        if not force and self.synced_version >= 0 and self.iteration % every != 0:
            return None
        self._state_cached = [[t.detach().clone() for t in f.shared_state().values()]
                              for f in self.state_frags]
        self.synced_version = self.version
        return self._state_cached

    def merge_produced(self, produced: Sequence[list[list[torch.Tensor]]]) -> None:
        """Folds the actors' produced state (running statistics) into the driver's fragments."""
        if not produced:
            return
        for i, frag in enumerate(self.state_frags):
            base = {k: v.detach().clone() for k, v in frag.produced_state().items()}
            if not base:
                continue
            keys = list(base)
            frag.merge_produced_state(base, [dict(zip(keys, p[i])) for p in produced])

    def account(self, batch: TensorDictBase, reward: torch.Tensor | None = None) -> None:
        """Frames and episode stats of a gathered batch, kept on the driver's rollout fragment.

        Args:
            batch: The gathered batch.
            reward: The rollout's own rewards when the batch's were rescaled on the actors.
        """
        if self.rollout_node is None:
            return
        ro = self.graph.fragment(self.rollout_node)
        if hasattr(ro, "frames"):
            ro.frames += batch.numel()
        stats = getattr(ro, "stats", None)
        if stats is not None and batch.ndim == 2 and "next" in batch.keys():
            nxt = batch.get("next")
            stats.update(nxt.get("reward") if reward is None else reward, nxt.get("done"))

    def continue_on_failure(self, worker: str, err: WorkerError) -> bool:
        if getattr(self.policy, "on_failure", "raise") != "continue":
            return False
        logger.warning("actor %s failed (%s); continuing with %d actor(s)", worker,
                       str(err).splitlines()[0], len(self.actors) - 1)
        if worker in self.actors:
            self.actors.remove(worker)
        self.failed.append(worker)
        if not self.actors:
            return False
        return True


def _split(n: int, parts: int) -> list[int]:
    base, extra = divmod(n, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


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
    _check_env_split(graph, policy, placement, factory)
    from torchfrag.policies.base import rollout_nodes
    from torchfrag.policies.contract import check_factory

    placed = [n for n, r in placement.roles.items() if r != "learner"] + list(placement.env_split)
    found = [n for n in placed + rollout_nodes(graph)
             if n in rollout_nodes(graph) and getattr(graph.fragment(n), "env", None) is not None]
    check_factory(factory, placement, _envs_of(graph, factory, found[0]) if found else None)
    cluster = Cluster(policy.num_workers, timeout=policy.timeout, addr=policy.master_addr,
                      port=policy.master_port)
    stats = CommStats()
    ex = _RpcExecutor(policy, graph, factory, cluster, _Calls(cluster, policy.timeout, stats), stats)
    replace: dict[str, nn.Module] = {}
    hooks = list(hooks or ())
    out: Any = None
    done = 0
    stopped = False
    t0 = time.perf_counter()
    try:
        cluster.start()
        fn = _prepare(ex, placement, replace)
        args = tuple(inputs)
        for i in range(start, start + iterations):
            ex.iteration = i - start
            out = fn(*args) if fn is not None else None
            if placement.kind == "replicated_loop":
                out = _dp_finish(ex, out)
            ex.version += 1
            if ex.last_lag and isinstance(out, TensorDictBase):
                out.set("policy_lag", torch.tensor(sum(ex.last_lag) / len(ex.last_lag)))
                out.set("policy_lag_max", torch.tensor(float(max(ex.last_lag))))
            done += 1
            if hooks and any([bool(h(i, out, graph)) for h in hooks]):
                stopped = True
                break
    finally:
        cluster.shutdown()
        if placement.kind == "replicated_loop":
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
    if ex.dp_opts:
        opts = [o for o, _ in ex.dp_opts if o is not None]
        extra["comm"]["allreduce_bytes"] = sum(getattr(o, "reduced_bytes", 0) for o in opts) / max(1, done)
        extra["comm"]["allreduce_calls"] = sum(getattr(o, "reduce_calls", 0) for o in opts) / max(1, done)
    return RunResult(graph, done, out, seconds, stopped, extra)


def _check_picklable(factory: Any, policy: Any) -> None:
    import pickle

    from torchfrag.policies.base import PolicyError

    try:
        pickle.dumps(factory)
    except Exception as err:  # noqa: BLE001
        raise PolicyError(f"policy {policy.name}: the loop factory {factory!r} cannot be pickled "
                          f"({err}); use a module-level function, functools.partial or a dataclass") from None


def _total_envs(ex: _RpcExecutor, node: str) -> int:
    return _envs_of(ex.graph, ex.factory, node)


def _envs_of(graph: FragmentGraph, factory: Any, node: str) -> int:
    frag = graph.fragment(node)
    env = getattr(frag, "env", None)
    if env is not None:
        return int(env.batch_size.numel())
    n = getattr(factory, "num_envs", None)
    if n is None:
        raise WorkerError(f"cannot tell how many envs {node} steps")
    return int(n)


def _check_env_split(graph: FragmentGraph, policy: Any, placement: Any, factory: Any) -> None:
    """Fails (before any process starts) when the envs cannot be split over the workers."""
    from torchfrag.policies.base import PolicyError, rollout_nodes

    name, kind = policy.name, placement.kind
    if kind in ("replicated_rollout", "async_replicated_rollout"):
        nodes = [n for n, r in placement.roles.items() if r != "learner"]
        if not nodes or nodes[0] not in rollout_nodes(graph):
            raise PolicyError(f"policy {name} places {nodes} on the actors; a rollout fragment "
                              "(and the chain after it) is needed")
        if getattr(policy, "envs_per_actor", None) is None:
            total = _envs_of(graph, factory, nodes[0])
            if total < policy.num_workers:
                raise PolicyError(f"policy {name}: {policy.num_workers} actors but the loop has only "
                                  f"{total} envs (set policy.envs_per_actor or use fewer actors)")
    elif kind == "env_calls":
        nodes = list(placement.env_split)
        if not nodes:
            raise PolicyError(f"policy {name} needs a rollout fragment with an env in the loop")
        total = int(graph.fragment(nodes[0]).env.batch_size.numel())
        if total < policy.num_workers:
            raise PolicyError(f"policy {name}: {policy.num_workers} env workers but the loop has only "
                              f"{total} envs")


def _prepare(ex: _RpcExecutor, placement: Any, replace: dict[str, nn.Module]) -> Any:
    from torchfrag.policies.base import rollout_nodes
    from torchfrag.policies.factory import EnvSlice

    policy, graph, calls = ex.policy, ex.graph, ex.calls
    workers = ex.cluster.workers
    extra = {"env_threads": getattr(policy, "env_threads", None), "seed": getattr(ex.factory, "seed", 0)}
    name, kind = policy.name, placement.kind
    if kind in ("replicated_rollout", "async_replicated_rollout"):
        # the rollout, then (optionally) per-env fragments
        chain = [n for n, r in placement.roles.items() if r != "learner"]
        if not chain:
            from torchfrag.policies.base import PolicyError

            raise PolicyError(f"policy {name} places no fragment on the actors; a rollout fragment is needed")
        node = chain[0]
        ex.rollout_node = node if node in rollout_nodes(graph) else None
        total = _total_envs(ex, node)
        n = len(workers)
        if getattr(policy, "envs_per_actor", None) is None:
            if total < n:
                from torchfrag.policies.base import PolicyError

                raise PolicyError(f"policy {name}: {n} actors but the loop has only {total} envs")
            sizes = _split(total, n)
            all_envs = total
        else:
            sizes = [int(policy.envs_per_actor)] * n
            all_envs = sum(sizes)
        offsets = [sum(sizes[:i]) for i in range(n)]
        futs = [calls.call(w, _remote_setup, ex.factory, EnvSlice(o, s, all_envs, i, i + 1), "actor", chain,
                           i + 1, extra, timeout=policy.timeout)
                for i, (w, o, s) in enumerate(zip(workers, offsets, sizes))]
        calls.wait(futs, workers, count_bytes=False)
        ex.actors = list(workers)
        ex.state_frags = [graph.fragment(n) for n in chain]
        steps = getattr(graph.fragment(node), "steps", None)
        ex.full_frames = int(steps) * all_envs if isinstance(steps, int) else 0
        stub = _ActorsStub(ex, node) if kind == "replicated_rollout" else _AsyncActorsStub(ex, node)
        replace[graph.node(node).target] = stub
        for other in chain[1:]:  # ran on the actors: the stub's batch already went through them
            replace[graph.node(other).target] = _Passthrough()
        if kind == "replicated_rollout" and getattr(policy, "advantage", "learner") == "on_arrival":
            # The per-env fragments left on the learner right after the actors' chain run on
            # each actor's batch as it arrives (in the stub), not on the gathered batch.
            from torchfrag.policies.base import per_env_chain

            following = per_env_chain(graph, node)
            if following[:len(chain) - 1] == chain[1:]:
                rest = following[len(chain) - 1:]
                ex.arrival_chain = [graph.fragment(n) for n in rest]
                for other in rest:
                    replace[graph.node(other).target] = _Passthrough()
        calls.stats.calls = 0
        calls.stats.bytes_sent = 0
        return _graph_module_with(graph, replace)
    if kind == "env_calls":
        node = next(iter(placement.env_split))
        ex.rollout_node = node
        ro = graph.fragment(node)
        total = int(ro.env.batch_size.numel())
        n = len(workers)
        if total < n:
            from torchfrag.policies.base import PolicyError

            raise PolicyError(f"policy {name}: {n} env workers but the loop has only {total} envs")
        sizes = _split(total, n)
        offsets = [sum(sizes[:i]) for i in range(n)]
        futs = [calls.call(w, _remote_setup, ex.factory, EnvSlice(o, s, total, i, i + 1), "env", node, None,
                           extra, timeout=policy.timeout)
                for i, (w, o, s) in enumerate(zip(workers, offsets, sizes))]
        calls.wait(futs, workers, count_bytes=False)
        ex.env_workers = list(workers)
        central = _CentralRollout(ex, ro, sizes)
        ex.rollout_node = None  # _CentralRollout accounts itself
        ex.__dict__["central_rollout"] = node
        replace[graph.node(node).target] = _CentralAccounting(central, ro)
        calls.stats.calls = 0
        calls.stats.bytes_sent = 0
        calls.stats.bytes_received = 0
        return _graph_module_with(graph, replace)
    if kind == "replicated_loop":
        from torchfrag.runtime.launcher import free_port

        world = policy.workers
        found = rollout_nodes(graph)
        ex.rollout_node = found[0] if found else None
        total = _total_envs(ex, found[0]) if found else 0
        if ex.cluster.torchrun:
            pg_init = f"tcp://{ex.cluster.addr}:{ex.cluster.port + 1}"
        elif ex.cluster.store_dir is not None:
            pg_init = ex.cluster.rendezvous("process_group")
        else:
            pg_init = f"tcp://{ex.cluster.addr}:{free_port(ex.cluster.addr)}"
        futs = []
        for i, w in enumerate(workers):
            rank = i + 1
            if policy.replicate_envs or not found:
                sl, seed_off = None, None
            else:
                sl, seed_off = EnvSlice(rank * total, total, total * world, rank, rank), rank
            futs.append(calls.call(w, _remote_setup, ex.factory, sl, "replica", None, seed_off, extra,
                                   timeout=policy.timeout))
        calls.wait(futs, workers, count_bytes=False)
        futs = [calls.call(w, _remote_dp_setup, i + 1, world, pg_init, policy.backend,
                           policy.timeout) for i, w in enumerate(workers)]
        import datetime

        import torch.distributed as dist

        dist.init_process_group(policy.backend, init_method=pg_init, rank=0,
                                world_size=world, timeout=datetime.timedelta(seconds=policy.timeout))
        ex.dp_opts = _install_allreduce(graph, world)
        calls.wait(futs, workers, count_bytes=False)
        calls.stats.calls = 0
        calls.stats.bytes_sent = 0
        ex.__dict__["dp_fn"] = graph.module
        return _DPIteration(ex)
    from torchfrag.policies.base import PolicyError

    raise PolicyError(f"policy {name}: a placement of kind {kind!r} runs in process, not on the RPC executor")


class _CentralAccounting(nn.Module):
    def __init__(self, central: _CentralRollout, rollout: Any) -> None:
        super().__init__()
        self.central = central
        self.__dict__["rollout"] = rollout

    def forward(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        batch = self.central(tensordict)
        ro = self.rollout
        ro.frames += batch.numel()
        if ro._time_dim == 1:
            nxt = batch.get("next")
            ro.stats.update(nxt.get("reward"), nxt.get("done"))
        return batch


class _DPIteration:
    def __init__(self, ex: _RpcExecutor) -> None:
        self.ex = ex

    def __call__(self, *args: Any) -> Any:
        ex = self.ex
        futs = [ex.calls.call(w, _remote_dp_iterate) for w in ex.cluster.workers]
        out = ex.__dict__["dp_fn"](*args)
        ex.__dict__["dp_futs"] = futs
        return out


def _dp_finish(ex: _RpcExecutor, out: Any) -> Any:
    futs = ex.__dict__.pop("dp_futs", [])
    results = ex.calls.wait(futs, ex.cluster.workers)
    if ex.rollout_node is not None:
        ro = ex.graph.fragment(ex.rollout_node)
        # Frames of the other ranks: each reports its running total.
        totals = ex.__dict__.setdefault("dp_seen", [0] * len(results))
        for j, r in enumerate(results):
            new = int(r["frames"]) - totals[j]
            totals[j] = int(r["frames"])
            ro.frames += new
    return out
