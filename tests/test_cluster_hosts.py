"""Many hosts, continued: a user's own policy across hosts, ``on_failure=continue`` when a host dies,
and a host that joins late.

Hosts as in ``test_cluster.py`` (namespaces on a bridge, every node started with the README's
``torchrun`` command running ``_cluster_job.py``). Stated bounds:

* a user's YAML policy (``kind: actors`` with a rule of its own) runs across 3 hosts, one of which
  joins late, and gives the same parameters as the same run over loopback;
* ``policy.on_failure=continue``: a worker host killed mid-run is noticed at once (its sockets
  close); the run goes on with the other actor to its last iteration, the driver reports the
  worker and the frames lost, and every training process exits by itself within T + 15 s of the
  fault. torchrun's agents (not torchfrag's) then wait in torchrun's exit barrier for the dead
  host's agent, up to its ``exit_barrier_timeout`` (300 s, not settable from torchrun's command
  line): the job's result is written before that; the test's teardown stops them;
* a host that joins late (here ``LATE`` s after the others) is waited for by torchrun's
  rendezvous, up to its ``--rdzv-conf timeout`` (900 s by default; here 60 s), and the job then
  runs as if it had started on time; later than that, the rendezvous gives up with a message
  (``test_cluster.py::test_host_that_never_joins``).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from _cluster_job import CFG
from test_cluster import (  # noqa: F401 (three_hosts is a fixture)
    ITER,
    T,
    loopback_params,
    one_line,
    start_loopback,
    start_job,
    three_hosts,
    wait_all,
)

FRAMES = CFG["num_envs"] * CFG["steps"]  # per iteration
LATE = 4.0  # how late host 2 joins

USER_POLICY = """\
# A user's policy in their own config folder: the shipped actors, with the advantage
# (every per-env fragment) moved onto the actors by a rule of its own.
defaults:
  - actors_schema
name: my_actors
kind: actors
actors: 2
timeout: 60
rules:
  - {tag: per_env, role: actor}
"""


def test_user_policy_across_three_hosts_one_joining_late(three_hosts, tmp_path):
    """A user's YAML policy from their own config folder; host 2 starts ``LATE`` s after the others."""
    c, out = three_hosts, tmp_path / "out"
    folder = tmp_path / "conf" / "policy"
    folder.mkdir(parents=True)
    path = folder / "my_actors.yaml"
    path.write_text(USER_POLICY)
    rdzv = ("--rdzv-conf", "timeout=60")
    reference = start_loopback(str(path), ITER, tmp_path / "loopback")  # runs meanwhile
    first = start_job(c, str(path), ITER, out, hosts=range(2), torchrun_args=rdzv)
    time.sleep(LATE)
    assert all(p.poll() is None for p in first), c.log(0)[-3000:]  # still waiting, not failed
    assert not (out / "iter0").exists()
    late = start_job(c, str(path), ITER, out, hosts=range(2, 3), torchrun_args=rdzv)
    procs = first + late
    wait_all(procs, 150)
    assert [p.poll() for p in procs] == [0, 0, 0], "\n".join(c.log(i)[-1500:] for i in range(3))
    counts = json.loads((out / "counts.json").read_text())
    assert counts == {"frames": ITER * FRAMES, "iterations": ITER}, counts
    # The same run over loopback: the same parameters, the rule and the late host changed nothing.
    assert torch.equal(torch.load(out / "params.pt"), loopback_params(reference, tmp_path / "loopback"))


def test_on_failure_continue_when_a_worker_host_dies(three_hosts, tmp_path):
    # enough iterations that the run is still going when the kill lands (with 6, a loaded host
    # sometimes finished them all first: failed [], 0 frames missing)
    c, out, iterations = three_hosts, tmp_path / "out", 20
    policy = {"name": "actors", "actors": 2, "on_failure": "continue", "timeout": T}
    procs = start_job(c, policy, iterations, out)
    deadline = time.monotonic() + 120
    while not (out / "iter1").exists():
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), c.log(0)[-3000:]
        time.sleep(0.05)
    c.kill(2)
    t_fault = time.monotonic()
    while not (out / "lost.json").exists():
        assert time.monotonic() - t_fault < 60 and procs[0].poll() is None, c.log(0)[-3000:]
        time.sleep(0.1)
    ends = workers_gone_after(c, t_fault, T + 15)
    assert sorted(ends) == [0, 1, 2], ends  # torchrun's agents wait in its exit barrier (see above)
    # Every iteration ran; the dead host's share of the iterations after it died is what was lost.
    counts = json.loads((out / "counts.json").read_text())
    lost = json.loads((out / "lost.json").read_text())
    assert counts["iterations"] == iterations, counts
    assert lost["failed"] == ["worker2"], lost
    half = FRAMES // 2  # each actor's share of an iteration
    assert lost["frames_missing"] % half == 0 and half <= lost["frames_missing"] <= (iterations - 2) * half
    assert counts["frames"] == iterations * FRAMES - lost["frames_missing"], (counts, lost)
    line = one_line(c.log(0), "frames fewer than asked were collected")
    assert f"{lost['frames_missing']} frames fewer" in line and "worker2" in line, line
    line = one_line(c.log(0), "continuing with 1 actor(s)")
    assert "worker2" in line and "198.18.0.3" in line, line
    print(f"on_failure=continue: {lost['frames_missing']} frames lost; hosts empty after {ends}")


def workers_gone_after(c, since: float, limit: float, hosts=range(3)) -> dict[int, float]:
    """Seconds from ``since`` until each host has no process left but torchrun's agent."""
    ends: dict[int, float] = {}
    while len(ends) < len(hosts) and time.monotonic() - since < limit:
        for i in hosts:
            if i not in ends and not [p for p in c.pids(i) if not _is_agent(p)]:
                ends[i] = time.monotonic() - since
        time.sleep(0.1)
    return ends


def _is_agent(pid: int) -> bool:
    try:
        return b"torch.distributed.run" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # gone
