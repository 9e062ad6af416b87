"""PPO frames/s under each distribution policy, scaling with workers, and TorchRL's MultiSyncCollector.

Three measurements, every one in this process and this run (the machine is
shared: compare ratios within one run, not across runs):

* **Scaling** on a slow synthetic env (``Debug-v0`` with ``step_sleep_us=1000``:
  every env step sleeps 1 ms in C++ with the GIL released, standing in for an
  expensive simulator) and on ``CartPole-v1``: PPO frames/s under ``local``,
  ``actors``, ``async_actors``, ``central_inference`` and ``data_parallel`` with
  1, 2, 4 and 8 workers. Weak scaling: every worker owns ``envs_per_worker``
  envs (64 on the slow env, 8 on CartPole) stepped with ``num_threads=1``, so ``N`` workers step
  ``N`` times the envs; scaling efficiency is ``fps(N) / (N * fps(1))``. Bytes
  and RPC calls per iteration come from the RPC runtime's counters
  (``RunResult.extra["comm"]``).
* **actors vs MultiSyncCollector** on ``CartPole-v1``: ``actors`` with 2 workers
  against TorchRL's ``MultiSyncCollector`` with 2 workers, each worker one
  ``GymEnv("CartPole-v1")`` on one side and one pool env on the other, the same
  policy network, the same frames per batch, and the same GAE + PPO learner
  (the fragments of one ``PPOLoop``) consuming every batch; weights go back to
  the collector's workers after every learn step (``update_policy_weights_``).
* **multi_learner vs actors** with the same number of actor processes: ``actors`` with
  ``N`` actors (one learner, the driver) against ``multi_learner`` with 2 learners of
  ``N/2`` actors each (one more process: the second learner; gradients all-reduced between
  the two), every actor ``envs_per_worker`` envs of the slow env, alternating order, medians.
  Each learner learns on its own actors' batch (half the frames per gradient step), so the
  learners' work is split in two.
* Frames/s are measured between iteration ``warmup`` and the last one, so the
  worker start-up (spawn, import torch: seconds) is excluded.
* Every policy runs with its defaults (``actors``: the advantage on the learner,
  on the gathered batch; actors roll out under ``torch.inference_mode``) and the
  same PPO settings for every policy and worker count: one epoch, one minibatch
  of the whole batch per iteration.

Where the time of a synchronous ``actors`` iteration goes on the slow env (2-core
machine, one core busy with a nice-19 run; one iteration, medians of a few runs)::

    phase                                         1 worker   8 workers
    rollout on each actor (env sleep + act)       ~580 ms    ~600-650 ms
      of which env steps (1024 sleeps/actor)      ~570 ms    ~600-630 ms
    first request -> last actor starting           ~2 ms      ~8-10 ms
    spread of the actors' finish times             -          ~20-35 ms
    last answer -> batch gathered (cat)            ~2-3 ms    ~2-4 ms
    GAE + PPO update on the driver (serial)        ~10 ms     ~35-60 ms
    iteration                                     ~600 ms    ~680-730 ms

The learner grows with N (N times the frames); the rest of the growth is the
actors contending for 2 cores (8 pool threads waking every ~1 ms, 8 Python
act loops) and waiting for the slowest actor. GAE on the actors
(``advantage="actors"``) or on each batch as it arrives (``"on_arrival"``) did
not measurably change the 8-worker iteration on this machine (within +-20 ms of
run-to-run noise); two intra-op threads for the learner made it 5-15x slower
on this shared machine (OpenMP threads descheduled), so the learner stays on one.

Where the time of one CartPole ``actors`` x2 iteration goes (1 env x 128 steps per actor;
2-core machine shared with other jobs; per-phase timestamps and thread CPU in the driver
and in the workers, medians)::

    phase                                                  CPU per iteration
    rollout on each actor (128 x act + env step + stack)   52-80 ms (most of it TensorDict /
                                                           TorchRL step bookkeeping around a
                                                           ~20 us C++ step; the stack ~4.5 ms)
    actor: unpack + load the synced state                  ~0.2 ms
    actor: collect produced state                          ~0.05 ms
    actor process beyond its rollout (RPC threads, pickle) 2-5 ms
    driver: pack the state (once for both actors)          ~0.15 ms
    driver: issue 2 RPCs / receive 2 answers               ~0.85 ms / ~0.45 ms
    driver: merge produced state                           ~0.02 ms
    driver: cat the batches + episode statistics           ~0.8 ms
    driver: GAE + PPO update                               ~8-9 ms
    all processes (MultiSyncCollector x2: ~225 ms)         ~150 ms

The state sync and the produced-state merge are under 1% of the iteration; the actors'
per-step rollout is most of it, so the ratio to ``MultiSyncCollector`` is set by the cost
of a step and by how the other jobs on the machine share the two cores (``--cartpole-only``
reports CPU per frame of all processes beside frames/s for that reason).

Run ``python -m benchmarks.policies`` (``--quick`` for a short run). Results go
to ``benchmarks/results/policies.{json,png}`` (``--cartpole-only``: only the CartPole pair,
``policies_cartpole.{json,png}``; ``--headline-only``: ``policies_headline.json``). The
script's entry point is guarded by ``if __name__ == "__main__":``, which the spawned
workers need.
"""
from __future__ import annotations

