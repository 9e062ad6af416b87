"""Atari throughput: torchfrag vs envpool vs ale-py's AtariVectorEnv vs the emulation limit.

Every configuration (game, num_envs, sync/async) measures the systems in
rounds, rotating their order each round, so that load from other processes
hits all of them alike; the table reports medians.  Each measurement builds
its system, runs it and closes it, so no other system's threads (envs still in
flight, spinning workers) are alive while it is timed.
All systems use the same task: frame skip 4 with a max-pool of the last two
frames, 84x84 gray, a stack of 4, up to 30 no-ops and FIRE on reset, no
sticky actions, no reward clipping, no episodic life, 27000-step limit.

Systems:

- ``torchfrag``: ``torchfrag.envs.make("<Game>-v5", ...)``.
- ``envpool``: ``envpool.make("<Game>-v5", env_type="gymnasium", ...)`` (1.2.5).
- ``ale_vector``: ``ale_py.vector_env.AtariVectorEnv`` (C++ threads inside ale-py).
- ``emulation``: the limit: one thread calling raw ``ALEInterface.act`` four
  times per step (no observation fetched, no preprocessing), timed around the
  ``act`` calls only, times ``--threads`` (the cores).

A step is one agent step (4 emulator frames); "frames/s" in the table is
4 x steps/s.  The CPU table gives CPU microseconds per step of this process
(all threads), which is less sensitive to a busy machine than wall time.

Usage:
    python -m benchmarks.atari            # full table (several minutes)
    python -m benchmarks.atari --quick    # Pong only, fewer and shorter rounds
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from benchmarks._common import Runner, isolated_config, machine_info, pool_stepper

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
GAMES = ["Pong", "Breakout"]
NUM_ENVS = [8, 16]
MODES = ["sync", "async"]
SYSTEMS = ["torchfrag", "envpool", "ale_vector", "emulation"]
FRAME_SKIP = 4
# The shared task definition (EnvPool's option names).
TASK = {"frame_skip": FRAME_SKIP, "stack_num": 4, "img_height": 84, "img_width": 84,
        "gray_scale": True, "noop_max": 30, "episodic_life": False, "reward_clip": False,
        "use_fire_reset": True, "repeat_action_probability": 0.0, "max_episode_steps": 27000}


def _rom(game: str) -> str:
    """Pong -> pong, SpaceInvaders -> space_invaders."""
    return "".join("_" + c.lower() if c.isupper() and i else c.lower() for i, c in enumerate(game))


def _actions(num_actions: int, n: int, k: int = 64, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, num_actions, size=(k, n), dtype=np.int64)


def make_torchfrag(game: str, n: int, mode: str, threads: int) -> Runner:
    from torchfrag.envs import make

    bs = n if mode == "sync" else n // 2
    pool = make(f"{game}-v5", num_envs=n, batch_size=bs, num_threads=threads, seed=0, **TASK)
    acts = _actions(pool.action_space.n, n)
    return Runner(pool_stepper(pool, acts, mode), pool.close)


def make_envpool(game: str, n: int, mode: str, threads: int) -> Runner:
    import envpool

    bs = n if mode == "sync" else n // 2
    env = envpool.make(f"{game}-v5", env_type="gymnasium", num_envs=n, batch_size=bs,
                       num_threads=threads, seed=0, **TASK)
    acts = _actions(env.action_space.n, n)
    return Runner(pool_stepper(env, acts, mode), env.close)


def make_ale_vector(game: str, n: int, mode: str, threads: int) -> Runner:
    from ale_py.vector_env import AtariVectorEnv

    bs = n if mode == "sync" else n // 2
    env = AtariVectorEnv(
        _rom(game), n, batch_size=bs if mode == "async" else 0, num_threads=threads,
        max_num_frames_per_episode=TASK["max_episode_steps"] * FRAME_SKIP,
        repeat_action_probability=0.0, img_height=84, img_width=84, grayscale=True,
        stack_num=4, frameskip=FRAME_SKIP, maxpool=True, noop_max=30, episodic_life=False,
        reward_clipping=False, use_fire_reset=True)
    acts = _actions(env.single_action_space.n, n)
    counter = [0]
    env.reset(seed=0)
    if mode == "sync":
        def steps() -> int:
            counter[0] += 1
            env.step(acts[counter[0] % len(acts)])
            return n
    else:
        # After reset every env is ready; its send() steps the envs of the
        # last batch received.
        def steps() -> int:
            counter[0] += 1
            env.send(acts[counter[0] % len(acts)][:bs])
            env.recv()
            return bs
    return Runner(steps, env.close)


def make_emulation(game: str, n: int, mode: str, threads: int) -> Runner:
    """Raw ALE on one thread, act() only, scaled by the number of cores."""
    import ale_py
    from ale_py import roms

    del n, mode
    ale = ale_py.ALEInterface()
    ale.setLoggerMode(ale_py.LoggerMode.Error)
    ale.setFloat("repeat_action_probability", 0.0)
    ale.loadROM(roms.get_rom_path(_rom(game)))
    actions = ale.getMinimalActionSet()
    acts = _actions(len(actions), 1, k=256)[:, 0]
    state = {"k": 0}

    class EmulationRunner(Runner):
        def run(self, seconds: float) -> tuple[float, float]:
            busy = cpu = 0.0
            done = 0
            wall = time.perf_counter()
            while time.perf_counter() - wall < seconds:
                for _ in range(32):
                    state["k"] += 1
                    a = actions[acts[state["k"] % len(acts)]]
                    c0 = time.thread_time()
                    t0 = time.perf_counter()
                    for _ in range(FRAME_SKIP):
                        ale.act(a)
                    t1 = time.perf_counter()
                    cpu += time.thread_time() - c0
                    busy += t1 - t0
                    done += 1
                    if ale.game_over():
                        ale.reset_game()
            return done / busy * threads, cpu / done * 1e6

    return EmulationRunner(lambda: 0, lambda: None)


MAKERS = {"torchfrag": make_torchfrag, "envpool": make_envpool, "ale_vector": make_ale_vector,
          "emulation": make_emulation}


def bench_config(game: str, n: int, mode: str, threads: int, rounds: int, seconds: float,
                 systems: list[str]) -> dict:
    """Measures every system ``rounds`` times on one configuration, each alone."""
    makers = {name: (lambda name=name: MAKERS[name](game, n, mode, threads)) for name in systems}
    return isolated_config(makers, rounds, seconds,
                           game=game, num_envs=n, mode=mode, threads=threads)


def table(results: list[dict]) -> str:
    """Throughput table (agent steps/s; frames/s = 4x): peers, ours, ratios."""
    head = ("| game | envs | mode | torchfrag | envpool | x envpool | ale_vector | x ale_vector "
            "| emulation limit | % of limit |")
    lines = [head, "|" + "---|" * 10]
    for r in results:
        m = r["median_steps_per_s"]
        ours = m.get("torchfrag", float("nan"))

        def cell(name: str) -> str:
            return f"{m[name]:,.0f}" if name in m else "-"

        def ratio(name: str) -> str:
            return f"{ours / m[name]:.2f}x" if name in m and name != "torchfrag" else "-"
        pct = f"{100 * ours / m['emulation']:.0f}%" if "emulation" in m else "-"
        lines.append(f"| {r['game']} | {r['num_envs']} | {r['mode']} | {cell('torchfrag')} | "
                     f"{cell('envpool')} | {ratio('envpool')} | {cell('ale_vector')} | "
                     f"{ratio('ale_vector')} | {cell('emulation')} | {pct} |")
    return "\n".join(lines)


def cpu_table(results: list[dict]) -> str:
    """CPU microseconds per agent step (all threads of this process)."""
    head = "| game | envs | mode | torchfrag | envpool | ale_vector | emulation (act only) |"
    lines = [head, "|" + "---|" * 7]
    for r in results:
        c = r["median_cpu_us_per_step"]

        def cell(name: str) -> str:
            return f"{c[name]:.0f}" if name in c else "-"
        lines.append(f"| {r['game']} | {r['num_envs']} | {r['mode']} | {cell('torchfrag')} | "
                     f"{cell('envpool')} | {cell('ale_vector')} | {cell('emulation')} |")
    return "\n".join(lines)


def plot(results: list[dict], path: str) -> None:
    """Grouped bars per game: steps/s of every system per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    games = [g for g in dict.fromkeys(r["game"] for r in results)]
    fig, axes = plt.subplots(1, len(games), figsize=(6 * len(games), 4.5), squeeze=False)
    for ax, game in zip(axes[0], games):
        rows = [r for r in results if r["game"] == game]
        labels = [f"{r['num_envs']} {r['mode']}" for r in rows]
        names = [s for s in SYSTEMS if s in rows[0]["median_steps_per_s"]]
        width = 0.8 / len(names)
        x = np.arange(len(rows))
        for k, name in enumerate(names):
            ax.bar(x + k * width, [r["median_steps_per_s"][name] for r in rows], width,
                   label=name)
        ax.set_xticks(x + width * (len(names) - 1) / 2, labels)
        ax.set_title(f"{game}-v5")
        ax.set_ylabel("agent steps / s (x4 = frames / s)")
    axes[0][0].legend()
    fig.suptitle(f"Atari throughput, {results[0]['threads']} threads (median of rounds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="Pong only, fewer shorter rounds")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="pool threads, and the cores the emulation limit is scaled by")
    parser.add_argument("--games", nargs="*", default=None)
    parser.add_argument("--num-envs", nargs="*", type=int, default=NUM_ENVS)
    parser.add_argument("--modes", nargs="*", default=MODES)
    parser.add_argument("--systems", nargs="*", default=SYSTEMS)
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--out", default=os.path.join(RESULTS, "atari"))
    args = parser.parse_args()
    games = args.games or (["Pong"] if args.quick else GAMES)
    rounds = args.rounds or (3 if args.quick else 7)
    seconds = args.seconds or (0.5 if args.quick else 1.5)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    results = []
    started = time.time()
    load_start = os.getloadavg()
    for game in games:
        for n in args.num_envs:
            for mode in args.modes:
                r = bench_config(game, n, mode, args.threads, rounds, seconds, args.systems)
                results.append(r)
                print(f"{game:10s} {n:3d} {mode:5s} " + "  ".join(
                    f"{k}={v:,.0f}" for k, v in r["median_steps_per_s"].items()), flush=True)
    report = {
        "benchmark": "atari",
        "unit": "agent steps per second (frames per second = 4 x)",
        "quick": args.quick,
        "rounds": rounds,
        "seconds_per_sample": seconds,
        "threads": args.threads,
        "cpu_count": os.cpu_count(),
        "task": TASK,
        "load_average_at_start": load_start,
        "load_average_at_end": os.getloadavg(),
        "wall_s": time.time() - started,
        "machine": machine_info(),
        "results": results,
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(report, f, indent=1)
    plot(results, args.out + ".png")
    print()
    print(table(results))
    print()
    print(cpu_table(results))
    print(f"\nwrote {args.out}.json and {args.out}.png")


if __name__ == "__main__":
    main()
