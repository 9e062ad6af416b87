"""Env catalogue throughput: torchfrag vs envpool 1.2.5 per family, and vs the physics limit.

For each env id of a family, the same ids, batch and threads run on torchfrag's
pool and envpool (sync ``step`` of the whole batch), alternating sides, and
report medians of env steps per second.  Where a family has a physics engine,
its limit is measured too: the same envs stepped in a plain C++ loop with no
pool around them (``benchmarks/native/<family>_limit.cpp``; DMC: ``mj_step``
from the same number of threads, see :func:`dmc_limit_runner`), so ``of limit``
says how much of the engine's speed the pool keeps. DMC also records CPU time
per env step of ``mj_step`` alone and of the pool (:func:`dmc_cpu_breakdown`),
which a loaded host distorts far less than wall-clock rates; Box2D records the CPU
time per env step of both pools with one worker thread at the smallest size
(:func:`cpu_per_step`), for the same reason.  Results go to
``benchmarks/results/catalog_<family>.json`` and ``.png``.

Usage:
    python -m benchmarks.catalog --family box2d            # a few minutes
    python -m benchmarks.catalog --family minigrid --quick # fewer ids, sizes and repeats
    python -m benchmarks.catalog --family minigrid_wfc     # the six WFC ids
    python -m benchmarks.catalog --family dmc              # limit: mj_step on dm_control's XML
"""
from __future__ import annotations

import argparse
import glob
import logging
import os
import subprocess
import sysconfig
import tempfile
import time
from collections.abc import Callable

from benchmarks._common import (
    Runner,
    alternate,
    bar_plot,
    fmt_rate,
    fmt_ratio,
    isolated_config,
    median,
    pool_stepper,
    print_table,
    write_json,
)
from benchmarks.envs import _actions, pool_runners

log = logging.getLogger("benchmarks.catalog")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Family -> (env ids measured, the --quick subset); envpool 1.2.5 has the same ids.
FAMILIES: dict[str, tuple[list[str], list[str]]] = {
    "box2d": (["LunarLander-v3", "LunarLanderContinuous-v3", "BipedalWalker-v3",
               "BipedalWalkerHardcore-v3", "CarRacing-v3"],
              ["LunarLander-v3", "BipedalWalker-v3", "CarRacing-v3"]),
    "minigrid": (["MiniGrid-Empty-8x8-v0", "MiniGrid-DoorKey-8x8-v0", "MiniGrid-FourRooms-v0",
                  "MiniGrid-LavaCrossingS9N1-v0", "MiniGrid-KeyCorridorS3R3-v0",
                  "MiniGrid-MultiRoom-N2-S4-v0", "MiniGrid-Dynamic-Obstacles-8x8-v0",
                  "MiniGrid-Fetch-8x8-N3-v0", "MiniGrid-GoToDoor-8x8-v0", "MiniGrid-MemoryS9-v0",
                  "MiniGrid-ObstructedMaze-1Dlhb-v0", "MiniGrid-ObstructedMaze-Full-v0"],
                 ["MiniGrid-Empty-8x8-v0", "MiniGrid-DoorKey-8x8-v0", "MiniGrid-FourRooms-v0"]),
    # MiniGrid's six Wave Function Collapse ids (25x25 layouts solved at every reset): a family
    # of their own, so the rows above keep their measurement.
    "minigrid_wfc": ([f"MiniGrid-WFC-{p}-v0" for p in (
        "MazeSimple", "DungeonMazeScaled", "RoomsFabric", "ObstaclesBlackdots",
        "ObstaclesAngular", "ObstaclesHogs3")],
        ["MiniGrid-WFC-MazeSimple-v0", "MiniGrid-WFC-ObstaclesAngular-v0"]),
    "dmc": (["CartpoleSwingup-v1", "CheetahRun-v1", "FingerSpin-v1", "WalkerWalk-v1",
             "HumanoidRun-v1"],
            ["CheetahRun-v1", "WalkerWalk-v1"]),
}
# Batch sizes per family (full run, --quick).
SIZES: dict[str, tuple[list[int], list[int]]] = {
    "box2d": ([16, 64, 256], [16, 64]),
    "minigrid": ([16, 256], [64]),
    "minigrid_wfc": ([16, 256], [64]),
    "dmc": ([8, 32], [16]),
}
# DMC physics limit: (suite XML, mj_step calls per env step = control_timestep / timestep).
DMC_PHYSICS = {"CartpoleSwingup-v1": ("cartpole.xml", 1), "CheetahRun-v1": ("cheetah.xml", 1),
               "FingerSpin-v1": ("finger.xml", 2), "WalkerWalk-v1": ("walker.xml", 10),
               "HumanoidRun-v1": ("humanoid.xml", 5)}


