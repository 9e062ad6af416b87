"""Starting and stopping the processes of a distributed policy.

Two ways to get workers:

* **local spawn** (default): the driver (this process, rank 0, RPC name
  ``"driver"``) spawns ``N`` worker processes (``worker1`` ... ``workerN``)
  with the ``spawn`` start method. Workers die with the driver
  (``PR_SET_PDEATHSIG``), ignore ``Ctrl-C`` (the driver shuts them down) and
  are killed if they do not exit on request: no orphans.
* **torchrun**: when ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT`` are
  set (``torchrun`` sets them), rank 0 is the driver and every other rank serves
  as a worker; the same command runs on every machine::

      # machine A (driver)                       # machine B
      torchrun --nnodes 2 --node-rank 0 \\        torchrun --nnodes 2 --node-rank 1 \\
        --nproc-per-node 1 \\                       --nproc-per-node 4 \\
        --master-addr A --master-port 29500 \\      --master-addr A --master-port 29500 \\
        -m torchfrag.train policy=actors \\         -m torchfrag.train policy=actors \\
        policy.actors=4                             policy.actors=4

  The world size must be ``policy.num_workers + 1``. ``TORCHFRAG_RPC_PORT``
  (default ``MASTER_PORT + 1``) is the RPC rendezvous port. Node 0's address is
  ``policy.master_addr``/``TORCHFRAG_MASTER_ADDR``, or torchrun's ``MASTER_ADDR``
  while that is left at loopback.

Where things listen: rank 0's rendezvous stores bind to the master address only
(:mod:`torchfrag.runtime.rendezvous`); every process's TensorPipe agent and gloo
groups listen on the interface that reaches the master address (loopback for a
run on one machine), named to them through ``TP_SOCKET_IFNAME`` and
``GLOO_SOCKET_IFNAME`` unless those are already set (:mod:`torchfrag.network`).
torchrun's own store (``MASTER_PORT``) is torchrun's.

Example:
    >>> from torchfrag.runtime.launcher import free_port
    >>> 1024 <= free_port() < 65536
    True
"""
from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing as mp
import os
import signal
import socket
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

from torchfrag.network import AddressError, check_master_addr, interface_for, socket_ifname_env
from torchfrag.runtime.rendezvous import MasterUnreachable, register, rendezvous_url

logger = logging.getLogger(__name__)

__all__ = ["Cluster", "DriverLost", "MasterUnreachable", "WorkerError", "WorkerDied", "WorkerTimeout",
           "PING_INTERVAL_S", "free_port", "torchrun_env", "serve_worker"]

_DRIVER = "driver"

#: How often a torchrun worker pings the driver; one that gets no answer within
#: ``policy.timeout`` exits, so a worker of a driver that died or was cut off is gone within
#: ``policy.timeout + PING_INTERVAL_S`` (plus a poll of 0.5 s).
PING_INTERVAL_S = 2.0


class WorkerError(RuntimeError):
    """A worker raised (the remote traceback is in the message)."""

    def __init__(self, message: str, worker: str | None = None) -> None:
        super().__init__(message)
        self.worker = worker


class WorkerDied(WorkerError):
    """A worker process exited or was killed."""


class WorkerTimeout(WorkerError):
    """A worker did not answer within the policy's timeout."""


class DriverLost(ConnectionError):
    """A torchrun worker lost its driver (it died or its host was cut off): a one-line message."""


