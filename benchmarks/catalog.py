"""Catalogue families' throughput: torchfrag's C++ pool vs EnvPool 1.2.5 and the physics limit.

One section per env family, chosen with ``--family`` (other families add
theirs to ``FAMILIES``).  For each task, each num_envs and each mode (sync:
step every env per call; async: ``send``/``recv`` with ``batch_size =
num_envs // 2``) the same run measures, in alternating order, round after
round, each system built, timed and closed on its own (``measure_isolated``):

* ``torchfrag``: ``torchfrag.envs.make(task, num_envs, num_threads=T)``;
* ``envpool``: ``envpool.make(task, env_type="gymnasium", num_threads=T)``,
  the same id;
* ``physics`` (where the family has one): the physics limit, a single-thread
  loop of the raw step (``mujoco.mj_step`` for the DeepMind Control Suite:
  the task's control steps per env step on dm_control's XML) with random
  controls, timing only those calls, multiplied by T.

Reported values are medians over rounds of env steps per second (wall clock)
and CPU microseconds per env step; results go to
``benchmarks/results/catalog_<family>.json`` and ``.png``.

Usage::

    python benchmarks/catalog.py --family dmc            # full run
    python benchmarks/catalog.py --family dmc --quick    # smoke run
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Callable

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# benchmarks/mujoco.py is named like the mujoco package: keep this folder off sys.path.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, ROOT)

from benchmarks._common import (Runner, bar_plot, measure_isolated, print_table,  # noqa: E402
                                write_json)

# family -> (tasks, physics-limit maker or None)
FAMILIES: dict[str, tuple[list[str], Callable[..., Runner] | None]] = {}


def _actions(low: np.ndarray, high: np.ndarray, n: int, k: int = 64) -> np.ndarray:
    low = np.where(np.isfinite(low), low, -1.0)
    high = np.where(np.isfinite(high), high, 1.0)
    return np.random.default_rng(0).uniform(low, high, size=(k, n) + low.shape)


def _vector_runner(env, n: int, bs: int, mode: str) -> Runner:
    """Steps a pool-like env (ours or EnvPool's) with pre-drawn random actions."""
    space = env.action_space
    acts = _actions(space.low.astype(np.float64), space.high.astype(np.float64), n)
    counter = [0]
    if mode == "sync":
        env.reset()

        def steps() -> int:
            counter[0] += 1
            env.step(acts[counter[0] % len(acts)])
            return n
    else:
        env.async_reset()

        def steps() -> int:
            counter[0] += 1
            *_, info = env.recv()
            env.send(acts[counter[0] % len(acts)][:bs], info["env_id"])
            return bs
    return Runner(steps, env.close)


def make_torchfrag(task: str, n: int, mode: str, threads: int) -> Runner:
    from torchfrag.envs import make

    bs = n if mode == "sync" else n // 2
    return _vector_runner(make(task, num_envs=n, batch_size=bs, num_threads=threads, seed=0),
                          n, bs, mode)


def make_envpool(task: str, n: int, mode: str, threads: int) -> Runner:
    import envpool

    bs = n if mode == "sync" else n // 2
    return _vector_runner(envpool.make(task, env_type="gymnasium", num_envs=n, batch_size=bs,
                                       num_threads=threads, seed=0), n, bs, mode)


# ----------------------------------------------------------------- DMC ----
DMC_TASKS = ["CartpoleSwingup-v1", "CheetahRun-v1", "WalkerWalk-v1", "HumanoidRun-v1"]
# (suite XML, control steps per env step): dm_control's control_timestep / timestep.
DMC_PHYSICS = {"CartpoleSwingup-v1": ("cartpole.xml", 1), "CheetahRun-v1": ("cheetah.xml", 1),
               "WalkerWalk-v1": ("walker.xml", 10), "HumanoidRun-v1": ("humanoid.xml", 10),
               "HopperHop-v1": ("hopper.xml", 4), "FingerSpin-v1": ("finger.xml", 2),
               "ReacherEasy-v1": ("reacher.xml", 1), "FishSwim-v1": ("fish.xml", 2),
               "BallInCupCatch-v1": ("ball_in_cup.xml", 2), "AcrobotSwingup-v1": ("acrobot.xml", 1)}


def make_dmc_physics(task: str, n: int, mode: str, threads: int) -> Runner:
    """Raw mj_step loop on one thread (times `threads`); only mj_step is timed."""
    import mujoco

    from torchfrag._preload.mujoco import dmc_assets_dir

    del n, mode
    xml, nsub = DMC_PHYSICS[task]
    model = mujoco.MjModel.from_xml_path(os.path.join(dmc_assets_dir(), xml))
    data = mujoco.MjData(model)
    acts = _actions(model.actuator_ctrlrange[:, 0], model.actuator_ctrlrange[:, 1], 1, k=256)[:, 0]

    class PhysicsRunner(Runner):
        def run(self, seconds: float) -> tuple[float, float]:
            busy = cpu = 0.0
            done = t = 0
            wall = time.perf_counter()
            while time.perf_counter() - wall < seconds:
                for _ in range(32):
                    data.ctrl[:] = acts[done % len(acts)]
                    c0, t0 = time.thread_time(), time.perf_counter()
                    mujoco.mj_step(model, data, nstep=nsub)
                    busy += time.perf_counter() - t0
                    cpu += time.thread_time() - c0
                    done += 1
                    t += 1
                    if t >= 1000:  # dm_control's episodes: 1000 env steps
                        mujoco.mj_resetData(model, data)
                        t = 0
            return done / busy * threads, cpu / done * 1e6

    return PhysicsRunner(lambda: 0, lambda: None)


FAMILIES["dmc"] = (DMC_TASKS, make_dmc_physics)


def bench(family: str, tasks: list[str], num_envs: list[int], modes: list[str], threads: int,
          rounds: int, seconds: float) -> list[dict]:
    """Measures every system on every configuration; returns one dict per configuration."""
    physics = FAMILIES[family][1]
    results = []
    for task in tasks:
        for n in num_envs:
            for mode in modes:
                makers: dict[str, Callable[[], Runner]] = {
                    "torchfrag": lambda: make_torchfrag(task, n, mode, threads),
                    "envpool": lambda: make_envpool(task, n, mode, threads)}
                if physics is not None:
                    makers["physics"] = lambda: physics(task, n, mode, threads)
                rates, cpus = measure_isolated(makers, rounds, seconds)
                r = {"task": task, "num_envs": n, "mode": mode, "threads": threads,
                     "median_steps_per_s": {k: statistics.median(v) for k, v in rates.items()},
                     "median_cpu_us_per_step": {k: statistics.median(v)
                                                for k, v in cpus.items() if v},
                     "samples_steps_per_s": rates}
                results.append(r)
                print(f"{task:20s} {n:3d} {mode:5s} " + "  ".join(
                    f"{k}={v:,.0f}" for k, v in r["median_steps_per_s"].items()), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", required=True, choices=sorted(FAMILIES))
    parser.add_argument("--quick", action="store_true", help="fewer rounds, shorter runs")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--tasks", nargs="*", default=None)
    parser.add_argument("--num-envs", nargs="*", type=int, default=[8, 32])
    parser.add_argument("--modes", nargs="*", default=["sync", "async"])
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rounds = args.rounds or (2 if args.quick else 5)
    seconds = args.seconds or (0.3 if args.quick else 1.0)
    load_start = os.getloadavg()
    results = bench(args.family, args.tasks or FAMILIES[args.family][0], args.num_envs,
                    args.modes, args.threads, rounds, seconds)
    load_end = os.getloadavg()
    rows = []
    for r in results:
        m, c = r["median_steps_per_s"], r["median_cpu_us_per_step"]
        rows.append([r["task"], r["num_envs"], r["mode"], f"{m['torchfrag']:,.0f}",
                     f"{m['envpool']:,.0f}", f"{m['torchfrag'] / m['envpool']:.2f}x",
                     f"{m['physics']:,.0f}" if "physics" in m else "-",
                     f"{100 * m['torchfrag'] / m['physics']:.0f}%" if "physics" in m else "-",
                     f"{c['envpool'] / c['torchfrag']:.2f}x" if c.get("torchfrag") else "-"])
    print_table(["task", "envs", "mode", "torchfrag", "envpool", "x envpool", "physics",
                       "% of physics", "envpool CPU / ours"], rows,
                title=f"{args.family}: env steps/s, medians of {rounds} rounds")
    name = f"catalog_{args.family}"
    write_json(name, {"family": args.family, "rounds": rounds, "seconds": seconds,
                      "load_start": load_start, "load_end": load_end, "results": results})
    groups = [f"{r['task']} {r['num_envs']} {r['mode']}" for r in results]
    series = {s: [r["median_steps_per_s"].get(s, float("nan")) for r in results]
              for s in ("torchfrag", "envpool", "physics")}
    bar_plot(name, groups, series, "env steps / s (wall)",
             f"{args.family}: {args.threads} threads, load {load_start[0]:.1f}-{load_end[0]:.1f}")


if __name__ == "__main__":
    main()
