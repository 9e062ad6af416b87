"""PPO frames/s across simulated hosts (network namespaces), link limits, and a scaling model to 64 nodes.

Every point is a real multi-host job: :class:`torchfrag.testing.cluster.Cluster` builds the hosts
(one network namespace each, ``198.18.0.x`` on one bridge), every host runs one ``torchrun`` node
with the README's command, and node 0 (the driver) times the iterations after ``warmup``.

* **Env**: the slow synthetic env of ``benchmarks.policies`` (``Debug-v0`` with
  ``step_sleep_us=1000``: every env step sleeps 1 ms with the GIL released, standing in for an
  expensive simulator), ``envs_per_worker`` envs per host stepped by one pool thread, so the
  machine's 2 cores are not what limits the hosts' rollouts. Weak scaling: ``N`` hosts step ``N``
  times the envs.
* **Hosts** (``N`` = worker hosts): ``actors`` runs the learner on a host of its own and one actor
  on each of ``N`` hosts (``N + 1`` namespaces); ``multi_learner`` runs 2 learners (the driver's
  host and one more) with ``N / 2`` actors each (``N + 2`` namespaces; ``N = 1``: one learner);
  ``data_parallel`` runs the whole loop on each of ``N`` hosts (``N`` namespaces).
* **Traffic**: the switch's port counters (``/sys/class/net/port*/statistics``, read with
  ``ip -s link`` in the switch's namespace) between the warm-up mark and the last iteration:
  every byte a host sends is counted once, at its port (Ethernet, IP and TCP headers, TCP
  acknowledgements, RPC framing included). Beside them, what ``explain`` predicts for the same
  placement (``pickled``: the pickled payloads; ``bytes``: the tensors alone) and what the
  runtime's counters counted.
* **Link limits** (``--limits``): ``tc qdisc ... tbf`` on both ends of every host's link (the
  host's ``eth0`` and its switch port), so each host sends and receives at most that rate.
* **Model**: see :func:`fit_model`; it projects frames/s at 16, 32 and 64 nodes on 10 and
  100 Gbit/s networks and reports its own error at 8 hosts (fitted on 1, 2 and 4 only).

Run ``python -m benchmarks.cluster`` as root (``--quick``: fewer points). Results go to
``benchmarks/results/cluster.{json,png}``.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from benchmarks._common import alternate, fmt_rate, fmt_ratio, median, print_table, write_json  # noqa: E402

logger = logging.getLogger(__name__)

ROOT = str(Path(__file__).resolve().parent.parent)
ENV = ("Debug-v0", {"step_sleep_us": 1000})
POLICIES = ("actors", "multi_learner", "data_parallel")
#: The hosts each policy's model is fitted on (multi_learner on 1 host is one learner: another layout).
FIT_HOSTS = {"multi_learner": (2, 4)}


def policy_config(name: str, hosts: int, envs_per_worker: int, timeout: float = 120.0
                  ) -> tuple[dict[str, Any], int, int]:
    """(policy config, envs of the driver's loop, namespaces) for ``hosts`` worker hosts.

    Example:
        >>> policy_config("actors", 4, 64)[1:]
        (256, 5)
    """
    if name == "actors":
        return ({"name": "actors", "actors": hosts, "envs_per_actor": envs_per_worker, "timeout": timeout},
                envs_per_worker * hosts, hosts + 1)
    if name == "multi_learner":
        learners = 1 if hosts == 1 else 2
        per = hosts // learners
        return ({"name": "multi_learner", "learners": learners, "actors_per_learner": per,
                 "envs_per_actor": envs_per_worker, "timeout": timeout},
                envs_per_worker * per, learners + hosts)
    if name == "data_parallel":
        return {"name": "data_parallel", "workers": hosts, "timeout": timeout}, envs_per_worker, hosts
    raise ValueError(f"unknown policy {name!r} (one of {POLICIES})")


# -- one node of a job (run by torchrun on every host) -----------------------------------------------
def node(spec: dict[str, Any]) -> None:
    """Runs the job of ``spec`` on this node; node 0 writes ``<out>/result.json``."""
    import torch

    from torchfrag.graph import capture
    from torchfrag.policies import PPOFactory, as_policy
    from torchfrag.policies.explain import crossings
    from torchfrag.runtime import run
    from torchfrag.testing.cluster import sent_bytes

    torch.set_num_threads(1)
    pol, num_envs = spec["policy"], spec["num_envs"]
    steps, warmup, iters = spec["steps"], spec["warmup"], spec["iterations"]
    cfg = {"num_envs": num_envs, "steps": steps, "epochs": 1, "minibatch_size": num_envs * steps}
    factory = PPOFactory(ENV[0], cfg, seed=0, env_options={**ENV[1], "num_threads": 1})
    loop = factory()
    graph = capture(loop)
    marks: list[tuple[float, int]] = []
    counters: list[dict[int, int]] = []

    def hook(i: int, _out: Any, _g: Any) -> bool:
        marks.append((time.perf_counter(), loop.rollout.frames))
        if i in (warmup - 1, warmup + iters - 1):
            counters.append(sent_bytes())
        return False

    try:
        res = run(graph, pol, iterations=warmup + iters, hooks=[hook], factory=factory)
    finally:
        loop.close()
    if int(os.environ.get("RANK", "0")) != 0:
        return
    cross = crossings(as_policy(pol).place(graph))
    predicted = predicted_traffic(cross, pol)
    (t0, f0), (t1, f1) = marks[warmup - 1], marks[-1]
    times = [b[0] - a[0] for a, b in zip(marks[warmup - 1:], marks[warmup:])]
    carried = {k: (counters[1][k] - counters[0][k]) / iters for k in counters[0]} if len(counters) == 2 else {}
    comm = res.extra.get("comm", {})
    result = {"fps": (f1 - f0) / (t1 - t0), "iteration_s": times, "frames_per_iteration": (f1 - f0) / iters,
              "carried_per_host": carried, "carried": sum(carried.values()),
              "predicted_tensor_bytes": sum(c.bytes for c in cross),
              "predicted_pickled": predicted,
              "predicted_calls": sum(c.calls for c in cross),
              "predicted": [{"src": c.src, "dst": c.dst, "kind": c.kind, "calls": c.calls, "bytes": c.bytes,
                             "pickled": c.pickled} for c in cross],
              "comm": {k: float(v) for k, v in comm.items() if isinstance(v, (int, float))}}
    Path(spec["out"], "result.json").write_text(json.dumps(result))


def predicted_traffic(cross: list[Any], policy: dict[str, Any]) -> float:
    """Bytes per iteration on all links together that ``explain``'s crossings predict.

    RPC crossings count once (their pickled payloads); a collective's crossing is the ring traffic
    of one rank, so it counts once per rank of the collective (``data_parallel``: every worker;
    ``multi_learner``: the learners).

    Example:
        >>> from types import SimpleNamespace as S
        >>> predicted_traffic([S(kind="data", pickled=100), S(kind="gradients", pickled=10)],
        ...                   {"name": "multi_learner", "learners": 2})
        120
    """
    ranks = int(policy.get("learners") or policy.get("workers") or 1)
    return sum(c.pickled * (ranks if c.kind == "gradients" else 1) for c in cross)


# -- the orchestrator ----------------------------------------------------------------------------------
def measure(policy: str, hosts: int, args: argparse.Namespace, limit_mbit: float | None = None
            ) -> dict[str, Any]:
    """One job of ``policy`` on ``hosts`` worker hosts; the driver's result plus the set-up."""
    from torchfrag.testing.cluster import Cluster

    pol, num_envs, namespaces = policy_config(policy, hosts, args.envs_per_worker)
    with tempfile.TemporaryDirectory(prefix="tfbench-") as tmp:
        spec = {"policy": pol, "num_envs": num_envs, "steps": args.steps, "warmup": args.warmup,
                "iterations": args.iterations, "out": tmp}
        env = {**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"}
        t_start = time.monotonic()
        with Cluster(namespaces, log_dir=Path(tmp) / "logs", env=env) as c:
            if limit_mbit:
                c.limit(limit_mbit)
            procs = [c.torchrun(i, ["-m", "benchmarks.cluster", "--job-node", json.dumps(spec)], cwd=ROOT)
                     for i in range(namespaces)]
            deadline = time.monotonic() + args.job_timeout
            while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
                time.sleep(0.5)
            codes = [p.poll() for p in procs]
            path = Path(tmp, "result.json")
            if codes != [0] * namespaces or not path.exists():
                raise RuntimeError(f"{policy} on {hosts} hosts failed (exit codes {codes}):\n"
                                   + c.log(0)[-3000:])
            result = json.loads(path.read_text())
    result.update(policy=policy, hosts=hosts, namespaces=namespaces, limit_mbit=limit_mbit,
                  job_seconds=time.monotonic() - t_start)
    logger.info("%s x%d%s: %.0f frames/s, %.0f B/it carried", policy, hosts,
                f" @{limit_mbit} Mbit/s" if limit_mbit else "", result["fps"], result["carried"])
    return result


# -- the model -----------------------------------------------------------------------------------------
def _lstsq(xs: list[float], ys: list[float]) -> tuple[float, float]:
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - slope * mx, slope


def fit_model(points: list[dict[str, Any]], fit_hosts: tuple[int, ...] = (1, 2, 4)) -> dict[str, Any]:
    """Fits ``T(N) = c + a * N`` to one policy's iteration times (the hosts in ``fit_hosts``).

    ``c`` is the time every iteration takes whatever ``N`` is (the hosts' rollouts, in parallel);
    ``a`` is what each more host adds on the serial path: the learner's work on its batch
    (``actors``, ``multi_learner``: the driver learns on all ``N`` batches) or the gradient
    all-reduce's steps (``data_parallel``), plus, here, the hosts' share of the machine's 2 cores.
    The network's part of ``a`` is taken out as ``bytes(N) / B_veth + messages(N) * m`` with the
    measured bytes and calls per host and the per-message cost ``m`` measured between two hosts,
    so that a projection can put it back for another network.
    """
    pts = sorted((p for p in points if p["hosts"] in fit_hosts), key=lambda p: p["hosts"])
    xs = [float(p["hosts"]) for p in pts]
    ys = [median(p["iteration_s"]) for p in pts]
    c, a = _lstsq(xs, ys)
    per_host_bytes = _lstsq(xs, [p["carried"] for p in pts])[1]
    per_host_calls = _lstsq(xs, [p["predicted_calls"] for p in pts])[1]
    return {"c_s": c, "a_s_per_host": a, "bytes_per_host": max(0.0, per_host_bytes),
            "calls_per_host": max(0.0, per_host_calls), "fit_hosts": list(fit_hosts),
            "allreduce_bytes": float(pts[-1]["comm"].get("allreduce_bytes", 0.0)),
            "allreduce_calls": float(pts[-1]["comm"].get("allreduce_calls", 0.0))}


def predict_fps(model: dict[str, Any], policy: str, hosts: int, frames_per_host: float,
                gbit: float | None = None, msg_s: float = 0.0, veth_gbit: float = 0.0) -> float:
    """Frames/s the model predicts for ``hosts`` worker hosts (on the measured links when ``gbit``
    is ``None``, else on a ``gbit`` Gbit/s network).

    ``T(N) = c + max(a, 0) N``. On another network, the time each host's bytes take on the
    serial path (the learner's link) is taken out at the measured links' speed and put back at
    ``gbit``, plus ``msg_s`` per message. ``data_parallel``'s ring all-reduce adds
    ``2 (N - 1)`` steps per all-reduce, each a message (``msg_s``) carrying ``G / N`` bytes.

    Example:
        >>> m = {"c_s": 1.0, "a_s_per_host": 0.01, "bytes_per_host": 0.0, "calls_per_host": 1.0}
        >>> round(predict_fps(m, "actors", 10, 1000.0))
        9091
    """
    c, a = model["c_s"], max(0.0, model["a_s_per_host"])
    if gbit is not None:
        b = model["bytes_per_host"]
        old = b * 8 / (veth_gbit * 1e9) if veth_gbit else 0.0
        a = max(0.0, a - old) + b * 8 / (gbit * 1e9) + model["calls_per_host"] * msg_s
        if policy == "data_parallel":
            g, k = model.get("allreduce_bytes", 0.0), model.get("allreduce_calls", 1.0)
            c += k * 2 * (hosts - 1) * (msg_s + g / hosts * 8 / (gbit * 1e9))
    return frames_per_host * hosts / (c + a * hosts)


def _between_two_hosts(server: str, client: str) -> float:
    """Runs Python ``server`` on host 0 and ``client`` on host 1; the number the client prints."""
    from torchfrag.testing.cluster import Cluster

    with tempfile.TemporaryDirectory() as tmp, Cluster(2, log_dir=tmp) as c:
        c.run(0, [sys.executable, "-c", server], name="server")
        time.sleep(1.0)
        for _ in range(20):  # until the server listens
            if c.run(1, [sys.executable, "-c", client], name="client").wait(60) == 0:
                break
            time.sleep(0.5)
        return float(c.log(1, "client").split()[-1])


def ping_cost(rounds: int = 200) -> float:
    """Median round trip of a one-byte TCP message between two hosts (seconds)."""
    server = ("import socket; s = socket.create_server(('198.18.0.1', 5001)); c, _ = s.accept(); "
              "c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\n"
              "while (b := c.recv(1)):\n    c.sendall(b)")
    client = ("import socket, time, statistics; c = socket.create_connection(('198.18.0.1', 5001), 10); "
              "c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); ts = []\n"
              f"for _ in range({rounds}):\n    t = time.perf_counter(); c.sendall(b'x'); c.recv(1); "
              "ts.append(time.perf_counter() - t)\nprint(statistics.median(ts))")
    return _between_two_hosts(server, client)


def veth_speed_gbit(seconds: float = 2.0) -> float:
    """Throughput of one TCP stream between two hosts (Gbit/s): the links the model was fitted on."""
    server = ("import socket; s = socket.create_server(('198.18.0.1', 5002)); c, _ = s.accept(); n = 0\n"
              "while (b := c.recv(1 << 20)):\n    n += len(b)\nprint(n)")
    client = ("import socket, time; c = socket.create_connection(('198.18.0.1', 5002), 10); "
              "buf = bytes(1 << 20); t = time.perf_counter(); n = 0\n"
              f"while time.perf_counter() - t < {seconds}:\n    c.sendall(buf); n += len(buf)\n"
              "c.close(); print(n * 8 / (time.perf_counter() - t) / 1e9)")
    return _between_two_hosts(server, client)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--job-node", help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="1, 2 and 4 hosts, fewer iterations")
    p.add_argument("--hosts", type=int, nargs="*", default=None)
    p.add_argument("--policies", nargs="*", default=list(POLICIES))
    p.add_argument("--limits", type=float, nargs="*", default=[100.0, 1000.0], help="Mbit/s per link")
    p.add_argument("--limit-hosts", type=int, default=4, help="worker hosts of the link-limited runs")
    p.add_argument("--envs-per-worker", type=int, default=64)
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--job-timeout", type=float, default=400.0)
    p.add_argument("--repeats", type=int, default=3, help="alternating runs of the headline pair")
    p.add_argument("--summarize", action="store_true",
                   help="refit the model and redraw from benchmarks/results/cluster.json (no runs)")
    args = p.parse_args(argv)
    if args.job_node:
        node(json.loads(args.job_node))
        return {}
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.summarize:
        from benchmarks._common import RESULTS_DIR

        with open(os.path.join(RESULTS_DIR, "cluster.json")) as f:
            old = json.load(f)
        return summarize(old)
    hosts = args.hosts or ([1, 2, 4] if args.quick else [1, 2, 4, 8])
    if args.quick:
        args.iterations = min(args.iterations, 3)

    msg_s, veth = ping_cost(), veth_speed_gbit()
    logger.info("between two hosts: %.0f us per round trip, %.1f Gbit/s", msg_s * 1e6, veth)
    scaling = [measure(pol, n, args) for pol in args.policies for n in hosts]
    limited = [measure(pol, args.limit_hosts, args, limit) for limit in args.limits for pol in args.policies]
    top = max(hosts)
    pair = alternate({"actors x1": lambda: measure("actors", 1, args)["fps"],
                      f"actors x{top}": lambda: measure("actors", top, args)["fps"]}, args.repeats)
    headline = {"runs": pair, "hosts": top,
                "ratio": median(pair[f"actors x{top}"]) / median(pair["actors x1"]), "goal": 6.5}
    logger.info("headline: actors x%d / x1 = %.2fx (medians of %d alternating runs; goal 6.5x)", top,
                headline["ratio"], args.repeats)

    return summarize({"setup": {"env": ENV[0], "options": ENV[1], "envs_per_worker": args.envs_per_worker,
                                "steps": args.steps, "warmup": args.warmup, "iterations": args.iterations,
                                "round_trip_s": msg_s, "veth_gbit": veth, "limit_hosts": args.limit_hosts},
                      "headline": headline, "scaling": scaling, "limited": limited})


def summarize(payload: dict[str, Any]) -> dict[str, Any]:
    """Fits the models, projects, prints the tables, writes the JSON and the plot."""
    setup, scaling, limited = payload["setup"], payload["scaling"], payload["limited"]
    msg_s, veth = setup["round_trip_s"], setup["veth_gbit"]
    frames_per_host = setup["envs_per_worker"] * setup["steps"]
    models, projection, rows = {}, [], []
    for pol in dict.fromkeys(r["policy"] for r in scaling):
        pts = [r for r in scaling if r["policy"] == pol]
        one = next((r["fps"] for r in pts if r["hosts"] == 1), float("nan"))
        fit_hosts = FIT_HOSTS.get(pol, (1, 2, 4))
        if len([r for r in pts if r["hosts"] in fit_hosts]) >= 2:
            models[pol] = fit_model(pts, fit_hosts)
            top = max(r["hosts"] for r in pts)
            top_fps = next(r["fps"] for r in pts if r["hosts"] == top)
            pred = predict_fps(models[pol], pol, top, frames_per_host)
            models[pol].update(check_hosts=top, check_measured_fps=top_fps, check_predicted_fps=pred,
                               check_error=pred / top_fps - 1)
            for gbit in (10.0, 100.0):
                for n in (16, 32, 64):
                    projection.append({"policy": pol, "nodes": n, "gbit": gbit,
                                       "fps": predict_fps(models[pol], pol, n, frames_per_host, gbit,
                                                          msg_s, veth)})
        for r in pts:
            rows.append((pol, r["hosts"], fmt_rate(r["fps"]), fmt_ratio(r["fps"] / one),
                         f"{median(r['iteration_s']) * 1e3:.0f}", f"{r['carried'] / 1024:.1f}",
                         f"{r['predicted_pickled'] / 1024:.1f}",
                         f"{100 * (r['predicted_pickled'] / r['carried'] - 1):+.1f}%" if r["carried"] else "-"))
    print_table(("policy", "hosts", "frames/s", "vs 1 host", "ms/it", "KiB/it carried", "KiB/it explain",
                 "explain vs carried"), rows, title="scaling on the slow env (no link limit)")
    print_table(("policy", "Mbit/s", "frames/s", "KiB/it carried", "KiB/it explain", "explain vs carried"),
                [(r["policy"], f"{r['limit_mbit']:.0f}", fmt_rate(r["fps"]), f"{r['carried'] / 1024:.1f}",
                  f"{r['predicted_pickled'] / 1024:.1f}",
                  f"{100 * (r['predicted_pickled'] / r['carried'] - 1):+.1f}%") for r in limited],
                title=f"{setup.get('limit_hosts', 4)} worker hosts, every link limited (tbf)")
    print_table(("policy", "nodes", "Gbit/s", "frames/s (model)", "vs 1 host", "MSRL (paper)"),
                [(q["policy"], q["nodes"], f"{q['gbit']:.0f}", fmt_rate(q["fps"]),
                  fmt_ratio(q["fps"] / next(r["fps"] for r in scaling if r["policy"] == q["policy"]
                                            and r["hosts"] == 1)),
                  MSRL["table"].get(q["nodes"], "-")) for q in projection],
                title="projection (model fitted on the measured hosts)")
    payload = {**payload, "models": models, "projection": projection, "msrl": MSRL}
    write_json("cluster", payload)
    plot(payload)
    return payload


#: What MSRL reports about its scaling, as far as the search tools could find it: the paper's
#: abstract (arXiv 2210.00882, USENIX ATC 2023) says it scales RL training to 64 GPUs; the
#: per-point numbers of its PPO scaling figure were not found in any stored text, so none are
#: quoted here.
MSRL: dict[str, Any] = {
    "source": "Zhu et al., MSRL: Distributed Reinforcement Learning with Dataflow Fragments, "
              "USENIX ATC 2023, arXiv 2210.00882 (abstract: 'scaling RL training to 64 GPUs')",
    "points": None,
    "table": {64: "scales PPO to 64 GPUs (figure values not found)"},
}


def plot(payload: dict[str, Any], name: str = "cluster") -> str:
    """Frames/s vs hosts (measured and modelled), and the projection to 64 nodes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks._common import RESULTS_DIR

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    fph = payload["setup"]["envs_per_worker"] * payload["setup"]["steps"]
    for pol in POLICIES:
        pts = sorted((r for r in payload["scaling"] if r["policy"] == pol), key=lambda r: r["hosts"])
        if not pts:
            continue
        line, = ax1.plot([r["hosts"] for r in pts], [r["fps"] for r in pts], "o-", label=f"{pol} measured")
        if pol in payload["models"]:
            xs = list(range(1, max(r["hosts"] for r in pts) + 1))
            ax1.plot(xs, [predict_fps(payload["models"][pol], pol, n, fph) for n in xs], "--",
                     color=line.get_color(),
                     label=f"{pol} model (fit on {', '.join(map(str, payload['models'][pol]['fit_hosts']))})")
            for gbit, style in ((10.0, ":"), (100.0, "-.")):
                q = [r for r in payload["projection"] if r["policy"] == pol and r["gbit"] == gbit]
                ax2.plot([r["nodes"] for r in q], [r["fps"] for r in q], style, marker="s",
                         color=line.get_color(), label=f"{pol} {gbit:.0f} Gbit/s")
    ax1.set(xlabel="worker hosts", ylabel="frames/s", title="measured (namespaces, 2 cores)")
    ax2.set(xlabel="nodes", ylabel="frames/s (model)", xscale="log", yscale="log",
            title="projection to 64 nodes")
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    path = os.path.join(RESULTS_DIR, f"{name}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    main(sys.argv[1:])
