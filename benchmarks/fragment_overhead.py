"""Overhead of fragments + capture + the local executor over the same loop written by hand.

Three ways to run identical PPO iterations on CartPole-v1 (same actor, critic,
GAE, ClipPPOLoss, optimizer, batch sizes; the actor is called through TorchRL
on every side):

* ``hand``: plain Python over the TorchRL pieces (no Fragment classes),
* ``eager``: the fragment loop called directly (``loop()``),
* ``graph``: the captured loop run by ``torchfrag.runtime.run``.

Each measurement runs ``--iterations`` iterations; the sides alternate
(reversed on every other repeat) and the best and the median of the repeats are reported. Rates are frames
per CPU-second of this process (the machine is shared; wall rates are kept too). Overhead =
time(side) / time(hand) - 1 from the best repeats (goal: within 2%).

Run: ``python -m benchmarks.fragment_overhead`` (writes
``benchmarks/results/fragment_overhead.{txt,json,png}``).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import RESULTS_DIR, alternate, bar_plot, median, print_table, write_json  # noqa: E402
from torchrl.envs.utils import ExplorationType, set_exploration_type  # noqa: E402

from torchfrag import capture  # noqa: E402
from torchfrag.algos.ppo import PPOConfig, make_ppo  # noqa: E402
from torchfrag.runtime import run  # noqa: E402


def hand_written(loop):
    """The same iteration as ``loop()``, written as plain Python on the TorchRL objects."""
    env, actor = loop.env, loop.actor
    gae = loop.advantage.estimator
    learn = loop.learn
    loss, opt = learn.loss, learn.optimizer
    params = learn._params
    state = {"carry": None, "calls": 0}
    steps, epochs, mb = loop.cfg.steps, loop.cfg.epochs, loop.cfg.minibatch_size
    keys = learn.select_keys
    base_lr = learn._base_lrs[0]
    anneal = learn.anneal_steps

    def iteration():
        carry = state["carry"] if state["carry"] is not None else env.reset()
        out = []
        with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
            for _ in range(steps):
                carry = actor(carry)
                transition, carry = env.step_and_maybe_reset(carry)
                out.append(transition)
        state["carry"] = carry
        batch = torch.stack(out, dim=1)
        with torch.no_grad():
            batch = gae(batch)
        frac = max(0.0, 1.0 - state["calls"] / anneal) if anneal else 1.0
        for g in opt.param_groups:
            g["lr"] = base_lr * frac
        data = batch.select(*keys).reshape(-1)
        n = data.shape[0]
        for _ in range(epochs):
            perm = torch.randperm(n)
            for start in range(0, n - mb + 1, mb):
                vals = loss(data[perm[start:start + mb]])
                total = sum(v for k, v in vals.items() if k.startswith("loss_"))
                opt.zero_grad(set_to_none=True)
                total.backward()
                torch.nn.utils.clip_grad_norm_(params, learn.max_grad_norm)
                opt.step()
        state["calls"] += 1

    return iteration


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=128)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = PPOConfig(num_envs=args.num_envs, steps=args.steps, total_frames=10**9)
    loops = {name: make_ppo("CartPole-v1", cfg, seed=0) for name in ("hand", "eager", "graph")}
    for loop in loops.values():  # every side calls the actor through TorchRL
        loop.rollout.body.act._fast = None
    hand = hand_written(loops["hand"])
    eager = loops["eager"]
    graph = capture(loops["graph"])
    frames = args.iterations * cfg.frames_per_iteration

    wall: dict[str, list[float]] = {"hand": [], "eager": [], "graph": []}

    def timed(name, fn):
        # CPU time of this process (all its threads): the machine is shared and
        # noisy, and the question is how much work the executor adds.
        def measure() -> float:
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            c1, t1 = time.process_time(), time.perf_counter()
            wall[name].append(frames / (t1 - t0))
            return frames / (c1 - c0)
        return measure

    def run_hand():
        for _ in range(args.iterations):
            hand()

    def run_eager():
        for _ in range(args.iterations):
            eager()

    def run_graph():
        run(graph, iterations=args.iterations)

    for fn in (run_hand, run_eager, run_graph):  # warm-up
        fn()
    rates = alternate({"hand": timed("hand", run_hand), "eager": timed("eager", run_eager),
                       "graph": timed("graph", run_graph)}, repeats=args.repeats)
    med = {k: median(v) for k, v in rates.items()}
    best = {k: max(v) for k, v in rates.items()}
    # Noise on a shared machine only ever adds time, so (as timeit does) the best
    # of the repeats estimates each side's own cost; medians are shown too.
    overhead = {k: best["hand"] / best[k] - 1.0 for k in ("eager", "graph")}
    overhead_median = {k: med["hand"] / med[k] - 1.0 for k in ("eager", "graph")}
    wmed = {k: median(v) for k, v in wall.items()}
    rows = [[k, f"{best[k]:.0f}", f"{100 * (best['hand'] / best[k] - 1):+.2f}%", f"{med[k]:.0f}",
             f"{100 * (med['hand'] / med[k] - 1):+.2f}%", f"{wmed[k]:.0f}"]
            for k in ("hand", "eager", "graph")]
    text = print_table(["side", "frames/CPU-s (best)", "overhead (best)", "frames/CPU-s (median)",
                        "overhead (median)", "wall frames/s (median)"], rows,
                       title=f"PPO CartPole-v1 iteration ({cfg.num_envs} envs x {cfg.steps} steps, "
                             f"{args.repeats} alternating repeats of {args.iterations} iterations)")
    os.makedirs(RESULTS_DIR, exist_ok=True)
    with open(os.path.join(RESULTS_DIR, "fragment_overhead.txt"), "w") as f:
        f.write(text + "\n")
    write_json("fragment_overhead", {"config": vars(args), "cpu_rates": rates, "median": med,
                                     "best": best, "wall_rates": wall, "wall_median": wmed,
                                     "overhead_vs_hand": overhead,
                                     "overhead_vs_hand_median": overhead_median})
    bar_plot("fragment_overhead", ["best of repeats", "median"],
             {k: [best[k], med[k]] for k in med}, "frames per CPU-second",
             "PPO iteration: fragment loop vs hand-written loop", log=False)
    for loop in loops.values():
        loop.close()


if __name__ == "__main__":
    main()