def _build_box2d_limit(workdir: str) -> str:
    """Compiles the Box2D limit loop against the extension build's Box2D objects."""
    objects = sorted(glob.glob(os.path.join(ROOT, "build", "temp.*", "build", "native", "box2d",
                                            "**", "*.o"), recursive=True))
    sources = sorted(glob.glob(os.path.join(ROOT, "build", "native", "box2d", "src-*")))
    if not objects or not sources:
        raise SystemExit("build the extension first (setup.py build_ext --inplace): the Box2D "
                         "objects under build/ are what the limit loop links")
    exe = os.path.join(workdir, "box2d_limit")
    # The extension's own flags (Python's CFLAGS, as setuptools compiles it, and
    # pybind11's hidden visibility): without -fwrapv, CarRacing's rasterizer
    # came out ~25% slower per step in this loop than in the pool (85 vs 108 us
    # of CPU per step, one thread), so the "limit" read below the pool.
    flags = [f for f in (sysconfig.get_config_var("CFLAGS") or "").split()
             if not f.startswith("-W")] + ["-O3", "-fvisibility=hidden"]
    cmd = [os.environ.get("CXX", "g++"), "-std=c++17", *flags, "-pthread",
           "-I" + os.path.join(ROOT, "csrc"), "-I" + sources[-1],
           os.path.join(ROOT, "benchmarks", "native", "box2d_limit.cpp"), *objects, "-o", exe]
    subprocess.run(cmd, check=True)
    return exe


def limit_runner(exe: str, env_id: str, n: int, threads: int, min_time: float
                 ) -> Callable[[], float]:
    """One measurement of the plain C++ loop over the same envs."""
    def measure() -> float:
        out = subprocess.run([exe, env_id, str(n), str(threads), str(min_time)],
                             check=True, capture_output=True, text=True)
        return float(out.stdout.strip())
    return measure


def _dmc_model(env_id: str) -> tuple[object, int]:
    import mujoco

    from torchfrag._preload.mujoco import dmc_assets_dir

    xml, nsub = DMC_PHYSICS[env_id]
    return mujoco.MjModel.from_xml_path(os.path.join(dmc_assets_dir(), xml)), nsub


def dmc_limit_runner(env_id: str, n: int, threads: int, min_time: float
                     ) -> Callable[[], float]:
    """The physics limit of a DMC task: ``mujoco.mj_step`` on dm_control's XML.

    ``threads`` threads run at once (MuJoCo's bindings release the GIL), each
    stepping its share of ``n`` envs (own ``MjData``) round robin with random
    controls, as the pool's workers do. Only the ``mj_step`` calls are timed
    (no observation, reward or Python loop cost); the rate is the sum over
    threads of steps / time inside ``mj_step``. Measured concurrently, under
    the same load as the pool beside it: one thread's rate times ``threads``
    (what this runner did before) assumes idle cores, which a shared host
    does not have.
    """
    import threading

    import mujoco
    import numpy as np

    model, nsub = _dmc_model(env_id)
    rng = np.random.default_rng(0)
    acts = rng.uniform(model.actuator_ctrlrange[:, 0], model.actuator_ctrlrange[:, 1],
                       size=(256, model.nu))
    shares = [len(range(k, n, threads)) for k in range(threads)]
    datas = [[mujoco.MjData(model) for _ in range(share)] for share in shares]

    def worker(envs: list, out: list, slot: int) -> None:
        busy, done, t = 0.0, 0, 0
        wall = time.perf_counter()
        while time.perf_counter() - wall < min_time:
            for data in envs:
                data.ctrl[:] = acts[done % len(acts)]
                t0 = time.perf_counter()
                mujoco.mj_step(model, data, nstep=nsub)
                busy += time.perf_counter() - t0
                done += 1
            t += 1
            if t >= 1000:  # dm_control's episodes are 1000 env steps
                for data in envs:
                    mujoco.mj_resetData(model, data)
                t = 0
        out[slot] = done / busy

    def measure() -> float:
        rates = [0.0] * threads
        workers = [threading.Thread(target=worker, args=(datas[k], rates, k))
                   for k in range(threads) if datas[k]]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return sum(rates)
    return measure