def free_port(addr: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``addr`` right now."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with contextlib.closing(socket.socket(family, socket.SOCK_STREAM)) as s:
        s.bind((addr, 0))
        return int(s.getsockname()[1])


def torchrun_env() -> dict[str, Any] | None:
    """``{rank, world_size, master_addr, master_port}`` when started by torchrun, else ``None``."""
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_PORT" in os.environ:
        return {"rank": int(os.environ["RANK"]), "world_size": int(os.environ["WORLD_SIZE"]),
                "master_addr": os.environ.get("MASTER_ADDR", "127.0.0.1"),
                "master_port": int(os.environ["MASTER_PORT"])}
    return None


def _set_pdeathsig() -> None:
    """Linux: get SIGKILL when the parent dies, so a killed driver leaves no orphans."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:  # pragma: no cover
        pass


def _rpc_options(addr: str, port: int, timeout: float, init_method: str | None = None) -> Any:
    from torch.distributed import rpc

    return rpc.TensorPipeRpcBackendOptions(
        init_method=init_method or rendezvous_url(addr, port, wait_s=timeout), rpc_timeout=float(timeout),
        num_worker_threads=8, _transports=["uv"], _channels=["basic"])


#: Messages TensorPipe logs when a peer closes its pipes at a normal shutdown.
_SHUTDOWN_NOISE = ("pipe closed", "EOF: end of file", "tensorpipe_agent.cpp")


#: torch's own ``init_rpc`` exchanges device maps with ``all_gather_object`` on an internal
#: Gloo backend object, which makes torch warn "You are using a Backend ... as a ProcessGroup"
#: once per process. The call is torch's, not the user's: nothing they can act on.
_INIT_RPC_DEPRECATION = r"You are using a Backend .* as a ProcessGroup"


def init_rpc_quietly(name: str, rank: int, world_size: int, options: Any) -> None:
    """``rpc.init_rpc`` without torch's internal ProcessGroup deprecation warning.

    The filter is narrow (that message, issued from ``torch.distributed``) and is
    installed once per process, so it is thread-safe (the driver initialises its
    agent in a helper thread) and hides no other warning.
    """
    warnings.filterwarnings("ignore", message=_INIT_RPC_DEPRECATION, category=UserWarning,
                            module=r"torch\.distributed")
    from torch.distributed import rpc

    rpc.init_rpc(name, rank=rank, world_size=world_size, rpc_backend_options=options)


@contextlib.contextmanager
def quiet_shutdown_noise() -> Any:
    """Hides TensorPipe's "pipe closed" / "EOF" lines written to fd 2 inside the block.

    They are C++ log lines (not Python warnings) that every normal shutdown of an RPC
    agent prints; the rest of what is written to fd 2 meanwhile is passed through.
    """
    import tempfile

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real fd 2 (embedded interpreters)
        yield
        return
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            for line in tmp.read().decode(errors="replace").splitlines(keepends=True):
                if not any(n in line for n in _SHUTDOWN_NOISE):
                    sys.stderr.write(line)


def _is_stopped(pid: int | None) -> bool:
    """Linux: whether process ``pid`` is stopped (state ``T``/``t``); ``False`` elsewhere."""
    if pid is None:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:][:1] in ("T", "t")


def _rpc_init_counter() -> int:
    import torch.distributed.rpc as rpc_mod

    return int(getattr(rpc_mod, "_init_counter", 0))


class _DriverWatch:
    """Pings the driver every :data:`PING_INTERVAL_S` seconds from a torchrun worker.

    Args:
        addr: The driver's address (for the message).
        timeout: How long a ping may go unanswered (``policy.timeout``).
        stopping: Whether the driver already told this worker to stop (a failed ping then
            means nothing).
    """

    def __init__(self, addr: str, timeout: float, stopping: Any) -> None:
        self.addr, self.timeout, self.stopping = addr, float(timeout), stopping
        self.fut: Any = None
        self.next = time.monotonic() + PING_INTERVAL_S

    def poll(self) -> None:
        """Sends the next ping when due, checks the last one.

        Raises:
            DriverLost: The last ping failed (no answer within the timeout, or the connection broke).
        """
        from torch.distributed import rpc

        from torchfrag.runtime import worker as rt

        now = time.monotonic()
        if self.fut is None:
            if now >= self.next:
                self.fut = rpc.rpc_async(_DRIVER, rt._ping, timeout=self.timeout)
            return
        if not self.fut.done():
            return
        fut, self.fut, self.next = self.fut, None, now + PING_INTERVAL_S
        try:
            fut.wait()
        except Exception as err:  # noqa: BLE001 - becomes the one-line reason
            if self.stopping():
                return
            text = str(err)
            reason = (f"no answer within {self.timeout:.0f}s (policy.timeout)" if "timeout" in text.lower()
                      else f"connection lost: {text.strip().splitlines()[0] if text.strip() else type(err).__name__}")
            raise DriverLost(f"lost the driver at {self.addr} ({reason}); exiting") from None


def serve_worker(rank: int, world_size: int, addr: str, port: int, timeout: float,
                 init_counter: int = 0, init_method: str | None = None) -> None:
    """Body of a worker process: join RPC, serve calls until the driver says stop, exit.

    Args:
        rank: This worker's rank (>= 1).
        world_size: Driver plus workers.
        addr: RPC rendezvous address.
        port: RPC rendezvous port.
        timeout: RPC timeout in seconds.
        init_counter: The driver's count of earlier RPC initialisations: RPC prefixes
            its rendezvous keys with it, so a fresh worker must use the same value.
        init_method: The rendezvous (``file://`` for spawned workers); ``None``: rank 0's store
            at ``addr:port`` (``torchfrag://``).

    A worker with no parent process to watch (a torchrun rank) pings the driver instead
    (:class:`_DriverWatch`) and exits when that fails.

    Raises:
        MasterUnreachable: The rendezvous at ``addr:port`` did not answer within ``timeout``.
        DriverLost: A torchrun worker's driver stopped answering.
    """
    import torch.distributed.rpc as rpc_mod
    from torch.distributed import rpc

    from torchfrag.runtime import worker as rt

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    register()  # the torchfrag:// rendezvous of RPC and of process groups
    rt._WORKER["stop"] = threading.Event()
    rt._WORKER["rank"] = rank
    rpc_mod._init_counter = int(init_counter)
    init_rpc_quietly(f"worker{rank}", rank, world_size, _rpc_options(addr, port, timeout, init_method))
    logger.debug("worker%d up", rank)
    stop: threading.Event = rt._WORKER["stop"]
    parent = rt._WORKER.get("parent")
    watch = _DriverWatch(addr, timeout, stop.is_set) if parent is None else None
    while not stop.wait(0.5):
        if parent is not None and os.getppid() != parent:
            logger.warning("worker%d: the driver is gone; exiting", rank)
            break
        if watch is not None:
            watch.poll()
    time.sleep(0.05)  # let the reply to the stop request leave
    with contextlib.suppress(Exception):
        rt._close_worker_state()


def _spawn_main(rank: int, world_size: int, addr: str, port: int, timeout: float,
                log_level: int, init_counter: int, init_method: str | None = None) -> None:
    _set_pdeathsig()
    parent = int(os.environ.get("TORCHFRAG_DRIVER_PID", "0")) or None
    if parent is not None and os.getppid() != parent:
        os._exit(1)  # the driver died before PR_SET_PDEATHSIG took effect
    from torchfrag.runtime import worker as rt

    rt._WORKER["parent"] = parent
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=log_level, format=f"[worker{rank}] %(levelname)s %(name)s: %(message)s")
    code = 0
    try:
        serve_worker(rank, world_size, addr, port, timeout, init_counter, init_method)
    except BaseException:  # noqa: BLE001 - reported, then a hard exit
        logger.exception("worker%d failed", rank)
        code = 1
    # A hard exit: RPC's own teardown can block on peers that are gone.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@dataclass
class Cluster:
    """The driver's view of the RPC world: worker names, processes, liveness, shutdown.

    Args:
        num_workers: Worker processes besides the driver.
        timeout: RPC timeout (seconds); also bounds start-up and shutdown.
        addr: RPC listen/rendezvous address (loopback by default).
        port: Rendezvous port (0: a free one).

    Example:
        >>> from torchfrag.runtime.launcher import Cluster
        >>> c = Cluster(0)
        >>> c.workers
        []
    """

    num_workers: int
    timeout: float = 120.0
    addr: str = "127.0.0.1"
    port: int = 0
    procs: dict[str, Any] = field(default_factory=dict)
    torchrun: bool = False
    started: bool = False
    store_dir: str | None = None
    #: Environment variables this cluster set in the driver's process, with their earlier values.
    saved_env: dict[str, str | None] = field(default_factory=dict)
    #: Under torchrun: worker name -> ``{"rank", "pid", "address"}`` it reported at start-up.
    places: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Workers that died or stopped answering: :meth:`shutdown` does not wait for them.
    lost: set[str] = field(default_factory=set)

    def rendezvous(self, name: str) -> str:
        """``init_method`` of a rendezvous: a file store for spawned workers (no port listens on
        any interface), rank 0's store on ``addr:port`` under torchrun (other nodes must reach it)."""
        if self.store_dir is not None:
            return f"file://{os.path.join(self.store_dir, name)}"
        return rendezvous_url(self.addr, self.port, wait_s=self.timeout)

    def process_group_init(self, name: str) -> str:
        """``init_method`` of a process group among some of this cluster's processes.

        Under torchrun, the port after RPC's (other nodes must reach it); with spawned
        workers, a file store named ``name``; otherwise a free local port.
        """
        if self.torchrun:
            return rendezvous_url(self.addr, self.port + 1, wait_s=self.timeout)
        if self.store_dir is not None:
            return self.rendezvous(name)
        return rendezvous_url(self.addr, free_port(self.addr), wait_s=self.timeout)

    @property
    def workers(self) -> list[str]:
        """RPC names of the workers."""
        return [f"worker{r}" for r in range(1, self.num_workers + 1)]

    def start(self) -> None:
        """Spawns the workers (or joins torchrun's) and initialises RPC on the driver."""
        from torch.distributed import rpc

        env = torchrun_env()
        world = self.num_workers + 1
        if env is not None:
            if env["world_size"] != world:
                raise WorkerError(
                    f"torchrun started {env['world_size']} processes but the policy needs "
                    f"{world} (1 driver + {self.num_workers} workers): set --nproc-per-node/--nnodes "
                    "so that their product is the policy's worker count + 1")
            self.torchrun = True
            self.addr = self._master_ip(env)
            self.port = int(os.environ.get("TORCHFRAG_RPC_PORT", env["master_port"] + 1))
            # torchrun sets TORCHELASTIC_USE_AGENT_STORE=True, which turns every tcp://
            # rendezvous into a *client* of a store nobody hosts at our RPC port (the agent's
            # store is at MASTER_PORT): rank 0 hosts the RPC (and gloo) stores itself.
            os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "False"
            if env["rank"] != 0:
                _set_pdeathsig()
                from torchfrag.runtime import worker as rt

                code = 0
                try:
                    os.environ.update(self._interface_env())
                    rt._WORKER["address"] = interface_for(self.addr)[1]
                    serve_worker(env["rank"], world, self.addr, self.port, self.timeout)
                except (MasterUnreachable, DriverLost) as err:  # one line: nothing else to tell
                    logger.error("worker%d (host %s): %s", env["rank"], rt._WORKER.get("address", "?"), err)
                    code = 1
                except BaseException:  # noqa: BLE001 - reported, then a hard exit
                    logger.exception("worker%d failed", env["rank"])
                    code = 1
                # A hard exit, as for spawned workers: RPC's teardown can block on a driver
                # that is already gone, and this rank has nothing else to do.
                logging.shutdown()
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
            self._export_env(self._interface_env())
        else:
            import tempfile

            self.addr = self._master_ip(None)
            self._export_env(self._interface_env())
            self.store_dir = tempfile.mkdtemp(prefix="torchfrag-rdzv-")
            ctx = mp.get_context("spawn")
            os.environ["TORCHFRAG_DRIVER_PID"] = str(os.getpid())
            level = logging.getLogger().getEffectiveLevel()
            # Workers' C++ logs at ERROR: TensorPipe warns "EOF"/"pipe closed" at every normal
            # shutdown. A user's own TORCH_CPP_LOG_LEVEL wins.
            had = os.environ.get("TORCH_CPP_LOG_LEVEL")
            os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
            try:
                for r in range(1, world):
                    p = ctx.Process(target=_spawn_main, name=f"torchfrag-worker{r}",
                                    args=(r, world, self.addr, self.port, self.timeout, level,
                                          0, self.rendezvous("rpc")), daemon=True)
                    p.start()
                    self.procs[f"worker{r}"] = p
            finally:
                if had is None:
                    os.environ.pop("TORCH_CPP_LOG_LEVEL", None)
        logger.info("starting RPC: driver + %d workers listening on %s (interface %s; rendezvous %s)",
                    self.num_workers, self.addr, os.environ.get("TP_SOCKET_IFNAME", "?"),
                    self.rendezvous("rpc"))
        try:
            self._init_driver_rpc(world)
        except BaseException:
            self.kill()
            raise
        self.started = True
        if self.torchrun:
            self._locate_workers()

    def _locate_workers(self) -> None:
        """Asks every torchrun worker where it runs, for error messages (:meth:`where`)."""
        from torch.distributed import rpc

        from torchfrag.runtime import worker as rt

        futs = {w: rpc.rpc_async(w, rt._remote_whereami, timeout=self.timeout) for w in self.workers}
        for w, fut in futs.items():
            with contextlib.suppress(Exception):
                self.places[w] = dict(fut.wait())

    def where(self, name: str) -> str:
        """``name`` with its rank, host address and pid where known: ``worker2 (rank 2, host
        198.18.0.3, pid 812)``; a spawned worker's pid."""
        info = self.places.get(name)
        if info is not None:
            return f"{name} (rank {info['rank']}, host {info['address']}, pid {info['pid']})"
        proc = self.procs.get(name)
        return f"{name} (pid {proc.pid})" if proc is not None else name

    def stopped_hint(self, name: str) -> str:
        """``"; its process is stopped"`` when a spawned worker is stopped (SIGSTOP, a debugger),
        which explains a timeout better than a lost host; ``""`` otherwise."""
        proc = self.procs.get(name)
        return "; its process is stopped" if proc is not None and _is_stopped(proc.pid) else ""

    def _master_ip(self, env: dict[str, Any] | None) -> str:
        """Node 0's IP address: the policy's, or under torchrun (``env``) ``MASTER_ADDR`` while the
        policy's is loopback (the README's command gives only ``--master-addr``).

        Raises:
            PolicyError: The address is not an IP address or a resolvable hostname, or, on
                node 0, not one of this machine's.
        """
        import ipaddress

        from torchfrag.policies.base import PolicyError

        key, value = "policy.master_addr", self.addr
        try:
            if env is None:
                return check_master_addr(value, key, node0=True)
            if ipaddress.ip_address(check_master_addr(value, key)).is_loopback and env["master_addr"]:
                key, value = "MASTER_ADDR", env["master_addr"]
            return check_master_addr(value, key, node0=env["rank"] == 0)
        except AddressError as err:
            raise PolicyError(str(err)) from None

    def _interface_env(self) -> dict[str, str]:
        """``GLOO_SOCKET_IFNAME``/``TP_SOCKET_IFNAME`` for the interface that reaches ``addr``.

        Raises:
            MasterUnreachable: This host has no route to the master address.
        """
        try:
            return socket_ifname_env(self.addr)
        except AddressError as err:
            raise MasterUnreachable(str(err)) from None

    def _export_env(self, values: dict[str, str]) -> None:
        """Sets ``values`` in this process's environment until :meth:`shutdown` (workers inherit them)."""
        for key, value in values.items():
            self.saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value

    def _restore_env(self) -> None:
        for key, value in self.saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self.saved_env.clear()

    def _init_driver_rpc(self, world: int) -> None:
        import torch.distributed.rpc as rpc_mod
        from torch.distributed import rpc
        from torch.distributed.rpc import api as rpc_api

        # torch.distributed.rpc keeps per-process counters (rendezvous key prefix,
        # all-gather sequence numbers) that fresh workers start at zero: reset
        # them so that a second run in this process rendezvouses with new workers.
        rpc_mod._init_counter = 0
        with rpc_api._all_gather_dict_lock:
            rpc_api._all_gather_sequence_id.clear()
            rpc_api._all_gather_sequence_id_to_states.clear()

        result: dict[str, BaseException] = {}

        def init() -> None:
            try:
                init_rpc_quietly(_DRIVER, 0, world, _rpc_options(self.addr, self.port, self.timeout,
                                                                 self.rendezvous("rpc")))
            except BaseException as err:  # noqa: BLE001
                result["err"] = err

        t = threading.Thread(target=init, daemon=True)
        t.start()
        startup = max(self.timeout, 90.0)  # spawning and importing torch is slow on a busy machine
        deadline = time.monotonic() + startup
        stopped_since: dict[str, float] = {}
        while t.is_alive():
            t.join(0.1)
            self.check_alive()
            now = time.monotonic()
            # A worker that makes no progress at all (stopped: SIGSTOP, a debugger) gets
            # policy.timeout, not the allowance for a slow import.
            for name, p in self.procs.items():
                if _is_stopped(p.pid):
                    stopped_since.setdefault(name, now)
                    if now - stopped_since[name] > self.timeout:
                        raise WorkerTimeout(f"{name} (pid {p.pid}) is stopped and did not join within "
                                            f"{self.timeout:.1f}s (policy.timeout)", name)
                else:
                    stopped_since.pop(name, None)
            if now > deadline:
                raise WorkerTimeout(f"RPC start-up did not finish within {startup:.0f}s")
        if "err" in result:
            raise WorkerError(f"RPC start-up failed: {result['err']}") from result["err"]

    def check_alive(self, names: list[str] | None = None) -> None:
        """Raises :class:`WorkerDied` when a spawned worker has exited."""
        for name, p in self.procs.items():
            if names is not None and name not in names:
                continue
            code = p.exitcode
            if code is not None:
                how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
                raise WorkerDied(f"{name} (pid {p.pid}) {how}", name)

    def dead(self) -> list[str]:
        """Names of spawned workers that have exited."""
        return [n for n, p in self.procs.items() if p.exitcode is not None]

    def shutdown(self) -> None:
        """Asks every worker to stop, shuts RPC down, reaps (or kills) the processes."""
        from torch.distributed import rpc

        from torchfrag.runtime import worker as rt

        if self.started:
            futs = []
            for w in self.workers:
                if w in self.lost or (w in self.procs and self.procs[w].exitcode is not None):
                    continue
                with contextlib.suppress(Exception):
                    futs.append(rpc.rpc_async(w, rt._remote_stop, timeout=5))
            for f in futs:
                with contextlib.suppress(Exception):
                    f.wait()
            with quiet_shutdown_noise():
                with contextlib.suppress(Exception):
                    rpc.shutdown(graceful=False)
                self.started = False
                self.kill(grace=5.0)
        else:
            self.kill(grace=5.0)
        if self.store_dir is not None:
            import shutil

            shutil.rmtree(self.store_dir, ignore_errors=True)
            self.store_dir = None
        self._restore_env()

    def kill(self, grace: float = 0.0) -> None:
        """Waits up to ``grace`` seconds for the workers to exit, then SIGKILLs the rest."""
        deadline = time.monotonic() + grace
        for p in self.procs.values():
            p.join(max(0.0, deadline - time.monotonic()))
        for name, p in self.procs.items():
            if p.exitcode is None:
                logger.warning("killing %s (pid %d), which did not exit", name, p.pid)
                with contextlib.suppress(Exception):
                    p.kill()
                p.join(5)
