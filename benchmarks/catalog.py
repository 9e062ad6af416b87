"""Env catalogue throughput: torchfrag vs envpool 1.2.5 per family, and vs the physics limit.

For each env id of a family, the same ids, batch and threads run on torchfrag's
pool and envpool (sync ``step`` of the whole batch), alternating sides, and
report medians of env steps per second.  Where a family has a physics engine,
its limit is measured too: the physics work an env step must do, run over the
same envs from the same number of threads in a plain C++ loop with no pool
around it (``benchmarks/native/<family>_limit.cpp``: Box2D's envs as built,
DMC's MuJoCo calls of dm_control's ``Physics.step``, see
:func:`dmc_limit_runner`), so ``of limit`` says how much of the engine's speed
the pool keeps.  DMC also records CPU time per env step of that physics (and of
bare ``mj_step`` for comparison) and of the pool (:func:`dmc_cpu_breakdown`),
which a loaded host distorts far less than wall-clock rates; Box2D records the
CPU time per env step of both pools with one worker thread at the smallest size
(:func:`cpu_per_step`), for the same reason.  Every sample also records the
CPU cores its side used (:func:`with_cores`; ``cores_used`` in the JSON, a
column of the table): on a quiet 2-core host all three read ~2.0, and a
sample that read ~1.0 was taken while another job held a core.  Results go to
``benchmarks/results/catalog_<family>.json`` and ``.png``.

The catalogue process must not import the ``mujoco`` package (see
:func:`_build_dmc_limit`): it would slow torchfrag's MuJoCo envs only.

Usage:
    python -m benchmarks.catalog --family box2d            # a few minutes
    python -m benchmarks.catalog --family minigrid --quick # fewer ids, sizes and repeats
    python -m benchmarks.catalog --family minigrid_wfc     # the six WFC ids
    python -m benchmarks.catalog --family dmc              # limit: dm_control's physics in C++
"""
from __future__ import annotations

import argparse
import glob
import logging
import os
import subprocess
import sys
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
    process_cpu,
    write_json,
)
from benchmarks.envs import ACTION_BATCHES, _actions, pool_runners

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
# The DMC limit loop (benchmarks/native/dmc_limit.cpp) knows the ids of FAMILIES["dmc"].


def _build_box2d_limit(workdir: str) -> str:
    """Compiles the Box2D limit loop against the extension build's Box2D objects, or, where the
    extension was built elsewhere (``pip install -e .`` builds in a temporary folder), against
    the same Box2D sources compiled here with the extension's flags."""
    objects = sorted(glob.glob(os.path.join(ROOT, "build", "temp.*", "build", "native", "box2d",
                                            "**", "*.o"), recursive=True))
    sources = sorted(glob.glob(os.path.join(ROOT, "build", "native", "box2d", "src-*")))
    if not sources:
        raise SystemExit("install or build the extension first (setup.py build_ext --inplace): its "
                         "Box2D sources under build/native/box2d are what the limit loop compiles")
    if not objects:
        objects = sorted(glob.glob(os.path.join(sources[-1], "Box2D", "**", "*.cpp"), recursive=True))
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
    """One measurement of the plain C++ loop (``box2d_limit``) over the same envs.

    The loop replays ``ACTION_BATCHES`` sweeps of random actions (float32 box
    values, as the pools receive them), as the pools replay their
    ``ACTION_BATCHES`` action batches: the same action process, as for DMC
    (:func:`_dmc_limit`). Until 2026-11-27 it drew fresh actions every step.
    """
    def measure() -> float:
        out = subprocess.run([exe, env_id, str(n), str(threads), str(min_time),
                              str(ACTION_BATCHES)],
                             check=True, capture_output=True, text=True)
        return float(out.stdout.strip())
    return measure


def _build_dmc_limit(workdir: str) -> str:
    """Compiles the DMC limit loop (with the pool's task classes) against the mujoco wheel.

    The wheel is only located, never imported: ``import mujoco`` installs
    MuJoCo's timer callback (``mjcb_time``) process-wide, and from then on
    every MuJoCo stage of the pool's envs in this process reads the clock
    (CartpoleSwingup x8, 2 threads: 5.8 -> 8.3 us of CPU per env step, ~30%
    fewer steps/s), while envpool (its own MuJoCo) and the limit loop (another
    process) never pay it. Until 2026-11-27 this function imported it: that
    was the catalogue's light DMC rows reading 20-45% below a standalone loop.
    """
    from torchfrag._preload.mujoco import _package_dir

    mujoco_dir = _package_dir("mujoco")
    if mujoco_dir is None:
        raise SystemExit("the DMC limit loop needs the mujoco wheel (pip install mujoco)")
    libs = sorted(f for f in os.listdir(mujoco_dir) if f.startswith("libmujoco.so."))
    if not libs:
        raise SystemExit(f"no libmujoco.so.<version> in {mujoco_dir}")
    exe = os.path.join(workdir, "dmc_limit")
    # The extension's flags, as for the Box2D loop: the tasks' reward and
    # observation code is compiled here from the same sources.
    flags = [f for f in (sysconfig.get_config_var("CFLAGS") or "").split()
             if not f.startswith("-W")] + ["-O3", "-fvisibility=hidden"]
    cmd = [os.environ.get("CXX", "g++"), "-std=c++17", *flags, "-pthread",
           "-I" + os.path.join(ROOT, "csrc"), "-I" + os.path.join(mujoco_dir, "include"),
           os.path.join(ROOT, "benchmarks", "native", "dmc_limit.cpp"),
           os.path.join(ROOT, "csrc", "envs", "dmc.cpp"),
           "-L" + mujoco_dir, "-l:" + libs[-1], "-Wl,-rpath," + mujoco_dir, "-o", exe]
    subprocess.run(cmd, check=True)
    return exe


