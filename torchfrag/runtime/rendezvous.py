"""torchfrag's TCP rendezvous: a store that listens on the master address only.

torch's ``tcp://`` rendezvous starts a ``TCPStore`` that listens on every interface
(``*:port``). The ``torchfrag://host:port`` scheme registered here is the same
rendezvous, except that rank 0 binds the listening socket to ``host`` itself and
hands it to the store (``master_listen_fd``), and that a rank that cannot reach
``host:port`` within the timeout fails with one line (:class:`MasterUnreachable`)
instead of retrying quietly for torch's 30 minutes.

Example:
    >>> from torchfrag.runtime.rendezvous import rendezvous_url
    >>> rendezvous_url("127.0.0.1", 29501, wait_s=30)
    'torchfrag://127.0.0.1:29501?wait_s=30'
"""
from __future__ import annotations

import datetime
import logging
import socket
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlparse

from torchfrag.network import url_host

logger = logging.getLogger(__name__)

__all__ = ["MasterUnreachable", "SCHEME", "bound_listener", "register", "rendezvous_url", "wait_reachable"]

SCHEME = "torchfrag"


class MasterUnreachable(ConnectionError):
    """This node cannot reach node 0's rendezvous (a one-line message)."""


def rendezvous_url(addr: str, port: int, wait_s: float | None = None) -> str:
    """The ``init_method`` of a rendezvous hosted by rank 0 at ``addr:port`` (registers the scheme).

    Args:
        addr: Node 0's address (an IP address).
        port: The store's port.
        wait_s: How long other ranks wait for the store to accept connections (default: the
            rendezvous timeout).
    """
    register()
    url = f"{SCHEME}://{url_host(addr)}:{int(port)}"
    return url if wait_s is None else f"{url}?wait_s={float(wait_s):g}"


def register() -> None:
    """Registers the ``torchfrag://`` rendezvous with ``torch.distributed`` (once per process)."""
    from torch.distributed.rendezvous import register_rendezvous_handler

    try:
        register_rendezvous_handler(SCHEME, _handler)
    except RuntimeError:  # already registered in this process
        pass


def bound_listener(addr: str, port: int) -> socket.socket:
    """A listening TCP socket on ``addr:port`` (``SO_REUSEADDR``, as torch's own store sets)."""
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((addr, int(port)))
        sock.listen(socket.SOMAXCONN)
    except OSError:
        sock.close()
        raise
    return sock


def wait_reachable(addr: str, port: int, timeout: float) -> None:
    """Returns once ``addr:port`` accepts a TCP connection; retries (the master may start later).

    Raises:
        MasterUnreachable: Not within ``timeout`` seconds, or at once when this host has
            no route to ``addr``.
    """
    deadline = time.monotonic() + timeout
    last: OSError | None = None
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((addr, int(port)), timeout=max(0.1, min(2.0, left))):
                return
        except OSError as err:
            last = err
            if err.errno in (101, 113):  # ENETUNREACH, EHOSTUNREACH: no route, waiting will not help
                break
        if left <= 0:
            break
        time.sleep(min(0.5, max(0.0, left)))
    reason = last.strerror if last is not None and last.strerror else str(last)
    raise MasterUnreachable(f"cannot reach the master's rendezvous at {url_host(addr)}:{port} "
                            f"within {timeout:.0f}s ({reason}); check policy.master_addr / MASTER_ADDR, "
                            "the port and the firewall, and that node 0 is running")


def _handler(url: str, timeout: datetime.timedelta = datetime.timedelta(minutes=30),
             **kwargs: Any) -> Iterator[tuple[Any, int, int]]:
    from torch.distributed import TCPStore

    parsed = urlparse(url)
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    if parsed.hostname is None or parsed.port is None or "rank" not in query or "world_size" not in query:
        raise ValueError(f"{SCHEME}:// rendezvous needs host, port, rank and world_size: {url!r}")
    host, port = parsed.hostname, int(parsed.port)
    rank, world_size = int(query["rank"]), int(query["world_size"])
    if rank == 0:
        sock = bound_listener(host, port)
        logger.debug("rendezvous store listening on %s:%d", host, port)
        store = TCPStore(host, port, world_size, True, timeout, master_listen_fd=sock.detach(),
                         use_libuv=True)
    else:
        wait_reachable(host, port, float(query.get("wait_s", timeout.total_seconds())))
        store = TCPStore(host, port, world_size, False, timeout)
    yield store, rank, world_size
    raise RuntimeError(f"{SCHEME}:// rendezvous cannot re-rendezvous")
