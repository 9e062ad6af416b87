"""A one-host distributed run in its own network namespace, out of reach of the host's other users.

TensorPipe (``torch.distributed.rpc``) reads a length prefix from every connection and
allocates that much: eight bytes of ``0xff`` sent to any RPC port abort the process
(``std::bad_alloc``), and its ``shm`` transport's abstract unix sockets crash the same way
(``SIGSEGV``). Loopback TCP ports and abstract unix sockets are both per network namespace,
so a run whose driver and workers all live in a fresh namespace, with only its own ``lo``, has
nothing another local user can connect to.

The CLI (``python -m torchfrag.train``) uses :func:`run_isolated` for one-host runs of a
distributed policy: it starts the same command in a child process inside a new user and network
namespace (unprivileged, like ``unshare --user --net``) and waits for it. Runs under ``torchrun``,
runs whose ``policy.master_addr`` is not a loopback address, and ``TORCHFRAG_PRIVATE_NET=0``
stay in the host's namespace. Where user namespaces are not allowed, the run goes on in the
host's namespace with one warning.

This module only uses the standard library.

Example:
    >>> from torchfrag.private_net import wants_isolation
    >>> wants_isolation(["policy=actors"], environ={})
    True
    >>> wants_isolation(["policy=local"], environ={})
    False
    >>> wants_isolation(["policy=actors", "policy.master_addr=10.0.0.5"], environ={})
    False
"""
from __future__ import annotations

import ctypes
import fcntl
import ipaddress
import logging
import os
import signal
import socket
import struct
import subprocess
import sys
from collections.abc import Mapping, Sequence

logger = logging.getLogger(__name__)

__all__ = ["ENV_VAR", "enter_private_network", "run_isolated", "wants_isolation"]

#: ``0`` keeps CLI runs in the host's network namespace; the child of :func:`run_isolated` has ``inside``.
ENV_VAR = "TORCHFRAG_PRIVATE_NET"

#: Policies that open no port: nothing to isolate.
_NO_LISTENER_POLICIES = frozenset({"local", "single_device"})

_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
_SIOCSIFFLAGS = 0x8914
_IFF_UP, _IFF_LOOPBACK, _IFF_RUNNING = 0x1, 0x8, 0x40
_PR_SET_PDEATHSIG = 1


def _loopback_value(value: str) -> bool:
    if value.strip("'\"") == "localhost":
        return True
    try:
        return ipaddress.ip_address(value.strip("'\"[]")).is_loopback
    except ValueError:
        return False


def wants_isolation(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> bool:
    """Whether a CLI command line is a one-host run of a policy that listens on ports.

    Args:
        argv: The CLI's arguments (Hydra overrides), without the program name.
        environ: The environment to read (``os.environ`` when ``None``).

    Returns:
        ``True`` when the command selects a policy other than ``local``/``single_device``, is not
        started by ``torchrun``, keeps ``policy.master_addr`` on loopback, and
        ``TORCHFRAG_PRIVATE_NET`` is neither ``0`` nor ``inside``.

    Example:
        >>> wants_isolation(["policy=actors"], environ={"TORCHFRAG_PRIVATE_NET": "0"})
        False
    """
    env = os.environ if environ is None else environ
    if env.get(ENV_VAR, "").lower() in ("0", "off", "false", "no", "inside"):
        return False
    if all(key in env for key in ("RANK", "WORLD_SIZE", "MASTER_PORT")):
        return False  # torchrun: nodes on several hosts must reach each other
    listens = False
    for arg in argv:
        key, sep, value = arg.lstrip("+~").partition("=")
        if not sep:
            continue
        if key == "policy" and any(v.strip() not in _NO_LISTENER_POLICIES for v in value.split(",")):
            listens = True
        if key == "policy.master_addr" and not all(_loopback_value(v) for v in value.split(",")):
            return False
    return listens


def enter_private_network() -> None:
    """Moves the calling, single-threaded process into a new user and network namespace.

    The process keeps its user and group ids (mapped to themselves), gets a loopback
    interface that is up, and nothing else. It must hold no other thread (the kernel refuses
    ``CLONE_NEWUSER`` otherwise): call it right after ``fork``, as :func:`run_isolated` does.

    Raises:
        OSError: The kernel refused a new user namespace (``unprivileged_userns_clone=0``, a
            container's seccomp profile) or the loopback interface could not be brought up.
    """
    uid, gid = os.getuid(), os.getgid()
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWUSER|CLONE_NEWNET): {os.strerror(err)}")
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    # A new namespace's lo is down; bring it up while this process still holds
    # CAP_NET_ADMIN in its namespace (exec drops it for a non-root uid).
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", _IFF_UP | _IFF_LOOPBACK | _IFF_RUNNING))


def _child_setup() -> None:
    """Runs in the child between fork and exec: namespace, own process group, dies with its parent."""
    enter_private_network()
    os.setpgid(0, 0)  # Ctrl-C reaches the child once, forwarded by the parent
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def run_isolated(argv: Sequence[str]) -> int | None:
    """Runs ``python -m torchfrag.train *argv`` in a private network namespace and waits for it.

    SIGINT, SIGTERM and SIGHUP sent to this process are passed on to the child.

    Args:
        argv: The CLI's arguments, without the program name.

    Returns:
        The exit status to leave with (``128 + n`` when the child died of signal ``n``), or
        ``None`` when no namespace could be made: the caller then runs in the host's namespace.
    """
    env = dict(os.environ, **{ENV_VAR: "inside"})
    cmd = [sys.executable, "-m", "torchfrag.train", *argv]
    try:
        child = subprocess.Popen(cmd, env=env, preexec_fn=_child_setup)  # noqa: PLW1509 (single-threaded)
    except (subprocess.SubprocessError, OSError) as err:
        logger.warning("no private network namespace for this run (%s): its RPC ports are reachable by "
                       "every local user (set %s=0 to skip trying)", err, ENV_VAR)
        return None

    def forward(signum: int, _frame: object) -> None:
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    rc = child.wait()
    return 128 - rc if rc < 0 else rc