def _dmc_limit(exe: str, env_id: str, n: int, threads: int, seconds: float,
               mode: str = "sequence") -> tuple[float, float]:
    """One run of the DMC limit loop: (env steps/s, CPU microseconds per env step).

    The loop replays ``ACTION_BATCHES`` sweeps of random controls, as the
    pools replay their ``ACTION_BATCHES`` action batches: the same periodic
    forcing, so the physics sees the same kind of states. With fresh controls
    every step (the loop's default, used until 2026-11-27) CartpoleSwingup's
    cart ran into its rails less often than the pools' did and its physics
    cost ~6% less per step (x8 and x32; CheetahRun and FingerSpin: no
    difference), so the limit read ~6% above what the pools were given to do.
    """
    from torchfrag._preload.mujoco import DMC_ASSETS_ENV_VAR, dmc_assets_dir

    env = dict(os.environ)
    env.setdefault(DMC_ASSETS_ENV_VAR, dmc_assets_dir() or "")
    out = subprocess.run([exe, env_id, str(n), str(threads), str(seconds), mode,
                          str(ACTION_BATCHES)],
                         check=False, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{exe} {env_id} failed: {out.stderr.strip()}")
    rate, cpu_us = out.stdout.split()
    return float(rate), float(cpu_us)


def with_cores(measure: Callable[[], float], cores: list[float]) -> Callable[[], float]:
    """``measure`` that also appends the CPU cores this process used during it to ``cores``.

    Process CPU time (all threads) over wall time of one sample: 2.0 on 2 free
    cores for a pool whose threads all step, ~1.0 when another job holds a
    core (Linux gives each session an equal share) or when the pool's threads
    take turns. A sample read with fewer cores than its peer's says the host,
    not the code, decided it. Only the measured side's threads run during a
    sample (the other pool's workers sleep: no CPU ticks on their threads).

    Example:
        >>> cores = []
        >>> with_cores(lambda: 1.0, cores)(), len(cores)
        (1.0, 1)
    """
    def run() -> float:
        c0, t0 = process_cpu(), time.perf_counter()
        rate = measure()
        cores.append((process_cpu() - c0) / max(time.perf_counter() - t0, 1e-9))
        return rate
    return run


def dmc_limit_runner(exe: str, env_id: str, n: int, threads: int, min_time: float,
                     cores: list[float] | None = None) -> Callable[[], float]:
    """The physics limit of a DMC task: the MuJoCo work its env steps must do, with no pool.

    ``benchmarks/native/dmc_limit.cpp`` steps the same ``n`` envs (the pool's
    own task classes: same models, same resets and episode length, so the
    physics sees the same states) from ``threads`` C++ threads, each owning a
    contiguous chunk, and runs per env step only the MuJoCo calls of
    dm_control's ``Physics.step`` (``mj_step2``, ``n_sub_steps - 1``
    ``mj_step``, ``mj_step1``; RK4 models ``n_sub_steps`` ``mj_step`` then
    ``mj_step1``) on random controls (replayed like the pools' actions, see
    :func:`_dmc_limit`): no queues, batches, Python caller,
    observations or rewards, and perfect parallelism. That is the physics work
    an env step must do, and the most env steps/s any pool could reach with
    these envs on this many threads; ``of limit`` is the pool's rate over this
    one, measured alternating with it under the same load.

    (Until 2026-11-27 the limit was ``mujoco.mj_step`` called from Python
    threads on envs reset to the model's default pose: the Python call per
    step cost as much as a light model's physics, so light models read
    155-190% of it.)

    Example:
        >>> rate = dmc_limit_runner(exe, "CheetahRun-v1", 8, 2, 0.5)()  # doctest: +SKIP

    ``cores``, when given, receives the cores the loop used per sample (its
    CPU per env step times its rate), as :func:`with_cores` does for the pools.
    """
    def measure() -> float:
        rate, cpu_us = _dmc_limit(exe, env_id, n, threads, min_time)
        if cores is not None:
            cores.append(rate * cpu_us * 1e-6)
        return rate
    return measure


def dmc_cpu_breakdown(exe: str, env_id: str, n: int, seconds: float = 0.5) -> dict[str, float]:
    """CPU microseconds per env step (load-independent to first order), one thread each.

    ``dm_control_sequence``: the limit loop's physics (dm_control's step
    sequence, what the pool's envs must run); ``mj_step``: bare
    ``mj_step(n_sub_steps)`` for comparison (it skips the ``mj_step1`` each
    dm_control step ends with); ``env``: the whole env step (physics, reward,
    observation) in the same loop; all three in C++ over ``n`` envs on one
    thread (thread CPU time). ``pool``: the pool with one worker thread
    stepping ``n`` envs (process CPU time: worker, Python caller, observation
    and reward code, batching).
    """
    import numpy as np

    from torchfrag.envs import make

    sequence = _dmc_limit(exe, env_id, n, 1, seconds, "sequence")[1]
    bare = _dmc_limit(exe, env_id, n, 1, seconds, "mj_step")[1]
    env = _dmc_limit(exe, env_id, n, 1, seconds, "env")[1]
    pool = make(env_id, num_envs=n, num_threads=1, seed=0)
    pool.reset()
    nu = pool.action_space.shape[-1]
    batch = np.random.default_rng(0).uniform(-1, 1, (64, n, nu)).astype(np.float32)
    for i in range(50):  # warm the pool's cost estimates and caches
        pool.step(batch[i % len(batch)])
    # As long a window as the loop's (2,000 steps was 10 ms of CartpoleSwingup:
    # start-up effects and the scheduler's slices, 8.0 us per step against
    # 5.0-5.7 over seconds).
    calls = 0
    c0 = time.process_time()
    while time.process_time() - c0 < seconds:
        for _ in range(10):
            pool.step(batch[calls % len(batch)])
            calls += 1
    pool_us = (time.process_time() - c0) / (calls * n) * 1e6
    pool.close()
    return {"mj_step": bare, "dm_control_sequence": sequence, "env": env, "pool": pool_us}


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
    if "mujoco" in sys.modules:
        log.warning("the mujoco package is imported in this process: its timer callback "
                    "(mjcb_time) slows every MuJoCo step of torchfrag's pool here, not envpool's "
                    "or the limit loop's (see _build_dmc_limit)")
    with tempfile.TemporaryDirectory() as tmp:
        exe = _build_box2d_limit(tmp) if family == "box2d" else None
        dmc_exe = _build_dmc_limit(tmp) if family == "dmc" else None
        for env_id in env_ids:
            for n in sizes:
                runners, closers = pool_runners(env_id, n, "sync", threads, min_time)
                cores: dict[str, list[float]] = {name: [] for name in runners}
                runners = {name: with_cores(fn, cores[name]) for name, fn in runners.items()}
                if exe is not None:
                    runners["limit"] = limit_runner(exe, env_id, n, threads, min_time)
                elif dmc_exe is not None:
                    cores["limit"] = []
                    runners["limit"] = dmc_limit_runner(dmc_exe, env_id, n, threads, min_time,
                                                        cores["limit"])
                log.info("measuring %s n=%d", env_id, n)
                load_before = list(os.getloadavg())
                samples = alternate(runners, repeats)
                for close in closers:
                    close()
                record = {"env_id": env_id, "num_envs": n, "mode": "sync",
                          "threads": threads, "samples": samples,
                          "median": {k: median(v) for k, v in samples.items()},
                          # CPU cores each side used per sample (with_cores)
                          "cores_used": cores,
                          # 1/5/15-minute load averages around this measurement
                          "loadavg": {"before": load_before, "after": list(os.getloadavg())}}
                if family == "dmc":
                    record["cpu_us_per_step"] = dmc_cpu_breakdown(dmc_exe, env_id, n)
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
        used = r.get("cores_used", {})
        cores = "/".join(f"{median(used[k]):.1f}" if used.get(k) else "-"
                         for k in ("torchfrag", "envpool", "limit"))
        rows.append([r["env_id"], r["num_envs"], fmt_rate(m["envpool"]), fmt_rate(ours),
                     fmt_ratio(r["ratio_vs_envpool"]), fmt_rate(m.get("limit")),
                     f"{100 * r['fraction_of_limit']:.0f}%" if "limit" in m else "-", cores])
    ratios = [r["ratio_vs_envpool"] for r in result["records"]]
    result["median_ratio_vs_envpool"] = median(ratios)
    rows.append(["median", "", "", "", fmt_ratio(median(ratios)), "", "", ""])
    threads = result["settings"]["threads"]
    print_table(["env", "envs", "envpool", "torchfrag", "vs envpool", "limit", "of limit",
                 "cores (ours/envpool/limit)"], rows,
                title=f"{family}: env steps/s, sync, {threads} threads (medians)")
    cpu_rows = []
    for r in result["records"]:
        cpu = r.get("cpu_us_per_step")
        if cpu:
            r["cpu_fraction_of_limit"] = cpu["dm_control_sequence"] / cpu["pool"]
            cpu_rows.append([r["env_id"], r["num_envs"], f"{cpu['mj_step']:.1f}",
                             f"{cpu['dm_control_sequence']:.1f}", f"{cpu['env']:.1f}",
                             f"{cpu['pool']:.1f}",
                             f"{100 * r['cpu_fraction_of_limit']:.0f}%"])
    if cpu_rows:
        print_table(["env", "envs", "mj_step", "dm_control seq (limit)", "env step",
                     "pool (1 thread)", "of limit"],
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
