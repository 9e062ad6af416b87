"""Where a distributed run listens, and what it says about a bad or unreachable master address.

* A hostname that resolves to another loopback address (``127.0.0.2``, Debian's ``127.0.1.1``)
  must not move any listener off ``policy.master_addr`` (a private ``/etc/hosts`` per test,
  through ``unshare -m``).
* ``policy.master_addr`` / ``TORCHFRAG_MASTER_ADDR`` that names nothing is refused in one line,
  in Python and on the CLI, before any process starts.
* A node that cannot reach the master's rendezvous says so in one line, in bounded time.
* Two hosts as network namespaces on a bridge (198.18.0.1 and 198.18.0.2, no other route) run
  the README's two-node torchrun command; every listener is on 198.18.0.x.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

import torchfrag
from torchfrag.graph import capture
from torchfrag.policies import ActorsPolicy, PPOFactory
from torchfrag.policies.base import PolicyError
from torchfrag.runtime import run

from _policy_helpers import CFG, wait_no_children

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(torchfrag.__file__)))


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "TORCHFRAG_MASTER_ADDR", "RANK",
                        "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "HYDRA_FULL_ERROR")}
    env.update({"PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}, **extra)
    return env


def _can_unshare_mounts() -> str | None:
    """Why a private /etc/hosts cannot be mounted here (``None``: it can)."""
    if not sys.platform.startswith("linux"):
        return "needs Linux mount namespaces"
    if os.geteuid() != 0:
        return "needs root (unshare -m and a bind mount over /etc/hosts)"
    if shutil.which("unshare") is None:
        return "needs unshare (util-linux)"
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"unshare -m is not allowed here: {probe.stderr.strip()}"
    return None


# A user's script: an `actors` (or `data_parallel`) run of the shipped PPO on CartPole that
# records, during its first iteration, every listening socket of the driver and its workers.
_SCRIPT = """
import json, socket, sys
import psutil
sys.path.insert(0, {tests!r})
from _policy_helpers import CFG
from torchfrag.graph import capture
from torchfrag.policies import PPOFactory
from torchfrag.runtime import run

def listening(i, out, graph):
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            for c in proc.net_connections(kind="inet"):
                if c.status == psutil.CONN_LISTEN:
                    found.append([proc.pid, c.laddr.ip, c.laddr.port])
        except psutil.Error:
            pass

if __name__ == "__main__":
    found = []
    factory = PPOFactory("CartPole-v1", CFG)
    loop = factory()
    run(capture(loop), {policy!r}, iterations=1, factory=factory, hooks=[listening])
    print(json.dumps({{"hostname_ip": socket.gethostbyname(socket.gethostname()), "listening": found}}))
