"""Addresses and interfaces of a distributed run: what the master address names, and where to listen.

A run's processes listen on one address per host: the master address itself on
node 0 (loopback, ``127.0.0.1``, by default), and on every other node the address
of the interface that reaches it. gloo and TensorPipe do not take a listen address:
they pick an interface from ``GLOO_SOCKET_IFNAME`` / ``TP_SOCKET_IFNAME`` and
otherwise from what the *hostname* resolves to (``127.0.1.1`` on many Debian
hosts), so :func:`socket_ifname_env` names the interface for them.

This module only uses the standard library (policies validate with it; the runtime
binds with it).

Example:
    >>> from torchfrag.network import check_master_addr, interface_for
    >>> check_master_addr("127.0.0.1", "policy.master_addr")
    '127.0.0.1'
    >>> interface_for("127.0.0.2")[1]  # any 127.x address: the loopback interface
    '127.0.0.1'
"""
from __future__ import annotations

import ctypes
import ctypes.util
import ipaddress
import logging
import os
import re
import socket
import sys

logger = logging.getLogger(__name__)

__all__ = ["AddressError", "LOOPBACK", "SOCKET_IFNAME_VARS", "check_master_addr", "interface_addresses",
           "interface_for", "is_local_address", "resolve", "socket_ifname_env", "url_host"]

#: The default master address: the run stays on this machine.
LOOPBACK = "127.0.0.1"

#: Environment variables that pick the interface gloo and TensorPipe listen on.
SOCKET_IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME")

#: A hostname (RFC 1123 labels); anything else is neither a name nor an address.
_HOSTNAME = re.compile(r"(?=.{1,253}$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)"
                       r"(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?")

_ALLOWED = (f"allowed: an IPv4 or IPv6 address, or a hostname that resolves to one "
            f"({LOOPBACK}, the default, keeps the run on this machine)")


class AddressError(ValueError):
    """A master address that names nothing usable, or that cannot be reached (one-line message)."""


def resolve(value: str) -> list[str]:
    """The IP addresses ``value`` names: itself for an IP literal, else what the hostname resolves to.

    IPv4 addresses come first.

    Raises:
        AddressError: ``value`` is neither an IP address nor a hostname that resolves.
    """
    try:
        return [str(ipaddress.ip_address(value))]
    except ValueError:
        pass
    if not _HOSTNAME.fullmatch(value) or re.fullmatch(r"[0-9.]+", value):  # "1.2.3" is no address
        raise AddressError(f"{value!r} is not an IP address or a hostname")
    try:
        infos = socket.getaddrinfo(value, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        raise AddressError(f"{value!r} is not an IP address and does not resolve ({err})") from None
    found = {str(info[4][0]).split("%")[0]: info[0] for info in infos}
    return sorted(found, key=lambda ip: found[ip] != socket.AF_INET)


def is_local_address(ip: str) -> bool:
    """Whether ``ip`` is an address of this machine (loopback, or one a socket can bind to)."""
    addr = ipaddress.ip_address(ip)
    if addr.is_loopback:
        return True
    family = socket.AF_INET6 if addr.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((ip, 0))
        except OSError:
            return False
    return True


def check_master_addr(value: object, key: str, node0: bool = False) -> str:
    """Validates a configured master address; returns the IP address the run will use.

    Args:
        value: The configured value.
        key: Where it was configured (``policy.master_addr``, ``TORCHFRAG_MASTER_ADDR``), for the message.
        node0: This process is node 0 (the driver), which hosts the rendezvous: the address
            must then be one of this machine's.

    Raises:
        AddressError: One line naming ``key``, ``value`` and what is allowed.
    """
    if not isinstance(value, str) or not value.strip():
        raise AddressError(f"{key}={value!r} is not an address; {_ALLOWED}")
    try:
        ips = resolve(value.strip())
    except AddressError:
        raise AddressError(f"{key}={value!r} is not an IP address or a hostname that resolves; "
                           f"{_ALLOWED}") from None
    if not node0:
        return ips[0]
    for ip in ips:
        if is_local_address(ip):
            return ip
    raise AddressError(f"{key}={value!r} ({', '.join(ips)}) is not an address of this machine; node 0 "
                       "(the driver) hosts the rendezvous there: give one of its own addresses "
                       f"({LOOPBACK} for a run on this machine)")


def url_host(ip: str) -> str:
    """``ip`` as the host part of a URL (IPv6 in brackets)."""
    return f"[{ip}]" if ":" in ip else ip


# -- interfaces ---------------------------------------------------------------------------------
class _Sockaddr(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("data", ctypes.c_ubyte * 14)]


class _SockaddrIn6(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("port", ctypes.c_uint16), ("flowinfo", ctypes.c_uint32),
                ("addr", ctypes.c_ubyte * 16), ("scope_id", ctypes.c_uint32)]


class _Ifaddrs(ctypes.Structure):
    pass


_Ifaddrs._fields_ = [("next", ctypes.POINTER(_Ifaddrs)), ("name", ctypes.c_char_p), ("flags", ctypes.c_uint),
                     ("addr", ctypes.POINTER(_Sockaddr)), ("netmask", ctypes.POINTER(_Sockaddr)),
                     ("ifu", ctypes.POINTER(_Sockaddr)), ("data", ctypes.c_void_p)]


def _sockaddr_ip(sa: _Sockaddr) -> str | None:
    if sa.family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, bytes(sa.data[2:6]))
    if sa.family == socket.AF_INET6:
        six = ctypes.cast(ctypes.pointer(sa), ctypes.POINTER(_SockaddrIn6)).contents
        return socket.inet_ntop(socket.AF_INET6, bytes(six.addr))
    return None


