"""Many hosts: a policy across simulated hosts (network namespaces on a bridge) and host faults.

Each test builds its hosts with :class:`torchfrag.testing.cluster.Cluster` (198.18.0.1..N, no other
route) in a fixture that removes them, and checks that nothing is left, even when the test fails.
Host 0 runs the driver (node 0), hosts 1 and 2 one worker each, every node started with the README's
``torchrun`` command running a user's script (``_cluster_job.py``).

Stated bounds (``policy.timeout`` = T, here 6 s; README, "Several machines"):

* a worker host killed: the driver raises ``WorkerDied`` naming the rank and host at once (< 5 s);
* a worker host cut off: the driver raises ``WorkerTimeout`` naming it within T + 5 s (when its
  line appears in the log); the cut-off worker exits by itself (it pings the driver) within
  T + 5 s;
* the driver host cut off: every worker exits with "lost the driver" within T + 5 s;
* every process of every host is gone within T + 15 s of the fault (torchrun agents included);
* a host that never joins: torchrun's rendezvous gives up after its ``--rdzv-conf timeout``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import torchfrag
from torchfrag.policies import PPOFactory
from torchfrag.testing.cluster import Cluster, unavailable

from _cluster_job import CFG

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(torchfrag.__file__)))
TESTS = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(TESTS, "_cluster_job.py")
T = 6.0  # policy.timeout of the fault tests


def host_env() -> dict[str, str]:
    """The environment of every host's processes: this checkout and the tests' helpers importable."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, TESTS]), "OMP_NUM_THREADS": "1"}


def make_cluster(n: int, log_dir: Path) -> Iterator[Cluster]:
    """A started cluster of ``n`` hosts; afterwards asserts that it left nothing behind."""
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    cluster = Cluster(n, log_dir=log_dir, env=host_env())
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
        assert cluster.leftovers() == []


@pytest.fixture
def three_hosts(tmp_path: Path) -> Iterator[Cluster]:
    yield from make_cluster(3, tmp_path / "logs")


def start_job(cluster: Cluster, policy: dict | str, iterations: int, out: Path, hosts: range | None = None,
              torchrun_args: tuple[str, ...] = (), env: dict[str, str] | None = None) -> list:
    """Starts the job on ``hosts`` (all); ``policy``: a config, or the path of a YAML policy file."""
    out.mkdir(parents=True, exist_ok=True)
    spec = policy if isinstance(policy, str) else json.dumps(policy)
    args = [*torchrun_args, JOB, spec, str(iterations), str(out)]
    return [cluster.torchrun(i, args, cwd=str(out), env=env) for i in (hosts or range(cluster.n_hosts))]