"""


@pytest.mark.parametrize("policy, hostname_ip", [
    ({"name": "actors", "actors": 1}, "127.0.0.2"),
    ({"name": "data_parallel", "workers": 2}, "127.0.1.1"),
])
def test_hostname_on_another_loopback_address_moves_no_listener(tmp_path, policy, hostname_ip):
    why = _can_unshare_mounts()
    if why is not None:
        pytest.skip(why)
    hosts = tmp_path / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n{hostname_ip} {socket.gethostname()}\n")
    script = tmp_path / "run_and_list.py"
    script.write_text(_SCRIPT.format(tests=os.path.dirname(os.path.abspath(__file__)), policy=policy))
    shell = f'mount --bind "{hosts}" /etc/hosts && exec "{sys.executable}" "{script}"'
    out = subprocess.run(["unshare", "-m", "sh", "-c", shell], cwd=tmp_path, env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["hostname_ip"] == hostname_ip  # the private /etc/hosts was in effect
    listening = result["listening"]
    assert len({pid for pid, _, _ in listening}) == 2, listening  # the driver and its worker listen
    assert {ip for _, ip, _ in listening} == {"127.0.0.1"}, listening


# -- master_addr validation ---------------------------------------------------------------------
@pytest.mark.parametrize("bad", ["not-an-ip", "1.2.3", "256.1.1.1", "10.0.0.1.5", "a b", "",
                                 "tcp://127.0.0.1"])
def test_master_addr_that_names_nothing_is_refused_in_one_line(bad, monkeypatch):
    monkeypatch.delenv("TORCHFRAG_MASTER_ADDR", raising=False)
    with pytest.raises(PolicyError) as err:
        ActorsPolicy(actors=1, master_addr=bad).validate()
    text = str(err.value)
    assert len(text.splitlines()) == 1, text
    assert f"policy.master_addr={bad!r}" in text and "allowed: an IPv4 or IPv6 address" in text, text


@pytest.mark.parametrize("good", ["127.0.0.1", "127.0.0.2", "localhost", "::1", socket.gethostname()])
def test_master_addr_ip_or_resolvable_local_name_is_accepted(good, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    ActorsPolicy(actors=1, master_addr=good).validate()


def test_master_addr_of_another_machine_is_refused_on_node0_only(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(PolicyError, match=r"policy.master_addr='198.18.0.9' \(198.18.0.9\) is not an "
                                          "address of this machine"):
        ActorsPolicy(actors=1, master_addr="198.18.0.9").validate()
    monkeypatch.setenv("RANK", "1")  # a torchrun worker on another node: the master is elsewhere
    ActorsPolicy(actors=1, master_addr="198.18.0.9").validate()


def test_torchfrag_master_addr_env_is_named_in_the_error(monkeypatch):
    from torchfrag.policies import as_policy

    monkeypatch.setenv("TORCHFRAG_MASTER_ADDR", "not-an-ip")
    with pytest.raises(PolicyError, match=r"^policy actors: TORCHFRAG_MASTER_ADDR='not-an-ip' is not"):
        as_policy("actors").validate()


def test_run_refuses_bad_master_addr_before_starting_anything(monkeypatch):
    monkeypatch.delenv("TORCHFRAG_MASTER_ADDR", raising=False)
    f = PPOFactory("CartPole-v1", CFG)
    loop = f()
    with pytest.raises(PolicyError, match="policy.master_addr='not-an-ip'"):
        run(capture(loop), {"name": "actors", "actors": 1, "master_addr": "not-an-ip"}, iterations=1,
            factory=f)
    assert wait_no_children(timeout=1.0) == []
    loop.close()


def test_cli_bad_master_addr_is_one_clear_line(tmp_path):
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "torchfrag.train", "policy=actors",
                           "policy.master_addr=not-an-ip", f"hydra.run.dir={tmp_path}/run"],
                          cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr[-3000:]
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("torchfrag.train: error: policy actors: policy.master_addr='not-an-ip' is "
                               "not an IP address or a hostname that resolves; allowed:"), lines
    assert not os.path.exists(tmp_path / "run" / "checkpoints")
    assert time.monotonic() - t0 < 60


# -- a node that cannot reach the master ----------------------------------------------------------
def test_rendezvous_without_master_fails_in_one_line_within_its_wait():
    import torch.distributed as dist

    from torchfrag.runtime.launcher import free_port
    from torchfrag.runtime.rendezvous import MasterUnreachable, rendezvous_url

    port = free_port()  # nobody listens there
    t0 = time.monotonic()
    with pytest.raises(MasterUnreachable) as err:
        next(dist.rendezvous(rendezvous_url("127.0.0.1", port, wait_s=2), rank=1, world_size=2))
    assert 1.5 < time.monotonic() - t0 < 10
    text = str(err.value)
    assert len(text.splitlines()) == 1 and f"127.0.0.1:{port} within 2s" in text, text


def test_torchrun_worker_without_master_says_so_in_one_line(tmp_path):
    from torchfrag.runtime.launcher import free_port

    # What torchrun gives a node-1 process whose node 0 never starts its rendezvous.
    env = _env(RANK="1", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(free_port()), TORCH_CPP_LOG_LEVEL="ERROR")
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "torchfrag.train", "policy=actors", "policy.actors=1",
                           "policy.timeout=3", "algo.num_envs=2", "algo.steps=16",
                           "algo.minibatch_size=32", "eval_episodes=0",
                           "progress=false", "logger=none", f"hydra.run.dir={tmp_path}/run"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.monotonic() - t0
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    said = [line for line in out.splitlines() if "cannot reach" in line]
    assert len(said) == 1 and "within 3s" in said[0] and "Traceback" not in out, out[-3000:]
    assert elapsed < 60


# -- two hosts: network namespaces on a bridge (torchfrag.testing.cluster) --------------------------
@pytest.fixture
def two_hosts(tmp_path):
    """Two hosts at 198.18.0.1/.2 on a bridge, no other route; nothing is left afterwards."""
    from torchfrag.testing.cluster import Cluster, unavailable

    why = unavailable()
    if why is not None:
        pytest.skip(why)
    cluster = Cluster(2, log_dir=tmp_path / "hosts", env=_env())
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
        assert cluster.leftovers() == []


def test_two_hosts_readme_torchrun_command(two_hosts, tmp_path):
    port = 29500
    args = ["-m", "torchfrag.train", "policy=actors", "policy.actors=1", "policy.master_addr=198.18.0.1",
            "policy.timeout=60", "algo.num_envs=2", "algo.steps=16", "algo.minibatch_size=32",
            "total_frames=160", "eval_episodes=0", "plot=false", "progress=false", "logger=none",
            "checkpoint_every=0"]
    procs = [two_hosts.torchrun(r, [*args, f"hydra.run.dir={tmp_path}/node{r}"], master_port=port, cwd=ROOT)
             for r in (0, 1)]
    seen: list[set[tuple[str, int]]] = [set(), set()]
    deadline = time.monotonic() + 180
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        for r in (0, 1):
            seen[r] |= two_hosts.listeners(r)
        time.sleep(0.2)
    assert [p.poll() for p in procs] == [0, 0], two_hosts.log(0)[-3000:] + two_hosts.log(1)[-3000:]
    summary = json.loads((tmp_path / "node0" / "summary.json").read_text())
    assert summary["frames"] == 160
    # torchrun's own store (MASTER_PORT, node 0) is torchrun's and listens on every interface
    ours = [{(ip, p) for ip, p in found if p != port} for found in seen]
    assert ours[0] and ours[1], seen  # both nodes were seen listening (store, RPC, gloo)
    assert {ip for ip, _ in ours[0]} == {"198.18.0.1"}, seen
    assert {ip for ip, _ in ours[1]} == {"198.18.0.2"}, seen


def test_node_with_no_route_to_the_master_says_so_at_once(two_hosts, tmp_path):
    from torchfrag.runtime.launcher import free_port

    # node 1 is told its master is 198.18.1.1, outside its /24: no route from its namespace
    env = _env(RANK="1", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="198.18.1.1",
               MASTER_PORT=str(free_port()), TORCH_CPP_LOG_LEVEL="ERROR")
    t0 = time.monotonic()
    proc = two_hosts.run(1, [sys.executable, "-m", "torchfrag.train", "policy=actors", "policy.actors=1",
                             "algo.num_envs=2", "algo.steps=16", "algo.minibatch_size=32",
                             "eval_episodes=0", "progress=false",
                             "logger=none", f"hydra.run.dir={tmp_path}/run"],
                         name="node1", cwd=str(tmp_path), env=env)
    code = proc.wait(120)
    out = two_hosts.log(1, "node1")
    assert code == 1, out[-3000:]
    said = [line for line in out.splitlines() if "no route to the master address 198.18.1.1" in line]
    assert len(said) == 1 and "Traceback" not in out, out[-3000:]
    assert time.monotonic() - t0 < 60
