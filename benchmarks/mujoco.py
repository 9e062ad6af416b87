"""MuJoCo throughput: torchfrag's C++ pool vs EnvPool, Gymnasium vector envs and raw physics.

For each task (HalfCheetah, Hopper, Ant, Humanoid, all v5), each num_envs (8, 32) and
each mode (sync: step every env per call; async: ``send``/``recv`` with
``batch_size = num_envs // 2``), the same run measures, in alternating order,
round after round, each system built, timed and closed on its own:

* ``torchfrag``: ``torchfrag.envs.make(task, num_envs, num_threads=T)``;
* ``envpool``: ``envpool.make(task, env_type="gymnasium", num_threads=T)`` (1.2.5);
* ``gymnasium``: ``SyncVectorEnv`` (sync rows) or ``AsyncVectorEnv`` (async rows,
  one subprocess per env);
* ``physics``: the physics limit, a single-thread loop of raw
  ``mujoco.mj_step(model, data, nstep=frame_skip)`` on the task's own model
  (Gymnasium's XML), with random actions and the task's resets, timing only
  the ``mj_step`` calls, multiplied by T (threads = cores).

Each sample records env steps per second (wall clock) and CPU time per env
step (all threads of the process; for ``physics`` the thread CPU time inside
``mj_step``); the reported values are medians over rounds.  Wall-clock
figures assume the T cores are free: on a shared, loaded machine they mostly
measure the scheduler, while the CPU cost per step stays meaningful, so both
tables are printed (Markdown).  Actions are uniform in the action bounds and
drawn before timing.  Results go to ``benchmarks/results/mujoco.json`` and
``mujoco.png`` (with the load average at start and end).

MuJoCo's timer callback: ``import mujoco`` (done here by the physics runner and
by Gymnasium's envs) installs a process-wide ``mjcb_time`` callback that every
``mj_step`` then calls, and the pool links the same libmujoco, so torchfrag's
rows would pay for the other systems' imports (CartpoleSwingup-v1 x8: 5.8 ->
8.3 us of CPU per env step).  The callback only fills ``mjData.timer``, which
no system here reads, so it is cleared (:func:`torchfrag.envs.mujoco_timer.clear_timer`)
for every side after its imports: torchfrag, the physics loop, Gymnasium's
in-process envs and, inside each subprocess, its async envs (envpool links its
own MuJoCo, which has none).  Every system thus runs MuJoCo's plain
``mj_step``; Gymnasium users who keep the callback see slightly slower light
models than the gymnasium column.  Measuring torchfrag before any import
instead would not do: the systems alternate round after round in one process.

Usage::

    python benchmarks/mujoco.py            # full run (about 10 minutes on 2 cores)
    python benchmarks/mujoco.py --quick    # smoke run (about 1-2 minutes)

On a machine shared with other work, ``nice -n -20 python benchmarks/mujoco.py``
(as root) lets the measured processes take the cores; the JSON records the
nice value.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# This file is named like the mujoco package: keep its folder off sys.path so
# that `import mujoco` finds the package.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
sys.path.insert(0, ROOT)

from benchmarks._common import Runner, isolated_config, machine_info, pool_stepper  # noqa: E402

TASKS = ["HalfCheetah-v5", "Hopper-v5", "Ant-v5", "Humanoid-v5"]
NUM_ENVS = [8, 32]
MODES = ["sync", "async"]
SYSTEMS = ["torchfrag", "envpool", "gymnasium", "physics"]
RESULTS = os.path.join(ROOT, "benchmarks", "results")


def _actions(space_low: np.ndarray, space_high: np.ndarray, n: int, k: int = 64,
             seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(space_low, space_high, size=(k, n) + space_low.shape)


def _without_timer() -> None:
    """Clears the ``mjcb_time`` callback that ``import mujoco`` installed (module docstring)."""
    from torchfrag.envs.mujoco_timer import clear_timer

    clear_timer()


def _gymnasium_env(task: str):  # noqa: ANN202 - a gymnasium.Env
    """One of Gymnasium's envs, without the timer callback (also in AsyncVectorEnv's subprocesses)."""
    import gymnasium

    env = gymnasium.make(task, disable_env_checker=True)
    _without_timer()
    return env


def make_torchfrag(task: str, n: int, mode: str, threads: int) -> Runner:
    from torchfrag.envs import make

    _without_timer()  # the other systems' imports of mujoco; see the module docstring
    bs = n if mode == "sync" else n // 2
    pool = make(task, num_envs=n, batch_size=bs, num_threads=threads, seed=0)
    space = pool.action_space
    acts = _actions(space.low.astype(np.float64), space.high.astype(np.float64), n)
    return Runner(pool_stepper(pool, acts, mode), pool.close)


def make_envpool(task: str, n: int, mode: str, threads: int) -> Runner:
    import envpool

    bs = n if mode == "sync" else n // 2
    env = envpool.make(task, env_type="gymnasium", num_envs=n, batch_size=bs,
                       num_threads=threads, seed=0)
    space = env.action_space
    acts = _actions(space.low.astype(np.float64), space.high.astype(np.float64), n)
    return Runner(pool_stepper(env, acts, mode), env.close)


def make_gymnasium(task: str, n: int, mode: str, threads: int) -> Runner:
    import gymnasium

    del threads  # one env per subprocess (async) or all in this process (sync)
    fns = [lambda: _gymnasium_env(task) for _ in range(n)]
    vec = (gymnasium.vector.SyncVectorEnv(fns) if mode == "sync"
           else gymnasium.vector.AsyncVectorEnv(fns))
    space = vec.single_action_space
    acts = _actions(space.low.astype(np.float64), space.high.astype(np.float64), n)
    vec.reset(seed=0)
    counter = [0]

    def steps() -> int:
        counter[0] += 1
        vec.step(acts[counter[0] % len(acts)])
        return n
    return Runner(steps, vec.close, in_process=mode == "sync")


def make_physics(task: str, n: int, mode: str, threads: int) -> Runner:
    """Raw mj_step loop on one thread (times `threads`); only mj_step is timed."""
    import mujoco

    del n, mode
    env = _gymnasium_env(task).unwrapped
    env.reset(seed=0)
    model, data, frame_skip = env.model, env.data, env.frame_skip
    space = env.action_space
    acts = _actions(space.low.astype(np.float64), space.high.astype(np.float64), 1, k=256)[:, 0]
    healthy = (lambda: bool(env.is_healthy)) if hasattr(type(env), "is_healthy") else (
        lambda: True)
    state = {"k": 0, "t": 0}
    chunk = 32

    def empty_window() -> float:
        # What a thread_time() pair costs by itself; subtracted from each window.
        pairs = []
        for _ in range(200):
            c0 = time.thread_time()
            pairs.append(time.thread_time() - c0)
        return statistics.median(pairs)

    class PhysicsRunner(Runner):
        """Times only the mj_step calls; resets, health checks and action copies are excluded.

        The wall-clock time inside mj_step gives the limit in steps/s; the
        thread CPU time inside it (minus the cost of reading the clock) gives
        the physics CPU cost per env step.
        """

        def run(self, seconds: float) -> tuple[float, float]:
            busy = cpu = 0.0
            done = 0
            calib = empty_window()
            wall = time.perf_counter()
            while time.perf_counter() - wall < seconds:
                for _ in range(chunk):
                    state["k"] += 1
                    data.ctrl[:] = acts[state["k"] % len(acts)]
                    c0 = time.thread_time()
                    t0 = time.perf_counter()
                    mujoco.mj_step(model, data, nstep=frame_skip)
                    t1 = time.perf_counter()
                    cpu += time.thread_time() - c0 - calib
                    busy += t1 - t0
                    done += 1
                    state["t"] += 1
                    if state["t"] >= 1000 or not healthy():
                        env.reset()
                        state["t"] = 0
            return done / busy * threads, cpu / done * 1e6

    return PhysicsRunner(lambda: 0, env.close)


MAKERS = {"torchfrag": make_torchfrag, "envpool": make_envpool, "gymnasium": make_gymnasium,
          "physics": make_physics}


def bench_config(task: str, n: int, mode: str, threads: int, rounds: int,
                 seconds: float, systems: list[str]) -> dict:
    """Measures every system ``rounds`` times on one configuration, each alone."""
    makers = {name: (lambda name=name: MAKERS[name](task, n, mode, threads)) for name in systems}
    return isolated_config(makers, rounds, seconds,
                           task=task, num_envs=n, mode=mode, threads=threads)


def table(results: list[dict]) -> str:
    """Wall-clock throughput table: peers, ours, ratios."""
    head = ("| task | envs | mode | torchfrag | envpool | x envpool | gymnasium | x gymnasium "
            "| physics limit | % of limit |")
    lines = [head, "|" + "---|" * 10]
    for r in results:
        m = r["median_steps_per_s"]
        ours = m["torchfrag"]

        def cell(name: str) -> str:
            return f"{m[name]:,.0f}" if name in m else "-"

        def ratio(name: str) -> str:
            return f"{ours / m[name]:.2f}x" if name in m else "-"
        pct = f"{100 * ours / m['physics']:.0f}%" if "physics" in m else "-"
        lines.append(f"| {r['task']} | {r['num_envs']} | {r['mode']} | {ours:,.0f} | "
                     f"{cell('envpool')} | {ratio('envpool')} | {cell('gymnasium')} | "
                     f"{ratio('gymnasium')} | {cell('physics')} | {pct} |")
    return "\n".join(lines)


def cpu_table(results: list[dict]) -> str:
    """CPU cost per env step (all threads of the process): robust to a busy machine."""
    head = ("| task | envs | mode | torchfrag us | envpool us | envpool / torchfrag "
            "| physics us | physics / torchfrag |")
    lines = [head, "|" + "---|" * 8]
    for r in results:
        c = r["median_cpu_us_per_step"]
        if "torchfrag" not in c:
            continue
        ours = c["torchfrag"]

        def cell(name: str) -> str:
            return f"{c[name]:.1f}" if name in c else "-"

        def ratio(name: str) -> str:
            return f"{c[name] / ours:.2f}" if name in c else "-"
        lines.append(f"| {r['task']} | {r['num_envs']} | {r['mode']} | {ours:.1f} | "
                     f"{cell('envpool')} | {ratio('envpool')} | {cell('physics')} | "
                     f"{ratio('physics')} |")
    return "\n".join(lines)


def plot(results: list[dict], path: str, note: str = "") -> None:
    """Top row: wall-clock env steps/s; bottom row: CPU microseconds per env step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = [t for t in TASKS if any(r["task"] == t for r in results)]
    fig, axes = plt.subplots(2, len(tasks), figsize=(5 * len(tasks), 8), squeeze=False)
    for col, task in enumerate(tasks):
        rows = [r for r in results if r["task"] == task]
        labels = [f"{r['num_envs']} {r['mode']}" for r in rows]
        x = np.arange(len(rows))
        for row, (key, ylabel) in enumerate((("median_steps_per_s", "env steps / s (wall)"),
                                             ("median_cpu_us_per_step", "CPU us / env step"))):
            ax = axes[row][col]
            names = [s for s in SYSTEMS if any(s in r[key] for r in rows)]
            width = 0.8 / max(1, len(names))
            for k, name in enumerate(names):
                ax.bar(x + k * width, [r[key].get(name, 0.0) for r in rows], width, label=name)
            ax.set_xticks(x + width * (len(names) - 1) / 2, labels)
            ax.set_ylabel(ylabel)
            if row == 0:
                ax.set_title(task)
            if col == 0:
                ax.legend()
    fig.suptitle(f"MuJoCo v5, {results[0]['threads']} threads, medians of rounds {note}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds, shorter runs")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="pool threads, and the cores the physics limit is scaled by")
    parser.add_argument("--tasks", nargs="*", default=TASKS)
    parser.add_argument("--num-envs", nargs="*", type=int, default=NUM_ENVS)
    parser.add_argument("--modes", nargs="*", default=MODES)
    parser.add_argument("--systems", nargs="*", default=SYSTEMS)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--out", default=os.path.join(RESULTS, "mujoco"))
    args = parser.parse_args()
    rounds = args.rounds or (2 if args.quick else 5)
    seconds = args.seconds or (0.3 if args.quick else 1.0)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    results = []
    started = time.time()
    load_start = os.getloadavg()
    for task in args.tasks:
        for n in args.num_envs:
            for mode in args.modes:
                r = bench_config(task, n, mode, args.threads, rounds, seconds, args.systems)
                results.append(r)
                m = r["median_steps_per_s"]
                print(f"{task:16s} {n:3d} {mode:5s} " + "  ".join(
                    f"{k}={v:,.0f}" for k, v in m.items()), flush=True)
    report = {
        "benchmark": "mujoco",
        "quick": args.quick,
        "rounds": rounds,
        "seconds_per_sample": seconds,
        "threads": args.threads,
        "cpu_count": os.cpu_count(),
        "mujoco_timer": "cleared for every system after its imports (module docstring)",
        "nice": os.nice(0),  # run under `nice -n -20` on a shared machine to approach free cores
        "load_average_at_start": load_start,
        "load_average_at_end": os.getloadavg(),
        "wall_s": time.time() - started,
        "machine": machine_info(),
        "results": results,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(report, f, indent=1)
    load_end = os.getloadavg()
    plot(results, args.out + ".png",
         f"(1-min load average {load_start[0]:.1f} at start, {load_end[0]:.1f} at end, "
         f"{os.cpu_count()} cores)")
    print()
    print(table(results))
    print()
    print(cpu_table(results))
    print(f"\nwrote {args.out}.json and {args.out}.png")


if __name__ == "__main__":
    main()
