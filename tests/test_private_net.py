"""Stray bytes sent to a run's RPC ports, and the private network namespace of one-host CLI runs.

TensorPipe reads an 8-byte length prefix from every connection and allocates it: eight bytes of
``0xff`` sent to any listening RPC port abort the process (``std::bad_alloc``; reproduced on the
driver, rc -6, and on every worker, ``WorkerDied ... SIGABRT``). The CLI therefore runs a one-host
distributed run in a network namespace of its own; these tests send the bytes to every port the run
listens on, from the host, and check that nothing reaches the run and that it finishes normally.
"""
from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time

import psutil
import pytest

from torchfrag import private_net
from torchfrag.private_net import wants_isolation

STRAY = b"\xff" * 8


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "MASTER_PORT", "MASTER_ADDR", private_net.ENV_VAR)}
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                         env.get("PYTHONPATH", "")])
    return env


def _namespaces_allowed() -> str | None:
    probe = subprocess.run([sys.executable, "-c", "from torchfrag.private_net import enter_private_network as e; e()"],
                           env=_env(), capture_output=True, text=True)
    return None if probe.returncode == 0 else f"no user/network namespaces here: {probe.stderr.strip()[-200:]}"


@pytest.mark.parametrize("argv, environ, expected", [
    (["policy=actors"], {}, True),
    (["policy=data_parallel", "policy.workers=2"], {}, True),
    (["-m", "policy=local,central_inference"], {}, True),
    (["policy=local"], {}, False),
    (["policy=single_device"], {}, False),
    (["algo=ppo"], {}, False),  # the default policy (local) opens no port
    (["policy=actors", "policy.master_addr=127.0.0.1"], {}, True),
    (["policy=actors", "policy.master_addr=localhost"], {}, True),
    (["policy=actors", "policy.master_addr=192.168.1.5"], {}, False),  # other hosts must reach it
    (["policy=actors"], {"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "29500"}, False),  # torchrun
    (["policy=actors"], {"TORCHFRAG_PRIVATE_NET": "0"}, False),
    (["policy=actors"], {"TORCHFRAG_PRIVATE_NET": "inside"}, False),  # already in one
])
def test_which_cli_runs_get_a_private_namespace(argv, environ, expected):
    assert wants_isolation(argv, environ=environ) is expected


def test_no_namespace_warns_and_lets_the_caller_run(monkeypatch, caplog):
    def refuse() -> None:
        raise OSError(1, "unshare(CLONE_NEWUSER|CLONE_NEWNET): Operation not permitted")

    monkeypatch.setattr(private_net, "enter_private_network", refuse)
    with caplog.at_level(logging.WARNING, logger="torchfrag.private_net"):
        assert private_net.run_isolated(["--help"]) is None
    assert "reachable by every local user" in caplog.text and "TORCHFRAG_PRIVATE_NET=0" in caplog.text


def _namespace_listeners(pid: int) -> list[tuple[str, object]]:
    """(kind, address) of every listening socket in the network namespace of process ``pid``.

    Read from ``/proc/PID/net/*``, which shows that process's namespace (psutil reads the caller's).
    """
    found: list[tuple[str, object]] = []
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            with open(f"/proc/{pid}/net/{name}") as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            local, state = row.split()[1], row.split()[3]
            if state != "0A":  # TCP_LISTEN
                continue
            hex_ip, hex_port = local.split(":")
            raw = bytes.fromhex(hex_ip)
            # /proc prints the address as 32-bit words in host (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found.append(("tcp", (socket.inet_ntop(family, raw), int(hex_port, 16))))
    try:
        with open(f"/proc/{pid}/net/unix") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        rows = []
    for row in rows:
        fields = row.split()
        if len(fields) >= 8 and fields[3] == "00010000" and fields[7].startswith("@"):  # __SO_ACCEPTCON
            found.append(("unix", "\0" + fields[7][1:]))
    return found


def _run_pids(root: psutil.Process) -> list[int]:
    try:
        return [root.pid, *(c.pid for c in root.children(recursive=True))]
    except psutil.Error:
        return [root.pid]


def test_stray_bytes_to_every_port_of_an_actors_run_reach_nothing(tmp_path):
    why = _namespaces_allowed()
    if why is not None:
        pytest.skip(why)
    run_dir = tmp_path / "run"
    cmd = [sys.executable, "-m", "torchfrag.train", "policy=actors", "policy.actors=2", "total_frames=6000",
           "eval_episodes=0", "plot=false", "progress=false", "logger=none", f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    own_ns = os.readlink("/proc/self/ns/net")
    try:
        root = psutil.Process(proc.pid)
        deadline = time.monotonic() + 300
        listeners: list = []
        run_ns = None
        while proc.poll() is None and time.monotonic() < deadline:
            for pid in _run_pids(root):
                try:
                    ns = os.readlink(f"/proc/{pid}/ns/net")
                except OSError:
                    continue
                if ns != own_ns:
                    run_ns, listeners = ns, _namespace_listeners(pid)
                    break
            if sum(kind == "tcp" for kind, _ in listeners) >= 3:  # the driver's agent and two workers'
                break
            time.sleep(0.5)
        assert proc.poll() is None and run_ns is not None, f"the run never left the host's namespace: {listeners}"
        assert sum(kind == "tcp" for kind, _ in listeners) >= 3, f"the run never listened: {listeners}"
        host_ports = {addr[1] for kind, addr in _namespace_listeners(os.getpid()) if kind == "tcp"}
        host_unix = {addr for kind, addr in _namespace_listeners(os.getpid()) if kind == "unix"}
        sent = 0
        for kind, addr in listeners:
            if (kind == "tcp" and addr[1] in host_ports) or (kind == "unix" and addr in host_unix):
                continue  # the same name is a host process's socket, not the run's: leave it alone
            family = {"tcp": socket.AF_INET6 if ":" in addr[0] else socket.AF_INET, "unix": socket.AF_UNIX}[kind]
            with socket.socket(family, socket.SOCK_STREAM) as s, pytest.raises(ConnectionRefusedError):
                s.connect(addr)
                s.sendall(STRAY)  # only reached if the run's port were reachable from here
            sent += 1
        assert sent >= 3
        out, _ = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out[-3000:]
    assert "done: " in out and (run_dir / "checkpoints").is_dir(), out[-3000:]