import argparse
import logging
import os
import time
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

from benchmarks._common import (  # noqa: E402
    alternate,
    fmt_ratio,
    fmt_rate,
    median,
    print_table,
    write_json,
)

logger = logging.getLogger(__name__)

SLOW = ("Debug-v0", {"step_sleep_us": 1000})
CARTPOLE = ("CartPole-v1", {})


def _policy(name: str, workers: int, envs_per_worker: int) -> tuple[dict[str, Any], int]:
    """(policy config, total envs of the driver's loop) for ``workers`` workers."""
    if name == "local":
        return {"name": "local"}, envs_per_worker
    if name in ("actors", "async_actors"):
        pol: dict[str, Any] = {"name": name, "actors": workers, "envs_per_actor": envs_per_worker}
        if name == "async_actors":
            pol.update(staleness=1, prefetch=1)
        return pol, envs_per_worker * workers
    if name == "central_inference":
        return {"name": name, "env_workers": workers}, envs_per_worker * workers
    if name == "data_parallel":
        return {"name": name, "workers": workers}, envs_per_worker
    if name == "multi_learner":  # `workers` actors in all: 2 learners with workers / 2 actors each
        per = max(1, workers // 2)
        return ({"name": name, "learners": 2, "actors_per_learner": per, "envs_per_actor": envs_per_worker},
                envs_per_worker * per)
    raise ValueError(name)


def _cpu_of_tree() -> float:
    """CPU seconds (user + system) of this process and its live child processes (the workers)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - psutil is a test dependency
        return float("nan")
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


def ppo_fps(env: tuple[str, dict[str, Any]], policy: str, workers: int, envs_per_worker: int,
            steps: int, warmup: int, iterations: int) -> dict[str, float]:
    """PPO frames/s of one run (after ``warmup`` iterations) and its per-iteration traffic."""
    import torch

    from torchfrag.graph import capture
    from torchfrag.policies import PPOFactory
    from torchfrag.runtime import run

    pol, num_envs = _policy(policy, workers, envs_per_worker)
    per_rank = num_envs * (workers if policy == "data_parallel" else 1)
    cfg = {"num_envs": num_envs, "steps": steps, "epochs": 1, "minibatch_size": per_rank * steps}
    if policy == "data_parallel":
        cfg["minibatch_size"] = num_envs * steps
    env_id, options = env
    factory = PPOFactory(env_id, cfg, seed=0, env_options={**options, "num_threads": 1})
    torch.set_num_threads(1)
    loop = factory()
    marks: list[tuple[float, int]] = []
    cpu: list[float] = []

    def hook(i: int, out: Any, g: Any) -> bool:
        marks.append((time.perf_counter(), loop.rollout.frames))
        if i == warmup - 1 or i == warmup + iterations - 1:
            cpu.append(_cpu_of_tree())
        return False

    try:
        res = run(capture(loop), pol if policy != "local" else "local", iterations=warmup + iterations,
                  hooks=[hook], factory=None if policy == "local" else factory)
    finally:
        loop.close()
    (t0, f0), (t1, f1) = marks[warmup - 1], marks[-1]
    comm = res.extra.get("comm", {})
    return {"fps": (f1 - f0) / (t1 - t0), "cpu_us_per_frame": 1e6 * (cpu[-1] - cpu[0]) / max(1, f1 - f0),
            "bytes": float(comm.get("bytes", 0.0)),
            "calls": float(comm.get("calls", 0.0)),
            "allreduce_bytes": float(comm.get("allreduce_bytes", 0.0)),
            "allreduce_calls": float(comm.get("allreduce_calls", 0.0))}


def _make_gym_cartpole() -> Any:
    from torchrl.envs import GymEnv

    return GymEnv("CartPole-v1", categorical_action_encoding=True)


def multisync_fps(workers: int, steps: int, warmup: int, iterations: int) -> dict[str, float]:
    """TorchRL ``MultiSyncCollector`` (``workers`` x one GymEnv) feeding the same PPO learner."""
    import torch
    from torchrl.collectors import MultiSyncCollector

    from torchfrag.policies import PPOFactory

    cfg = {"num_envs": workers, "steps": steps, "epochs": 1, "minibatch_size": workers * steps}
    loop = PPOFactory("CartPole-v1", cfg, seed=0)()  # the same networks and learner as `actors`
    collector = MultiSyncCollector([_make_gym_cartpole] * workers, loop.actor,
                                   frames_per_batch=workers * steps, total_frames=-1, cat_results="stack")
    frames = 0
    marks: list[tuple[float, int]] = []
    cpu: list[float] = []
    try:
        for i, batch in enumerate(collector):
            batch = batch.reshape(workers, steps) if batch.ndim == 1 else batch  # [workers, T]
            if loop.scale is not None:
                batch = loop.scale(batch)
            loop.learn(loop.advantage(batch))
            collector.update_policy_weights_()
            frames += batch.numel()
            marks.append((time.perf_counter(), frames))
            if i == warmup - 1 or i + 1 >= warmup + iterations:
                cpu.append(_cpu_of_tree())
            if i + 1 >= warmup + iterations:
                break
    finally:
        collector.shutdown()
        loop.close()
    torch.set_num_threads(1)
    (t0, f0), (t1, f1) = marks[warmup - 1], marks[-1]
    return {"fps": (f1 - f0) / (t1 - t0), "cpu_us_per_frame": 1e6 * (cpu[-1] - cpu[0]) / max(1, f1 - f0)}


def multi_learner_vs_actors(totals: list[int], epw: int, steps: int, warmup: int, iters: int,
                            repeats: int) -> dict[str, Any]:
    """``actors`` (N actors) vs ``multi_learner`` (2 learners x N/2 actors) on the slow env, alternating."""
    out: dict[str, Any] = {}
    rows = []
    for n in totals:
        runs = alternate({
            f"actors x{n}": lambda n=n: ppo_fps(SLOW, "actors", n, epw, steps, warmup, iters),
            f"multi_learner 2x{n // 2}": lambda n=n: ppo_fps(SLOW, "multi_learner", n, epw, steps, warmup,
                                                            iters),
        }, repeats)
        fps = {k: median([r["fps"] for r in v]) for k, v in runs.items()}
        a, m = fps[f"actors x{n}"], fps[f"multi_learner 2x{n // 2}"]
        last = runs[f"multi_learner 2x{n // 2}"][-1]
        out[str(n)] = {"actors_fps": a, "multi_learner_fps": m, "ratio": m / a, "runs": runs}
        rows.append([n, fmt_rate(a), fmt_rate(m), fmt_ratio(m / a),
                     fmt_rate(last["bytes"]) + "B", fmt_rate(last["allreduce_bytes"]) + "B"])
    print_table(["actors in all", "actors frames/s", "multi_learner (2 learners) frames/s", "ratio",
                 "ml actor bytes/iter", "ml all-reduce bytes/iter"], rows,
                title="multi_learner vs actors, same actor processes (slow env, medians)")
    return out


def _apex_loop(num_envs: int, seed: int, env_slice: Any, actors: int, steps: int) -> Any:
    """Ape-X DQN as a user writes it: rollout (fixed epsilon per actor) -> replay write -> sample -> learn."""
    import torch
    from tensordict.nn import TensorDictSequential
    from torch import nn
    from torchrl.modules import EGreedyModule

    from torchfrag.algos.dqn import make_qnet, q_module
    from torchfrag.algos.envs import make_env
    from torchfrag.algos.qlearning import Q_KEYS, QLearn, TensorReplay
    from torchfrag.fragments import ReplaySample, ReplayWrite, Rollout
    from torchfrag.policies.factory import slice_seeds

    env_id, options = SLOW
    opts = {**options, "num_threads": 1}
    if env_slice is None:
        env = make_env(env_id, num_envs, seed=seed, **opts)
    else:
        env = make_env(env_id, env_slice.count, seed=slice_seeds(seed, env_slice), **opts)
    i = env_slice.worker if env_slice is not None else 0
    eps = 0.4 ** (1 + 7 * i / max(1, actors - 1))  # Ape-X's per-actor epsilon

    class ApeXDQN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.env = env
            qnet = make_qnet(env, [64, 64])
            greedy = EGreedyModule(env.action_spec_unbatched, eps_init=eps, eps_end=eps)
            self.rollout = Rollout(TensorDictSequential(qnet, greedy), env, steps=steps)
            self.buffer = TensorReplay(50_000)
            self.write = ReplayWrite(self.buffer, in_keys=Q_KEYS)
            self.sample = ReplaySample(self.buffer, batch_size=4 * 64, out_keys=Q_KEYS)
            self.learn = QLearn(q_module(qnet), lr=1e-3, updates=4, batch_size=64, gamma=0.99, tau=0.05,
                                max_grad_norm=10.0)

        def forward(self) -> Any:
            batch = self.write(self.rollout().select(*Q_KEYS))
            return self.learn(self.sample(batch))

        def close(self) -> None:
            self.env.close()

    torch.manual_seed(seed)
    return ApeXDQN()


class ApeXFactory:
    """Builds the replay-role DQN loop on the driver and on every actor (its env slice)."""

    def __init__(self, envs_per_actor: int, actors: int, steps: int, seed: int = 0) -> None:
        self.envs_per_actor, self.actors, self.steps, self.seed = envs_per_actor, actors, steps, seed

    def __call__(self, env_slice: Any = None) -> Any:
        return _apex_loop(self.envs_per_actor * self.actors, self.seed, env_slice, self.actors, self.steps)


def apex_fps(actors: int, epw: int, steps: int, warmup: int, iterations: int) -> dict[str, float]:
    """Frames/s of the replay-role DQN (``policy=apex``) with ``actors`` actors, after ``warmup`` iterations."""
    import torch

    from torchfrag.graph import capture
    from torchfrag.runtime import run

    torch.set_num_threads(1)
    factory = ApeXFactory(epw, actors, steps)
    loop = factory()
    marks: list[tuple[float, int]] = []

    def hook(i: int, out: Any, g: Any) -> bool:
        marks.append((time.perf_counter(), loop.rollout.frames))
        return False

    try:
        res = run(capture(loop), {"name": "apex", "actors": actors, "timeout": 120},
                  iterations=warmup + iterations, hooks=[hook], factory=factory)
    finally:
        loop.close()
    (t0, f0), (t1, f1) = marks[warmup - 1], marks[-1]
    comm = res.extra.get("comm", {})
    return {"fps": (f1 - f0) / (t1 - t0), "bytes": float(comm.get("bytes", 0.0)),
            "replay_bytes": float(comm.get("replay_bytes", 0.0))}


def replay_scaling(actors: list[int], epw: int, steps: int, warmup: int, iters: int,
                   repeats: int) -> dict[str, Any]:
    """Replay-role DQN frames/s with 1, 2, 4 ... actors on the slow env, alternating order, medians."""
    load0 = os.getloadavg()
    runs = alternate({f"apex x{n}": (lambda n=n: apex_fps(n, epw, steps, warmup, iters)) for n in actors},
                     repeats)
    load1 = os.getloadavg()
    fps = {k: median([r["fps"] for r in v]) for k, v in runs.items()}
    one = fps[f"apex x{actors[0]}"]
    rows = []
    for n in actors:
        k = f"apex x{n}"
        last = runs[k][-1]
        rows.append([n, fmt_rate(fps[k]), " ".join(fmt_rate(r["fps"]) for r in runs[k]),
                     fmt_ratio(fps[k] / one), f"{fps[k] / (one * n / actors[0]):.0%}",
                     fmt_rate(last["replay_bytes"]) + "B", fmt_rate(last["bytes"]) + "B"])
    print_table(["actors", "frames/s (median)", "all runs", "speed-up", "efficiency",
                 "actors->replay bytes/iter", "via learner bytes/iter"], rows,
                title="replay-role DQN (policy=apex), slow env, weak scaling (alternating, medians)")
    print(f"load average (1, 5, 15 min): {load0[0]:.1f} {load0[1]:.1f} {load0[2]:.1f} -> "
          f"{load1[0]:.1f} {load1[1]:.1f} {load1[2]:.1f}")
    return {"runs": runs, "fps_median": fps,
            "speedup": {str(n): fps[f"apex x{n}"] / one for n in actors},
            "loadavg_start": list(load0), "loadavg_end": list(load1),
            "setup": {"env": SLOW[0], "options": SLOW[1], "envs_per_actor": epw, "steps": steps,
                      "warmup": warmup, "iterations": iters, "repeats": repeats,
                      "dqn": "4 updates of 64 per iteration, replay 50k", "pool_threads_per_actor": 1}}


def plot_replay(rep: dict[str, Any], name: str = "policies_replay") -> str:
    """Frames/s vs actors (every run and the median) of the replay-role DQN: ``results/<name>.png``."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from benchmarks._common import RESULTS_DIR

    fig, ax = plt.subplots(figsize=(6, 4))
    ns = [int(k.rsplit("x", 1)[1]) for k in rep["fps_median"]]
    for n, (k, runs) in zip(ns, rep["runs"].items()):
        ax.plot([n] * len(runs), [r["fps"] for r in runs], "o", color="C0", alpha=0.4)
    ax.plot(ns, list(rep["fps_median"].values()), "-", color="C0", label="median")
    one = rep["fps_median"][f"apex x{ns[0]}"]
    ax.plot(ns, [one * n / ns[0] for n in ns], "--", color="grey", lw=0.8, label="linear")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("actors")
    ax.set_ylabel("DQN frames/s")
    la = rep["loadavg_start"][0], rep["loadavg_end"][0]
    ax.set_title(f"replay role (apex), slow env 1 ms/step; load {la[0]:.1f} -> {la[1]:.1f}", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = os.path.join(RESULTS_DIR, f"{name}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def cartpole_pair(repeats: int, warmup: int, iters: int) -> dict[str, Any]:
    """``actors`` x2 vs ``MultiSyncCollector`` x2 on CartPole (1 env per worker, 128 steps), alternating.

    Besides frames/s (wall) every run reports the CPU time of all its processes per frame,
    which the other jobs on a shared machine disturb much less than wall time.
    """
    load0 = os.getloadavg()[0]
    runs = alternate({
        "actors x2": lambda: ppo_fps(CARTPOLE, "actors", 2, 1, 128, warmup, iters),
        "MultiSyncCollector x2": lambda: multisync_fps(2, 128, warmup, iters),
    }, repeats)
    load1 = os.getloadavg()[0]
    a, m = runs["actors x2"], runs["MultiSyncCollector x2"]
    fps = {k: median([r["fps"] for r in v]) for k, v in runs.items()}
    cpu = {k: median([r["cpu_us_per_frame"] for r in v]) for k, v in runs.items()}
    paired = [x["fps"] / y["fps"] for x, y in zip(a, m)]
    out = {"runs": runs, "fps_median": fps, "cpu_us_per_frame_median": cpu,
           "ratio_fps": fps["actors x2"] / fps["MultiSyncCollector x2"],
           "ratio_cpu": cpu["MultiSyncCollector x2"] / cpu["actors x2"],
           "paired_fps_ratios": paired, "loadavg_1min": [load0, load1],
           "setup": {"env": "CartPole-v1", "workers": 2, "envs_per_worker": 1, "steps": 128,
                     "warmup": warmup, "iterations": iters, "repeats": repeats}}
    print_table(["system", "frames/s (median)", "all runs", "CPU us/frame (median, all processes)"],
                [[k, fmt_rate(fps[k]), " ".join(fmt_rate(r["fps"]) for r in runs[k]), f"{cpu[k]:.0f}"]
                 for k in runs], title="CartPole: actors x2 vs TorchRL MultiSyncCollector x2 (alternating)")
    print(f"actors / MultiSyncCollector: {fmt_ratio(out['ratio_fps'])} frames/s (median; paired "
          f"{' '.join(f'{r:.2f}' for r in paired)}), {fmt_ratio(out['ratio_cpu'])} CPU per frame; "
          f"goal >= 1.5x; load average {load0:.1f} -> {load1:.1f}")
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Runs the benchmark; returns the JSON payload."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer policies, workers and iterations")
    p.add_argument("--repeats", type=int, default=None, help="alternating repeats of the headline pairs")
    p.add_argument("--workers", type=int, nargs="*", default=None)
    p.add_argument("--policies", nargs="*", default=None)
    p.add_argument("--headline-only", action="store_true",
                   help="only the alternating headline pairs (results/policies_headline.json)")
    p.add_argument("--cartpole-only", action="store_true",
                   help="only actors x2 vs MultiSyncCollector x2 on CartPole "
                        "(results/policies_cartpole.json)")
    p.add_argument("--multi-learner-only", action="store_true",
                   help="only multi_learner vs actors (results/policies_multi_learner.json)")
    p.add_argument("--replay-only", action="store_true",
                   help="only the replay-role DQN with 1, 2, 4 actors (results/policies_replay.json)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    quick = args.quick
    workers = args.workers or [1, 2, 4, 8]
    policies = args.policies or (["actors", "central_inference"] if quick else
                                 ["actors", "async_actors", "central_inference", "data_parallel"])
    repeats = args.repeats or (1 if quick else 2)
    warmup, iters = (2, 4) if quick else (2, 8)
    # 64 envs per worker, 16 steps: 1024 ms of env sleep per worker and iteration (over the pool's
    # thread), so that the per-step Python/act cost (~1 ms) and the learner stay small beside it.
    slow_epw, slow_steps = 64, 16
    cp_epw, cp_steps = 8, 64

    if args.replay_only:
        rep = replay_scaling(workers if args.workers else [1, 2, 4], slow_epw, slow_steps, warmup, iters,
                             repeats)
        path = write_json("policies_replay", {"replay": rep, "quick": quick})
        png = plot_replay(rep)
        print(f"wrote {path} and {png}")
        return rep
    if args.cartpole_only:
        pair = cartpole_pair(repeats, warmup, iters)
        path = write_json("policies_cartpole", {"cartpole_pair": pair, "quick": quick})
        png = plot_pair(pair)
        print(f"wrote {path} and {png}")
        return pair
    results: dict[str, Any] = {"scaling": {}, "settings": {
        "slow_env": {"id": SLOW[0], "options": SLOW[1], "envs_per_worker": slow_epw, "steps": slow_steps},
        "cartpole": {"envs_per_worker": cp_epw, "steps": cp_steps}, "warmup": warmup,
        "iterations": iters, "repeats": repeats, "ppo": "epochs=1, one minibatch per iteration",
        "pool_threads_per_worker": 1}}
    ml = multi_learner_vs_actors([4] if quick else [2, 4, 8], slow_epw, slow_steps, warmup, iters, repeats) \
        if not args.headline_only else {}
    results["multi_learner_vs_actors"] = ml
    if args.multi_learner_only:
        path = write_json("policies_multi_learner", results)
        print(f"wrote {path}")
        return results
    rows = []
    for env_name, env, epw, steps in (() if args.headline_only else
                                      (("slow", SLOW, slow_epw, slow_steps),
                                       ("cartpole", CARTPOLE, cp_epw, cp_steps))):
        table: dict[str, dict[int, dict[str, float]]] = {}
        base = ppo_fps(env, "local", 1, epw, steps, warmup, iters)
        table["local"] = {1: base}
        rows.append([env_name, "local", 1, fmt_rate(base["fps"]), "-", "-", "-"])
        for pol in policies:
            table[pol] = {}
            for n in workers:
                if env_name == "cartpole" and quick and n > 2:
                    continue
                if pol == "data_parallel" and n == 1:
                    continue  # one rank: the driver alone
                r = ppo_fps(env, pol, n, epw, steps, warmup, iters)
                table[pol][n] = r
                one = table[pol].get(1) or (table[pol].get(2) if pol == "data_parallel" else None)
                n1 = 1 if 1 in table[pol] else 2
                eff = r["fps"] / (n / n1 * one["fps"]) if one else float("nan")
                r["efficiency"] = eff
                rows.append([env_name, pol, n, fmt_rate(r["fps"]), f"{eff:.0%}",
                             fmt_rate(r["bytes"] + r["allreduce_bytes"]) + "B",
                             f"{r['calls'] + r['allreduce_calls']:.1f}"])
                logger.warning("%s %s x%d: %.0f frames/s", env_name, pol, n, r["fps"])
        results["scaling"][env_name] = table
    if rows:
        print_table(["env", "policy", "workers", "frames/s", "efficiency", "bytes/iter", "calls/iter"],
                    rows, title="PPO frames/s (efficiency = fps(N) / (N * fps(1)), weak scaling)")

    # Headline pairs, alternating order, medians.
    top = max(workers)
    head = alternate({
        "slow actors x1": lambda: ppo_fps(SLOW, "actors", 1, slow_epw, slow_steps, warmup, iters)["fps"],
        f"slow actors x{top}": lambda: ppo_fps(SLOW, "actors", top, slow_epw, slow_steps, warmup,
                                               iters)["fps"],
        "slow async_actors x1": lambda: ppo_fps(SLOW, "async_actors", 1, slow_epw, slow_steps, warmup,
                                                iters)["fps"],
        f"slow async_actors x{top}": lambda: ppo_fps(SLOW, "async_actors", top, slow_epw, slow_steps,
                                                     warmup, iters)["fps"],
        "cartpole actors x2": lambda: ppo_fps(CARTPOLE, "actors", 2, 1, 128, warmup, iters)["fps"],
        "cartpole MultiSyncCollector x2": lambda: multisync_fps(2, 128, warmup, iters)["fps"],
    }, repeats)
    med = {k: median(v) for k, v in head.items()}
    speedup = med[f"slow actors x{top}"] / med["slow actors x1"]
    speedup_async = med[f"slow async_actors x{top}"] / med["slow async_actors x1"]
    vs = med["cartpole actors x2"] / med["cartpole MultiSyncCollector x2"]
    print_table(["measurement", "frames/s (median)", "all"],
                [[k, fmt_rate(v), " ".join(fmt_rate(x) for x in head[k])] for k, v in med.items()],
                title="headline pairs (alternating order)")
    print(f"slow env: actors x{top} / x1 = {speedup:.2f}x (efficiency {speedup / top:.0%}; goal >= 7x "
          f"for 8 workers)")
    print(f"slow env: async_actors x{top} / x1 = {speedup_async:.2f}x (efficiency {speedup_async / top:.0%})")
    print(f"CartPole: actors x2 / MultiSyncCollector x2 = {fmt_ratio(vs)} (goal >= 1.5x; 1 env per worker, "
          f"128 steps, same network and PPO learner)")
    results["headline"] = {"runs": head, "median": med, "slow_speedup": speedup,
                           "slow_efficiency": speedup / top, "workers": top,
                           "slow_speedup_async": speedup_async,
                           "slow_efficiency_async": speedup_async / top,
                           "actors_vs_multisync": vs}
    results["quick"] = quick
    if args.headline_only:
        path = write_json("policies_headline", results)
        print(f"wrote {path}")
        return results
    path = write_json("policies", results)
    png = plot(results)
    print(f"wrote {path} and {png}")
    return results


def plot(results: dict[str, Any], name: str = "policies") -> str:
    """Two panels: scaling efficiency vs workers per policy (slow env and CartPole), and the
    headline pairs (``actors`` vs ``MultiSyncCollector`` on CartPole, 1 vs N workers on the slow
    env). Writes ``benchmarks/results/<name>.png`` and returns its path."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from benchmarks._common import RESULTS_DIR

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1.4, 1]})
    styles = {"slow": ("-", "o"), "cartpole": (":", "s")}
    for env_name, table in results["scaling"].items():
        line, marker = styles.get(env_name, ("--", "^"))
        for j, (pol, per) in enumerate(table.items()):
            pts = sorted((int(n), r["efficiency"]) for n, r in per.items() if "efficiency" in r)
            if len(pts) < 2:
                continue
            ax.plot([n for n, _ in pts], [e for _, e in pts], line, marker=marker, color=f"C{j}",
                    label=f"{pol} ({env_name})")
    ax.axhline(7 / 8, color="grey", lw=0.8, ls="--")
    ax.text(1.05, 7 / 8 - 0.05, "7x at 8 workers (goal)", fontsize=8, color="grey")
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8], ["1", "2", "4", "8"])
    ax.set_ylim(0, 1.1)
    ax.set_xlabel("workers")
    ax.set_ylabel("scaling efficiency  fps(N) / (N fps(1))")
    ax.set_title("weak scaling (slow env: 1 ms/step; CartPole)", fontsize=10)
    ax.legend(fontsize=7, ncol=2, loc="lower left")
    ax.grid(alpha=0.3)

    head = results.get("headline", {})
    med = head.get("median", {})
    if med:
        labels = list(med)
        vals = [med[k] for k in labels]
        colors = ["C0" if "MultiSync" not in k else "C3" for k in labels]
        ypos = range(len(labels))
        bx.barh(list(ypos), vals, color=colors)
        bx.set_yticks(list(ypos), labels, fontsize=8)
        bx.invert_yaxis()
        bx.set_xscale("log")
        for y, v in zip(ypos, vals):
            bx.text(v, y, f" {v:,.0f}", va="center", fontsize=7)
        bx.set_xlabel("PPO frames/s (median of alternating runs, log scale)")
        bx.set_title(f"actors x{head.get('workers')}/x1 = {head.get('slow_speedup', float('nan')):.2f}x; "
                     f"actors/MultiSync (CartPole x2) = {head.get('actors_vs_multisync', float('nan')):.2f}x",
                     fontsize=9)
        bx.grid(alpha=0.3, axis="x")
    fig.suptitle(f"PPO under distribution policies ({'quick' if results.get('quick') else 'full'} run)",
                 fontsize=11)
    fig.tight_layout()
    path = os.path.join(RESULTS_DIR, f"{name}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_pair(pair: dict[str, Any], name: str = "policies_cartpole") -> str:
    """Frames/s of every run of both systems (and the CPU per frame): ``results/<name>.png``."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from benchmarks._common import RESULTS_DIR

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 3.8))
    for j, (k, runs) in enumerate(pair["runs"].items()):
        ax.plot(range(1, len(runs) + 1), [r["fps"] for r in runs], "o-", color=f"C{j}", label=k)
        bx.bar([j], [pair["cpu_us_per_frame_median"][k]], color=f"C{j}")
    ax.set_xlabel("repeat (alternating order)")
    ax.set_ylabel("PPO frames/s")
    ax.set_title(f"frames/s: actors / MultiSync = {pair['ratio_fps']:.2f}x (medians; goal 1.5x)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    bx.set_xticks(range(len(pair["runs"])), list(pair["runs"]), fontsize=8)
    bx.set_ylabel("CPU us per frame (all processes, median)")
    bx.set_title(f"CPU per frame: MultiSync / actors = {pair['ratio_cpu']:.2f}x", fontsize=9)
    fig.suptitle("CartPole, 2 workers x 1 env x 128 steps, same PPO learner", fontsize=10)
    fig.tight_layout()
    path = os.path.join(RESULTS_DIR, f"{name}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    main()