def dmc_cpu_breakdown(env_id: str, n: int, steps: int = 2000) -> dict[str, float]:
    """CPU microseconds per env step (load-independent to first order), one thread each.

    ``mj_step``: ``mj_step(nstep)`` alone; ``dm_control_sequence``: dm_control's
    legacy step (``mj_step2``, ``nstep - 1`` ``mj_step``, ``mj_step1``; RK4
    models: ``nstep`` ``mj_step`` then ``mj_step1``), the physics the pool's
    envs run; ``pool``: the pool with one worker thread
    stepping ``n`` envs (process CPU time: worker, Python caller, observation
    and reward code, batching).
    """
    import mujoco
    import numpy as np

    from torchfrag.envs import make

    model, nsub = _dmc_model(env_id)
    acts = np.random.default_rng(0).uniform(model.actuator_ctrlrange[:, 0],
                                            model.actuator_ctrlrange[:, 1], size=(256, model.nu))

    rk4 = model.opt.integrator == mujoco.mjtIntegrator.mjINT_RK4

    def physics(legacy: bool) -> float:
        data = mujoco.MjData(model)
        mujoco.mj_forward(model, data)
        c0 = time.thread_time()
        for i in range(steps):
            if i % 1000 == 0:
                mujoco.mj_resetData(model, data)
                mujoco.mj_forward(model, data)
            data.ctrl[:] = acts[i % len(acts)]
            if legacy and rk4:  # dm_control: nstep mj_step, then mj_step1
                mujoco.mj_step(model, data, nstep=nsub)
                mujoco.mj_step1(model, data)
            elif legacy:
                mujoco.mj_step2(model, data)
                if nsub > 1:
                    mujoco.mj_step(model, data, nstep=nsub - 1)
                mujoco.mj_step1(model, data)
            else:
                mujoco.mj_step(model, data, nstep=nsub)
        return (time.thread_time() - c0) / steps * 1e6

    pool = make(env_id, num_envs=n, num_threads=1, seed=0)
    pool.reset()
    batch = np.random.default_rng(0).uniform(-1, 1, (64, n, model.nu)).astype(np.float32)
    calls = max(1, steps // n)
    c0 = time.process_time()
    for i in range(calls):
        pool.step(batch[i % len(batch)])
    pool_us = (time.process_time() - c0) / (calls * n) * 1e6
    pool.close()
    return {"mj_step": physics(False), "dm_control_sequence": physics(True), "pool": pool_us}


def cpu_per_step(env_id: str, n: int, rounds: int, seconds: float) -> dict[str, float]:
    """CPU microseconds per env step of torchfrag's pool and envpool's, one worker thread each.

    Process CPU time (worker, Python caller, batching) over env steps, each pool
    built, measured and closed alone, alternating (``isolated_config``): on a
    host shared with other jobs this is the cost of a step, which wall-clock
    rates mix with how the scheduler treats each pool's waiting threads.

    Example:
        >>> cpu_per_step("LunarLander-v3", 16, 1, 0.2)  # doctest: +SKIP
        {'torchfrag': 10.4, 'envpool': 13.9}
    """
    import envpool
    import numpy as np

    from torchfrag.envs import make

    acts = _actions(env_id, n, np.random.default_rng(0))

    def ours() -> Runner:
        pool = make(env_id, num_envs=n, num_threads=1, seed=0)
        return Runner(pool_stepper(pool, acts, "sync"), pool.close)

    def theirs() -> Runner:
        env = envpool.make(env_id, env_type="gymnasium", num_envs=n, batch_size=n,
                           num_threads=1, seed=0)
        return Runner(pool_stepper(env, acts, "sync"), env.close)

    row = isolated_config({"torchfrag": ours, "envpool": theirs}, rounds, seconds)
    return row["median_cpu_us_per_step"]


def run(family: str, env_ids: list[str], sizes: list[int], repeats: int, min_time: float,
        threads: int) -> dict:
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = _build_box2d_limit(tmp) if family == "box2d" else None
        for env_id in env_ids:
            for n in sizes:
                runners, closers = pool_runners(env_id, n, "sync", threads, min_time)
                if exe is not None:
                    runners["limit"] = limit_runner(exe, env_id, n, threads, min_time)
                elif family == "dmc":
                    runners["limit"] = dmc_limit_runner(env_id, n, threads, min_time)
                log.info("measuring %s n=%d", env_id, n)
                load_before = list(os.getloadavg())
                samples = alternate(runners, repeats)
                for close in closers:
                    close()
                record = {"env_id": env_id, "num_envs": n, "mode": "sync",
                          "threads": threads, "samples": samples,
                          "median": {k: median(v) for k, v in samples.items()},
                          # 1/5/15-minute load averages around this measurement
                          "loadavg": {"before": load_before, "after": list(os.getloadavg())}}
                if family == "dmc":
                    record["cpu_us_per_step"] = dmc_cpu_breakdown(env_id, n)
                elif family == "box2d" and n == sizes[0]:
                    record["cpu_us_per_step_1_thread"] = cpu_per_step(env_id, n, repeats, min_time)
                records.append(record)
    return {"records": records}


def report(result: dict, family: str) -> None:
    rows = []
    for r in result["records"]:
        m = r["median"]
        ours = m["torchfrag"]
        r["ratio_vs_envpool"] = ours / m["envpool"]
        r["fraction_of_limit"] = ours / m["limit"] if "limit" in m else None
        rows.append([r["env_id"], r["num_envs"], fmt_rate(m["envpool"]), fmt_rate(ours),
                     fmt_ratio(r["ratio_vs_envpool"]), fmt_rate(m.get("limit")),
                     f"{100 * r['fraction_of_limit']:.0f}%" if "limit" in m else "-"])
    ratios = [r["ratio_vs_envpool"] for r in result["records"]]
    result["median_ratio_vs_envpool"] = median(ratios)
    rows.append(["median", "", "", "", fmt_ratio(median(ratios)), "", ""])
    threads = result["settings"]["threads"]
    print_table(["env", "envs", "envpool", "torchfrag", "vs envpool", "limit", "of limit"], rows,
                title=f"{family}: env steps/s, sync, {threads} threads (medians)")
    cpu_rows = []
    for r in result["records"]:
        cpu = r.get("cpu_us_per_step")
        if cpu:
            r["cpu_fraction_of_limit"] = cpu["mj_step"] / cpu["pool"]
            cpu_rows.append([r["env_id"], r["num_envs"], f"{cpu['mj_step']:.1f}",
                             f"{cpu['dm_control_sequence']:.1f}", f"{cpu['pool']:.1f}",
                             f"{100 * r['cpu_fraction_of_limit']:.0f}%"])
    if cpu_rows:
        print_table(["env", "envs", "mj_step", "dm_control seq", "pool (1 thread)", "of limit"],
                    cpu_rows, title=f"{family}: CPU microseconds per env step")
    pool_cpu_rows = []
    for r in result["records"]:
        cpu = r.get("cpu_us_per_step_1_thread")
        if cpu:
            r["cpu_ratio_vs_envpool"] = cpu["envpool"] / cpu["torchfrag"]
            pool_cpu_rows.append([r["env_id"], r["num_envs"], f"{cpu['envpool']:.1f}",
                                  f"{cpu['torchfrag']:.1f}", fmt_ratio(r["cpu_ratio_vs_envpool"])])
    if pool_cpu_rows:
        print_table(["env", "envs", "envpool", "torchfrag", "vs envpool"], pool_cpu_rows,
                    title=f"{family}: CPU microseconds per env step, one worker thread "
                          "(medians; ratio = envpool's / ours)")
    name = f"catalog_{family}"
    groups = [f"{r['env_id'].removeprefix('MiniGrid-').rsplit('-', 1)[0]} n={r['num_envs']}"
              for r in result["records"]]
    series = {k: [r["median"].get(k, float("nan")) for r in result["records"]]
              for k in ("torchfrag", "envpool", "limit")
              if any(k in r["median"] for r in result["records"])}
    print("wrote", write_json(name, result))
    print("wrote", bar_plot(name, groups, series, "env steps / s",
                            f"{family}: torchfrag vs envpool 1.2.5 vs physics limit "
                            f"({threads} threads)", log=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--family", choices=sorted(FAMILIES), required=True)
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--min-time", type=float, default=None, help="seconds per measurement")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    ids, quick_ids = FAMILIES[args.family]
    sizes, quick_sizes = SIZES[args.family]
    if args.quick:
        ids, sizes, repeats, min_time = quick_ids, quick_sizes, args.repeats or 3, args.min_time or 0.5
    else:
        repeats, min_time = args.repeats or 5, args.min_time or 1.0
    result = run(args.family, ids, sizes, repeats, min_time, args.threads)
    result["settings"] = {"family": args.family, "sizes": sizes, "repeats": repeats,
                          "min_time": min_time, "threads": args.threads}
    report(result, args.family)


if __name__ == "__main__":
    main()
