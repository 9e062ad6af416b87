"""A simulated cluster: N hosts as Linux network namespaces on one bridge.

Each host is a network namespace with its own loopback and one interface, ``eth0``, at
``198.18.0.<i+1>/24`` (the benchmarking range 198.18.0.0/15, RFC 2544) and no other route. The
hosts' ``eth0`` are veth pairs whose other ends sit on a bridge in a namespace of their own (the
"switch"), so nothing is added to the machine's own network namespace and no traffic can leave
198.18.0.0/24. A host's link can be cut (its switch port set down: its peers hear nothing more,
as when a cable is pulled) and its processes killed (a host that dies).

Namespaces are named ``tfc<pid>-<random>-<role>``: parallel runs never collide, and a run that
was killed (``SIGKILL``, a crashed CI job) leaves namespaces whose ``<pid>`` is gone; the next
:class:`Cluster` removes them, with their processes, when it starts. :meth:`Cluster.close` (also
run by ``with``, on an exception or ``Ctrl-C``, and at interpreter exit) kills every process of
every host and deletes every namespace; :meth:`Cluster.leftovers` says what is left (nothing).

Needs Linux, root and iproute2 (``ip``, ``ss``); :func:`unavailable` says why not.

Example:
    >>> from torchfrag.testing.cluster import Cluster, unavailable
    >>> Cluster.address(0), Cluster.address(2)
    ('198.18.0.1', '198.18.0.3')
    >>> if unavailable() is None:  # root with iproute2
    ...     with Cluster(2) as hosts:
    ...         code = hosts.run(1, ["ip", "-brief", "addr", "show", "eth0"], name="addr").wait(10)
    ...         assert code == 0 and "198.18.0.2/24" in hosts.log(1, "addr")
    ...     assert hosts.leftovers() == []
"""
from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

logger = logging.getLogger(__name__)

__all__ = ["Cluster", "Host", "unavailable", "CLEAN_ENV_DROP", "SWITCH_VAR", "sent_bytes"]

#: The variable :meth:`Cluster.run` sets to the switch's namespace in every host's processes, so that
#: a job can read :func:`sent_bytes` itself (e.g. between two iterations).
SWITCH_VAR = "TORCHFRAG_CLUSTER_SWITCH"

#: Variables a host's processes do not inherit from the caller: torchrun's and torchfrag's
#: distributed settings (each node gets its own from torchrun).
CLEAN_ENV_DROP = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "TORCHFRAG_MASTER_ADDR", "TORCHFRAG_RPC_PORT",
                  "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "HYDRA_FULL_ERROR",
                  "TORCHELASTIC_USE_AGENT_STORE")

_PREFIX = "tfc"
_NAME = re.compile(rf"^{_PREFIX}(\d+)-[0-9a-f]+-")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def unavailable() -> str | None:
    """Why hosts cannot be simulated here, in one line (``None``: they can).

    Example:
        >>> from torchfrag.testing.cluster import unavailable
        >>> unavailable() is None or isinstance(unavailable(), str)
        True
    """
    if not sys.platform.startswith("linux"):
        return "needs Linux network namespaces"
    if os.geteuid() != 0:
        return "needs root (ip netns add)"
    for tool in ("ip", "ss"):
        if shutil.which(tool) is None:
            return f"needs iproute2 ({tool!r} is not on PATH)"
    probe = f"{_PREFIX}{os.getpid()}-{secrets.token_hex(3)}-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace here: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


def sent_bytes(switch: str | None = None) -> dict[int, int]:
    """Bytes each host has sent so far (its switch port's receive counter), by host index.

    Every byte a host puts on its link (Ethernet, IP and TCP headers and acknowledgements
    included) is counted once, at its own port. Read from the switch's namespace, so it works
    from inside any host.

    Args:
        switch: The switch's namespace (default: ``$TORCHFRAG_CLUSTER_SWITCH``, set in every host).

    Example:
        >>> from torchfrag.testing.cluster import Cluster, unavailable
        >>> if unavailable() is None:  # root with iproute2
        ...     with Cluster(2) as c:
        ...         c.limit(100)  # 100 Mbit/s each way on every link
        ...         assert sorted(c.sent_bytes()) == [0, 1]
    """
    import json

    switch = switch or os.environ[SWITCH_VAR]
    out = _ip("-n", switch, "-s", "-j", "link").stdout
    return {int(link["ifname"][4:]): int(link["stats64"]["rx"]["bytes"]) for link in json.loads(out)
            if link["ifname"].startswith("port")}


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _ip("netns", "list").stdout.splitlines() if line.strip()]


def _pids(ns: str) -> list[int]:
    out = _ip("netns", "pids", ns, check=False).stdout
    return [int(p) for p in out.split() if p.isdigit()]