def wait_all(procs: list, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        time.sleep(0.2)


_SERVE = """
import socket
s = socket.create_server(("{addr}", 5000))
conn, (peer, _) = s.accept()
print("hello from", peer, flush=True)
"""


def _connect(addr: str) -> list[str]:
    return [sys.executable, "-c", f"import socket; socket.create_connection(({addr!r}, 5000), timeout=2)"]


# -- the harness ------------------------------------------------------------------------------------
def test_harness_builds_isolated_hosts_and_removes_them(tmp_path):
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    with Cluster(3, log_dir=tmp_path) as c:
        names = [h.namespace for h in c.hosts]
        server = c.run(1, [sys.executable, "-c", _SERVE.format(addr=c.address(1))], name="server")
        deadline = time.monotonic() + 30
        while (c.address(1), 5000) not in c.listeners(1) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert c.listeners(1) == {(c.address(1), 5000)} and c.listeners(0) == set()
        assert c.run(0, _connect(c.address(1)), name="hello").wait(15) == 0, c.log(0)
        assert server.wait(15) == 0 and "hello from 198.18.0.1" in c.log(1, "server")
        outside = c.run(1, ["ip", "route", "get", "10.0.0.1"], name="route")
        assert outside.wait(15) != 0  # no route anywhere but 198.18.0.0/24
        sleeper = c.run(2, [sys.executable, "-c", "import time; time.sleep(600)"])
        # `ip netns exec` enters the namespace after the process starts: wait for it there.
        deadline = time.monotonic() + 15
        while c.pids(2) != [sleeper.pid] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.pids(2) == [sleeper.pid]
        assert c.kill(2) == [sleeper.pid] and sleeper.wait(10) < 0
        c.run(1, [sys.executable, "-c", _SERVE.format(addr=c.address(1))], name="server2")
        c.cut(1)
        assert c.run(0, _connect(c.address(1)), name="cut").wait(15) != 0  # times out: no answer
        c.run(2, [sys.executable, "-c", "import time; time.sleep(600)"])  # left running for close()
    assert c.leftovers() == []
    assert not set(names) & set(os.popen("ip netns list").read().split())


def test_harness_removes_what_a_killed_run_left(tmp_path):
    why = unavailable()
    if why is not None:
        pytest.skip(why)
    import subprocess

    # A run that is SIGKILLed in the middle: its namespaces and its sleeping process stay behind.
    code = ("import sys, time; from torchfrag.testing.cluster import Cluster; c = Cluster(2); c.start(); "
            "c.run(1, [sys.executable, '-c', 'import time; time.sleep(600)']); "
            "print(c.prefix, flush=True); time.sleep(600)")
    victim = subprocess.Popen([sys.executable, "-c", code], env=host_env(), stdout=subprocess.PIPE, text=True)
    prefix = victim.stdout.readline().strip()
    victim.kill()
    victim.wait()
    stale = [ns for ns in os.popen("ip netns list").read().split() if ns.startswith(prefix)]
    assert len(stale) == 3  # the switch and two hosts
    with Cluster(1, log_dir=tmp_path):
        left = [ns for ns in os.popen("ip netns list").read().split() if ns.startswith(prefix)]
        assert left == []


# -- policies across hosts ------------------------------------------------------------------------
ITER = 3
# Synchronous policies: the driver on host 0, one worker on each other host (world = hosts).
POLICIES = {"actors": {"name": "actors", "actors": 2, "timeout": 60},
            "central_inference": {"name": "central_inference", "env_workers": 2, "timeout": 60},
            "data_parallel": {"name": "data_parallel", "workers": 3, "timeout": 60}}
# 2 learners (the driver and one more), one actor each: 3 workers, 4 hosts.
MULTI_LEARNER = {"name": "multi_learner", "learners": 2, "actors_per_learner": 1, "timeout": 60}


@pytest.fixture
def four_hosts(tmp_path: Path) -> Iterator[Cluster]:
    yield from make_cluster(4, tmp_path / "logs")


def run_watching_listeners(c: Cluster, policy: dict | str, iterations: int, out: Path,
                           limit: float = 150, env: dict[str, str] | None = None) -> list[set[tuple[str, int]]]:
    """Runs the job on every host to the end; returns what listened on each host meanwhile."""
    procs = start_job(c, policy, iterations, out, env=env)
    seen: list[set[tuple[str, int]]] = [set() for _ in range(c.n_hosts)]
    deadline = time.monotonic() + limit
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        for i in range(c.n_hosts):
            seen[i] |= c.listeners(i)
        time.sleep(0.2)
    logs = "\n".join(c.log(i)[-2000:] for i in range(c.n_hosts))
    assert [p.poll() for p in procs] == [0] * c.n_hosts, logs
    return seen


def assert_own_listeners(c: Cluster, seen: list[set[tuple[str, int]]]) -> None:
    """Every listener on the host's own address, except torchrun's store (node 0, --master-port)."""
    assert ("*", 29500) in seen[0]
    for i in range(c.n_hosts):
        ours = {ip for ip, port in seen[i] if (ip, port) != ("*", 29500)}
        assert ours == {c.address(i)}, seen


def start_loopback(policy: dict | str, iterations: int, out: Path) -> subprocess.Popen:
    """The same job on this machine's loopback (its workers spawned there, no ``torchrun``),
    started beside the cluster's job so that the two run at once; its parameters go to ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    spec = policy if isinstance(policy, str) else json.dumps(policy)
    return subprocess.Popen([sys.executable, JOB, spec, str(iterations), str(out)], cwd=str(out), env=host_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def loopback_params(proc: subprocess.Popen, out: Path, timeout: float = 150) -> torch.Tensor:
    try:
        log, _ = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
    assert proc.returncode == 0, log.decode(errors="replace")[-3000:]
    return torch.load(out / "params.pt")


def check_equals_loopback(c: Cluster, policy: dict | str, out: Path, count_bytes: bool = False) -> None:
    env = {"CLUSTER_JOB_COUNT_BYTES": "1"} if count_bytes else None
    # The same run with spawned workers on loopback: the same envs per rank, the same arithmetic.
    reference = start_loopback(policy, ITER, out.parent / "loopback")
    seen = run_watching_listeners(c, policy, ITER, out, env=env)
    across = torch.load(out / "params.pt")
    assert torch.equal(across, loopback_params(reference, out.parent / "loopback"))
    assert_own_listeners(c, seen)


#: The policies whose traffic is checked against ``explain`` (below), with the kinds of crossing each has.
TRAFFIC = {"actors": {"data", "state"}, "data_parallel": {"data", "gradients"}}


@pytest.mark.parametrize("name", list(POLICIES))
def test_policy_across_three_hosts_equals_loopback(three_hosts, tmp_path, name):
    """``actors`` runs on links limited to 100 Mbit/s; ``actors`` and ``data_parallel`` also check
    their traffic (below)."""
    if name == "actors":
        three_hosts.limit(100)
    check_equals_loopback(three_hosts, POLICIES[name], tmp_path / "out", count_bytes=name in TRAFFIC)
    if name in TRAFFIC:
        check_traffic(POLICIES[name], tmp_path / "out", TRAFFIC[name])


def check_traffic(policy: dict, out: Path, kinds: set[str]) -> None:
    """``explain``'s predicted bytes per iteration against what the hosts' links carried.

    Node 0 recorded what every host had sent so far (its switch port's counter) after each
    iteration; the bytes of the iterations after the first (which also carries the first reset
    and the set-up), per iteration, are compared with what ``explain`` says the crossing edges carry per iteration (the
    pickled batches and the weights).

    Tolerance: 5% either way (the issue's goal). The links carry everything ``explain`` counts
    plus what it cannot see (Ethernet, IP and TCP headers, acknowledgements, TensorPipe's framing,
    the torchrun agents' keep-alives: 1.2-1.7% more with the benchmark's bigger batches), and a
    window read by the driver between iterations can catch a few acknowledgements and keep-alives
    of the neighbouring iterations or miss them (one-iteration windows measured -0.4% to +3.4%;
    this one spans two).
    A prediction that missed a crossing (the weights are about four fifths of the bytes here)
    or counted one twice would fall far outside. ``data_parallel``: a collective's crossing is
    what each rank sends (the ring's tensor bytes and gloo's per-peer overhead), so it counts
    once per rank; without the overhead the prediction fell 15-20% short here.
    """
    from torchfrag.graph import capture
    from torchfrag.policies import as_policy
    from torchfrag.policies.explain import crossings

    before = json.loads((out / "sent0.json").read_text())  # after iteration 0
    after = json.loads((out / f"sent{ITER - 1}.json").read_text())
    carried = sum(after[h] - before[h] for h in after) / (ITER - 1)
    loop = PPOFactory("CartPole-v1", CFG, exploration="mode")()
    try:
        cross = crossings(as_policy(policy).place(capture(loop)))
    finally:
        loop.close()
    ranks = policy.get("workers", 1)
    predicted = sum(x.pickled * (ranks if x.kind == "gradients" else 1) for x in cross)
    assert {x.kind for x in cross} == kinds
    print(f"{policy['name']}, {carried:.0f} B/iteration carried, {predicted} predicted "
          f"({100 * (carried / predicted - 1):+.1f}%)")
    assert abs(carried / predicted - 1) <= 0.05, (carried, predicted, cross)


def test_multi_learner_across_four_hosts_equals_loopback(four_hosts, tmp_path):
    check_equals_loopback(four_hosts, MULTI_LEARNER, tmp_path / "out")


def test_async_actors_across_three_hosts(three_hosts, tmp_path):
    """Asynchronous, so not compared bit for bit: it runs every iteration on every actor's batches
    (one per actor per learner step: the whole pool's frames each iteration) and learns."""
    c, out, iterations = three_hosts, tmp_path / "out", 4
    policy = {"name": "async_actors", "actors": 2, "staleness": 8, "timeout": 60}
    seen = run_watching_listeners(c, policy, iterations, out)
    counts = json.loads((out / "counts.json").read_text())
    frames_per_iteration = CFG["num_envs"] * CFG["steps"]
    assert counts == {"frames": iterations * frames_per_iteration, "iterations": iterations}, counts
    after = torch.load(out / "params.pt")
    start = PPOFactory("CartPole-v1", CFG)()  # the weights every process starts from
    initial = torch.cat([p.detach().reshape(-1) for p in start.parameters()])
    assert after.shape == initial.shape and torch.isfinite(after).all()
    assert not torch.equal(after, initial)
    assert_own_listeners(c, seen)


# -- host faults ------------------------------------------------------------------------------------
FAULT_POLICY = {"name": "actors", "actors": 2, "timeout": T}


def run_until_fault(c: Cluster, out: Path, fault) -> tuple[list, float]:
    """Starts a long job, applies ``fault`` after its first iteration; returns the procs and the time."""
    procs = start_job(c, FAULT_POLICY, 1000, out)
    deadline = time.monotonic() + 120
    while not (out / "iter1").exists():
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), c.log(0)[-3000:]
        time.sleep(0.1)
    fault()
    return procs, time.monotonic()


def hosts_empty_after(c: Cluster, since: float, limit: float, hosts=range(3), logged: str | None = None,
                      seen: dict[str, float] | None = None) -> dict[int, float]:
    """Seconds from ``since`` until each host has no process left (waits up to ``limit``); with
    ``logged``, also when that text first appeared in host 0's log (``seen[logged]``)."""
    ends: dict[int, float] = {}
    while (len(ends) < len(hosts) or (logged and logged not in seen)) and time.monotonic() - since < limit:
        if logged and logged not in seen and logged in c.log(0):
            seen[logged] = time.monotonic() - since
        for i in hosts:
            if i not in ends and not c.pids(i):
                ends[i] = time.monotonic() - since
        time.sleep(0.1)
    return ends


def one_line(log: str, text: str) -> str:
    found = [line for line in log.splitlines() if text in line]
    assert found, log[-3000:]
    return found[0]


def test_worker_host_killed(three_hosts, tmp_path):
    c = three_hosts
    procs, t_fault = run_until_fault(c, tmp_path / "out", lambda: c.kill(2))
    seen: dict[str, float] = {}
    ends = hosts_empty_after(c, t_fault, T + 15, logged="WorkerDied:", seen=seen)
    assert sorted(ends) == [0, 1, 2] and max(ends.values()) < T + 15, ends
    line = one_line(c.log(0), "WorkerDied:")
    assert "worker2 (rank 2, host 198.18.0.3" in line and "closed its connection" in line, line
    assert procs[0].poll() == 1 and procs[1].poll() is not None
    # Detected at once (the killed host's sockets were closed): the driver's line, not its node's
    # exit, which torchrun's agent takes its time over (6.3 s once at load 25 on 2 cores).
    assert seen["WorkerDied:"] < 5, (seen, ends)
    print(f"worker host killed: detected after {seen['WorkerDied:']:.1f}s; hosts empty after {ends}")


def test_worker_host_cut_off(three_hosts, tmp_path):
    c = three_hosts
    procs, t_fault = run_until_fault(c, tmp_path / "out", lambda: c.cut(2))
    seen: dict[str, float] = {}
    ends = hosts_empty_after(c, t_fault, T + 15, logged="WorkerTimeout:", seen=seen)
    assert sorted(ends) == [0, 1, 2] and max(ends.values()) < T + 15, ends
    line = one_line(c.log(0), "WorkerTimeout:")
    assert "worker2 (rank 2, host 198.18.0.3" in line and f"within {T:.1f}s (policy.timeout)" in line, line
    line = one_line(c.log(2), "lost the driver")
    assert line.startswith("worker2 (host 198.18.0.3): lost the driver at 198.18.0.1"), line
    # The driver's detection (its log line), not its exit: torchrun's agent then takes its time
    # to stop the node (host 0 emptied 5.2 s after T once on the loaded 2-core machine).
    assert T - 1 < seen["WorkerTimeout:"] < T + 5 and ends[2] < T + 5, (seen, ends)
    print(f"worker host cut off: detected after {seen['WorkerTimeout:']:.1f}s; hosts empty after {ends}")


def test_driver_host_cut_off(three_hosts, tmp_path):
    c = three_hosts
    procs, t_fault = run_until_fault(c, tmp_path / "out", lambda: c.cut(0))
    ends = hosts_empty_after(c, t_fault, T + 15)
    assert sorted(ends) == [0, 1, 2] and max(ends.values()) < T + 15, ends
    for i in (1, 2):
        line = one_line(c.log(i), "lost the driver")
        assert line.startswith(f"worker{i} (host {c.address(i)}): lost the driver at 198.18.0.1 "
                               f"(no answer within {T:.0f}s (policy.timeout)); exiting"), line
        assert ends[i] < T + 5, ends
    assert [p.poll() for p in procs] == [1, 1, 1]
    print(f"driver host cut off: hosts empty after {ends}")


def test_host_that_never_joins(three_hosts, tmp_path):
    c = three_hosts
    wait = 6
    t0 = time.monotonic()
    procs = start_job(c, FAULT_POLICY, 3, tmp_path / "out", hosts=range(2),
                      torchrun_args=("--rdzv-conf", f"timeout={wait}"))
    wait_all(procs, wait + 30)
    took = time.monotonic() - t0
    assert [p.returncode for p in procs] == [1, 1], c.log(0)[-3000:]
    assert wait - 1 < took < wait + 15, took
    assert "2/3 clients joined" in one_line(c.log(0), "waiting for clients")
    assert not (tmp_path / "out" / "iter0").exists()
    print(f"host that never joins: nodes exited after {took:.1f}s")