def interface_addresses() -> list[tuple[str, str]]:
    """``(interface, ip)`` of every IPv4/IPv6 address of this machine (Linux ``getifaddrs``; else ``[]``)."""
    if not sys.platform.startswith("linux"):
        return []
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    head = ctypes.POINTER(_Ifaddrs)()
    if libc.getifaddrs(ctypes.byref(head)) != 0:
        logger.debug("getifaddrs failed (errno %d)", ctypes.get_errno())
        return []
    out: list[tuple[str, str]] = []
    try:
        node = head
        while node:
            entry = node.contents
            if entry.addr and entry.name:
                ip = _sockaddr_ip(entry.addr.contents)
                if ip is not None:
                    out.append((entry.name.decode(errors="replace"), ip))
            node = entry.next
    finally:
        libc.freeifaddrs(head)
    return out


def _source_address(master_ip: str) -> str:
    """The local address this host's packets to ``master_ip`` leave from (no packet is sent)."""
    family = socket.AF_INET6 if ":" in master_ip else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            s.connect((master_ip, 9))
        except OSError as err:
            raise AddressError(f"this host has no route to the master address {master_ip} "
                               f"({err.strerror or err})") from None
        return str(s.getsockname()[0]).split("%")[0]


def _loopback_interface(addresses: list[tuple[str, str]]) -> str:
    for name, ip in addresses:
        if ipaddress.ip_address(ip).is_loopback:
            return name
    names = [name for _, name in socket.if_nameindex()] if hasattr(socket, "if_nameindex") else []
    return "lo0" if "lo0" in names else "lo"


def interface_for(master_ip: str) -> tuple[str | None, str]:
    """The interface (name or ``None`` when unknown) and local address that reach ``master_ip``.

    Loopback addresses (all of ``127.0.0.0/8``, ``::1``) map to the loopback interface.

    Raises:
        AddressError: This host has no route to ``master_ip``.
    """
    source = _source_address(master_ip)
    addresses = interface_addresses()
    if ipaddress.ip_address(master_ip).is_loopback or ipaddress.ip_address(source).is_loopback:
        name = _loopback_interface(addresses)
        return name, LOOPBACK if ipaddress.ip_address(master_ip).version == 4 else "::1"
    for name, ip in addresses:
        if ip == source:
            return name, source
    return None, source


def socket_ifname_env(master_ip: str) -> dict[str, str]:
    """``GLOO_SOCKET_IFNAME``/``TP_SOCKET_IFNAME`` naming the interface that reaches ``master_ip``.

    A variable the user already set is left out (theirs wins); so is everything when the
    interface cannot be told (a warning says so).

    Raises:
        AddressError: This host has no route to ``master_ip``.
    """
    name, source = interface_for(master_ip)
    if name is None:
        logger.warning("no interface holds %s (the address that reaches %s); gloo and TensorPipe pick "
                       "theirs from the hostname: set GLOO_SOCKET_IFNAME and TP_SOCKET_IFNAME",
                       source, master_ip)
        return {}
    return {var: name for var in SOCKET_IFNAME_VARS if not os.environ.get(var)}