def _kill_pids(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _delete_namespace(ns: str, wait_s: float = 10.0) -> None:
    """Kills every process in ``ns``, waits for them to go, deletes it (its veths go with it)."""
    deadline = time.monotonic() + wait_s
    while True:
        pids = _pids(ns)
        if not pids or time.monotonic() > deadline:
            break
        _kill_pids(pids)
        time.sleep(0.05)
    _ip("netns", "del", ns, check=False)


def remove_stale() -> list[str]:
    """Deletes the namespaces (and their processes) of earlier clusters whose process is gone.

    Returns:
        The names removed.
    """
    removed = []
    for ns in _namespaces():
        m = _NAME.match(ns)
        if m and not _pid_alive(int(m.group(1))):
            logger.warning("removing namespace %s left by a run that was killed", ns)
            _delete_namespace(ns)
            removed.append(ns)
    return removed


@dataclass
class Host:
    """One simulated host.

    Attributes:
        index: Its position (0-based); host 0 is the usual master.
        namespace: Its network namespace.
        address: Its address on the bridge.
        log_dir: Where its processes' output goes (``<name>.log`` per process).
    """

    index: int
    namespace: str
    address: str
    log_dir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[IO[bytes]] = field(default_factory=list)


class Cluster:
    """N hosts on one bridge (a context manager); see the module docstring.

    Args:
        n_hosts: How many hosts (1 to 250).
        log_dir: Folder for the hosts' logs (a temporary folder, kept, when ``None``).
        env: Environment of the hosts' processes (default: this process's, without
            :data:`CLEAN_ENV_DROP`).

    Example:
        >>> from torchfrag.testing.cluster import Cluster
        >>> c = Cluster(3)
        >>> [c.address(i) for i in range(3)]
        ['198.18.0.1', '198.18.0.2', '198.18.0.3']
    """

    def __init__(self, n_hosts: int, log_dir: str | os.PathLike[str] | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        if not 1 <= int(n_hosts) <= 250:
            raise ValueError(f"n_hosts must be in [1, 250], got {n_hosts}")
        self.n_hosts = int(n_hosts)
        self.prefix = f"{_PREFIX}{os.getpid()}-{secrets.token_hex(3)}-"
        self.switch = self.prefix + "sw"
        self.log_dir = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="tfcluster-"))
        base = dict(os.environ if env is None else env)
        self.env = {k: v for k, v in base.items() if k not in CLEAN_ENV_DROP}
        self.hosts: list[Host] = []
        self._made: list[str] = []
        self._closed = False
        self._finalizer = weakref.finalize(self, Cluster._close_names, self._made)

    @staticmethod
    def address(index: int) -> str:
        """The address of host ``index`` (0-based)."""
        return f"198.18.0.{int(index) + 1}"

    def __enter__(self) -> Cluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- set-up and teardown --------------------------------------------------------------------
    def start(self) -> None:
        """Removes stale namespaces, then creates the switch and the hosts.

        Raises:
            RuntimeError: A namespace or link could not be made (what was made is removed).
        """
        remove_stale()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._add_namespace(self.switch)
            self._sw("link", "add", "name", "br0", "type", "bridge")
            self._sw("link", "set", "br0", "up")
            for i in range(self.n_hosts):
                self.hosts.append(self._add_host(i))
        except (subprocess.CalledProcessError, OSError) as err:
            self.close()
            detail = getattr(err, "stderr", None) or err
            raise RuntimeError(f"cannot build the simulated cluster: {str(detail).strip()}") from None
        logger.info("cluster %s: %d hosts %s..%s", self.prefix, self.n_hosts, self.address(0),
                    self.address(self.n_hosts - 1))

    def _add_namespace(self, ns: str) -> None:
        _ip("netns", "add", ns)
        self._made.append(ns)
        _ip("-n", ns, "link", "set", "lo", "up")

    def _sw(self, *args: str) -> None:
        _ip("-n", self.switch, *args)

    def _add_host(self, i: int) -> Host:
        ns, port = f"{self.prefix}h{i}", f"port{i}"
        self._add_namespace(ns)
        self._sw("link", "add", "name", port, "type", "veth", "peer", "name", "eth0", "netns", ns)
        self._sw("link", "set", port, "master", "br0")
        self._sw("link", "set", port, "up")
        _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        folder = self.log_dir / f"host{i}"
        folder.mkdir(parents=True, exist_ok=True)
        return Host(i, ns, self.address(i), folder)

    def close(self) -> None:
        """Kills every process of every host and deletes every namespace (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for host in self.hosts:
            self._stop_procs(host)
        Cluster._close_names(self._made)
        self._finalizer.detach()

    @staticmethod
    def _close_names(names: list[str]) -> None:
        for ns in reversed(names):
            _delete_namespace(ns)
        names.clear()

    def _stop_procs(self, host: Host) -> None:
        for p in host.procs:
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
        _kill_pids(_pids(host.namespace) if host.namespace in self._made else [])
        for p in host.procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)
        for f in host.logs:
            f.close()
        host.logs.clear()

    def leftovers(self) -> list[str]:
        """What this cluster left behind: its namespaces and live processes (``[]`` after close)."""
        left = [ns for ns in _namespaces() if ns.startswith(self.prefix)]
        for host in self.hosts:
            left += [f"pid {p.pid} ({host.namespace})" for p in host.procs if p.poll() is None]
        return left

    # -- running things -------------------------------------------------------------------------
    def run(self, index: int, cmd: Sequence[str], name: str | None = None, cwd: str | None = None,
            env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
        """Starts ``cmd`` on host ``index`` in a session of its own; output to ``<name>.log``.

        Args:
            index: The host.
            cmd: Program and arguments.
            name: Log file stem (default: the program's name and a number).
            cwd: Working directory.
            env: Extra environment variables on top of the cluster's.

        Returns:
            The process (``ip netns exec`` becomes the program: its pid is the program's).
        """
        host = self.hosts[index]
        stem = name or f"{Path(cmd[0]).name}{len(host.procs)}"
        log = open(host.log_dir / f"{stem}.log", "wb")
        host.logs.append(log)
        full_env = {**self.env, SWITCH_VAR: self.switch, **(env or {})}
        proc = subprocess.Popen(["ip", "netns", "exec", host.namespace, *cmd], cwd=cwd, env=full_env,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        host.procs.append(proc)
        return proc

    def torchrun(self, index: int, args: Sequence[str], master: int = 0, master_port: int = 29500,
                 cwd: str | None = None, env: Mapping[str, str] | None = None,
                 name: str | None = None) -> subprocess.Popen[bytes]:
        """Starts node ``index`` of a job of one node per host, with the README's command::

            torchrun --nnodes N --nproc-per-node 1 --node-rank <index> \\
                --master-addr <host master's address> --master-port <master_port> <args...>

        Args:
            index: The host (and node rank).
            args: What torchrun runs: ``["-m", "torchfrag.train", "policy=actors", ...]`` or a script.
            master: The host of node 0.
            master_port: torchrun's ``--master-port``.
            cwd: Working directory.
            env: Extra environment variables.
            name: Log file stem (default ``node<index>``; give another to keep the log of an
                earlier job on the same host, e.g. a restarted one).

        Returns:
            torchrun's process; its output is in ``host<index>/<name>.log``.
        """
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(self.n_hosts),
               "--nproc-per-node", "1", "--node-rank", str(index), "--master-addr", self.address(master),
               "--master-port", str(master_port), *args]
        return self.run(index, cmd, name=name or f"node{index}", cwd=cwd, env=env)

    def log(self, index: int, name: str | None = None) -> str:
        """The output of host ``index``'s process ``name`` (all of its logs when ``None``)."""
        folder = self.hosts[index].log_dir
        paths = [folder / f"{name}.log"] if name else sorted(folder.glob("*.log"))
        return "".join(p.read_text(errors="replace") for p in paths if p.exists())

    def pids(self, index: int) -> list[int]:
        """Every process running in host ``index``."""
        return _pids(self.hosts[index].namespace)

    def listeners(self, index: int) -> set[tuple[str, int]]:
        """``(address, port)`` of every listening TCP socket on host ``index`` (``ss -ltn``)."""
        out = _ip("netns", "exec", self.hosts[index].namespace, "ss", "-ltnH", check=False).stdout
        found = set()
        for line in out.splitlines():
            host, _, port = line.split()[3].rpartition(":")
            found.add((host.strip("[]"), int(port)))
        return found

    # -- faults ---------------------------------------------------------------------------------
    def sent_bytes(self) -> dict[int, int]:
        """Bytes each host has sent so far, by host index (see :func:`sent_bytes`)."""
        return sent_bytes(self.switch)

    def limit(self, rate_mbit: float) -> None:
        """Limits both directions of every host's link to ``rate_mbit`` Mbit/s (``tc`` ``tbf`` on the
        host's ``eth0`` and on its switch port; the bucket holds 4 ms of traffic, at least 64 KiB
        so that a whole segmentation-offload packet fits)."""
        burst = max(64 * 1024, int(rate_mbit * 1e6 / 8 * 0.004))
        for h in self.hosts:
            for ns, dev in ((h.namespace, "eth0"), (self.switch, f"port{h.index}")):
                subprocess.run(["tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                                f"{rate_mbit}mbit", "burst", str(burst), "latency", "200ms"], check=True,
                               capture_output=True, timeout=30)

    def cut(self, index: int) -> None:
        """Cuts host ``index`` off: its switch port goes down, so nothing it sends or is sent to
        it arrives any more (its own sockets stay open, as when a cable is pulled)."""
        self._sw("link", "set", f"port{index}", "down")

    def reconnect(self, index: int) -> None:
        """Puts host ``index``'s switch port back up."""
        self._sw("link", "set", f"port{index}", "up")

    def kill(self, index: int) -> list[int]:
        """Kills every process of host ``index`` (``SIGKILL``: a host that dies); returns their pids."""
        pids = self.pids(index)
        _kill_pids(pids)
        return pids

