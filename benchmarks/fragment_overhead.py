"""Overhead of fragments + capture + the local executor over the same loop written by hand.

Identical PPO iterations on CartPole-v1 (same actor, critic, GAE, ClipPPOLoss,
optimizer, batch sizes; the actor is called through TorchRL on every side), each side
on its own copy of the loop built with the same seed:

* ``hand``: plain Python over the TorchRL pieces (no Fragment classes),
* ``hand (A/A)``: the same hand-written loop on a second copy: the control. Its
  "overhead" over ``hand`` is pure measurement noise, the floor below which no
  difference can be shown,
* ``eager``: the fragment loop called directly (``loop()``),
* ``graph``: the captured loop run by ``torchfrag.runtime.run`` (the local executor).

Measurement (built to show or refute a 2% difference on a shared, noisy machine):
many short blocks of ``--iterations`` iterations, interleaved in rounds; a round runs
every side once in a rotating order and once more in the mirrored order (ABBA: a
linear drift of the machine's speed hits every side equally). Each block is timed in
CPU seconds of this process (``time.process_time``: all its threads; other jobs on
the machine change it far less than wall time), with ``OMP_NUM_THREADS=1`` and one
torch thread, the garbage collector run before and disabled during each block. Per
round, ``ratio = cpu(side) / cpu(hand)`` over the round's two blocks of each; the
overhead is the median of those paired ratios minus 1, with a bootstrap 95%
interval (rounds resampled). The A/A control is printed beside it.

On a shared machine that interval can stay wider than 2%, so the executor's own cost is
also measured where nothing else varies: the same loop shape with fragments that do no
work, run as direct ``forward`` calls, as the eager loop and under ``run`` (the local
executor), many thousand iterations each; the executor's microseconds per iteration over
the eager loop, divided by a PPO iteration's CPU time, is its share of the iteration.
The same is done one level down, for the per-env-step dispatch inside a Rollout's body
(act, then env step): direct ``forward`` calls, the captured fx code calling each fragment
as a module, and the step Rollout runs (:func:`torchfrag.graph.direct.direct_forward`).
Where the rest of the time goes: ``docs/benchmarks.md``, "Executor overhead".

Run: ``python -m benchmarks.fragment_overhead`` (writes
``benchmarks/results/fragment_overhead.{txt,json,png}``).
"""
from __future__ import annotations

import argparse
import gc
import os
import random
import sys
import time
from collections.abc import Callable

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import RESULTS_DIR, machine_info, median, print_table, write_json  # noqa: E402
from torchrl.envs.utils import ExplorationType, set_exploration_type  # noqa: E402

from tensordict import TensorDict  # noqa: E402
from torch import nn  # noqa: E402

from torchfrag import capture  # noqa: E402
from torchfrag.fragments import Fragment  # noqa: E402
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


def bootstrap_median(values: list[float], samples: int = 4000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median of ``values``."""
    rng = random.Random(seed)
    n = len(values)
    meds = sorted(median([values[rng.randrange(n)] for _ in range(n)]) for _ in range(samples))
    return meds[int(0.025 * samples)], meds[min(samples - 1, int(0.975 * samples))]


def interleaved(sides: dict[str, Callable[[], None]], rounds: int) -> dict[str, list[tuple[float, float]]]:
    """Runs every side twice per round (rotating order, then mirrored); (CPU s, wall s) per round."""
    names = list(sides)
    out: dict[str, list[tuple[float, float]]] = {k: [] for k in names}
    for r in range(rounds):
        k = r % len(names)
        order = names[k:] + names[:k]
        spent = {n: [0.0, 0.0] for n in names}
        for name in order + order[::-1]:
            gc.collect()
            gc.disable()
            try:
                t0, c0 = time.perf_counter(), time.process_time()
                sides[name]()
                c1, t1 = time.process_time(), time.perf_counter()
            finally:
                gc.enable()
            spent[name][0] += c1 - c0
            spent[name][1] += t1 - t0
        for n in names:
            out[n].append((spent[n][0], spent[n][1]))
    return out


def summarise(blocks: dict[str, list[tuple[float, float]]],
              base: str = "hand") -> dict[str, dict[str, float]]:
    """Per side: median paired CPU ratio to ``base`` minus 1, its bootstrap 95% interval, wall too."""
    out: dict[str, dict[str, float]] = {}
    for name, rows in blocks.items():
        cpu = [c / b[0] for (c, _), b in zip(rows, blocks[base])]
        wall = [w / b[1] for (_, w), b in zip(rows, blocks[base])]
        lo, hi = bootstrap_median(cpu)
        wlo, whi = bootstrap_median(wall)
        out[name] = {"overhead": median(cpu) - 1.0, "ci95": [lo - 1.0, hi - 1.0],
                     "wall_overhead": median(wall) - 1.0, "wall_ci95": [wlo - 1.0, whi - 1.0],
                     "cpu_s_per_round_median": median([c for c, _ in rows])}
    return out


class _Source(Fragment):
    """Stands in for the rollout: returns a fixed batch."""

    impure = True

    def __init__(self) -> None:
        super().__init__(out_keys=["x"], passthrough=False)
        self.batch = TensorDict(x=torch.zeros(4), batch_size=[4])

    def forward(self, tensordict=None):
        return self.batch


class _Pass(Fragment):
    """Stands in for the advantage and the learner: returns its input."""

    impure = True

    def __init__(self) -> None:
        super().__init__(["x"], ["x"])

    def forward(self, tensordict):
        return tensordict


class _TrivialLoop(nn.Module):
    """A PPO-shaped loop (rollout -> advantage -> learn) whose fragments do no work."""

    def __init__(self) -> None:
        super().__init__()
        self.rollout, self.advantage, self.learn = _Source(), _Pass(), _Pass()

    def forward(self):
        return self.learn(self.advantage(self.rollout()))


def dispatch_cost(iterations: int = 20000, repeats: int = 9) -> dict[str, float]:
    """Microseconds of CPU per iteration spent outside the fragments' own work.

    The same three fragments run as plain calls of their ``forward`` (``direct``), as
    the eager loop (``eager``: module calls) and under the local executor (``graph``:
    ``run`` over the captured fx code). Differences are what the executor adds per
    iteration, whatever the fragments do.
    """
    loop = _TrivialLoop()
    graph = capture(loop)
    src, adv, learn = loop.rollout, loop.advantage, loop.learn

    def direct():
        for _ in range(iterations):
            learn.forward(adv.forward(src.forward()))

    def eager():
        for _ in range(iterations):
            loop()

    def executor():
        run(graph, iterations=iterations)

    sides = {"direct": direct, "eager": eager, "graph": executor}
    per: dict[str, list[float]] = {k: [] for k in sides}
    for r in range(repeats):
        for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
            c0 = time.process_time()
            sides[name]()
            per[name].append((time.process_time() - c0) / iterations * 1e6)
    return {k: median(v) for k, v in per.items()}


class _StepAct(Fragment):
    """Stands in for the act fragment of a rollout's body: returns its input."""

    def __init__(self) -> None:
        super().__init__(["x"], ["x"])

    def forward(self, tensordict):
        return tensordict


class _StepEnv(Fragment):
    """Stands in for the env step: returns (transition, carry), both its input."""

    impure = True

    def __init__(self) -> None:
        super().__init__(["x"], ["x"])

    def num_outputs(self) -> int:
        return 2

    def output_keys(self, available):
        return [available, available]

    def forward(self, tensordict):
        return tensordict, tensordict


class _StepBody(nn.Module):
    """A Rollout body's shape (act, then env step) with fragments that do no work."""

    def __init__(self) -> None:
        super().__init__()
        self.act, self.env_step = _StepAct(), _StepEnv()

    def forward(self, carry):
        carry = self.act(carry)
        transition, carry = self.env_step(carry)
        return transition, carry


def step_dispatch_cost(steps: int = 20000, repeats: int = 9) -> dict[str, float]:
    """Microseconds of CPU per env step that a Rollout's body adds around its two fragments.

    ``direct``: the fragments' ``forward`` called by hand; ``generated``: the captured body's
    fx code (``nn.Module.__call__`` per fragment, what Rollout ran before); ``rollout``: what
    :class:`~torchfrag.fragments.Rollout` runs per step now
    (:func:`torchfrag.graph.direct.direct_forward`).
    """
    from torchfrag.graph.direct import direct_forward

    body = _StepBody()
    gm = capture(body, in_keys=["x"]).module
    act, env = body.act.forward, body.env_step.forward
    td = TensorDict(x=torch.zeros(4), batch_size=[4])

    def loop(step):
        def go():
            carry = td
            for _ in range(steps):
                _, carry = step(carry)
        return go

    sides = {"direct": loop(lambda c: env(act(c))), "generated": loop(gm.forward),
             "rollout": loop(direct_forward(gm))}
    per: dict[str, list[float]] = {k: [] for k in sides}
    for r in range(repeats):
        for name in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
            c0 = time.process_time()
            sides[name]()
            per[name].append((time.process_time() - c0) / steps * 1e6)
    return {k: median(v) for k, v in per.items()}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=1, help="PPO iterations per block")
    parser.add_argument("--rounds", type=int, default=40, help="rounds (each side twice per round)")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=128)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    cfg = PPOConfig(num_envs=args.num_envs, steps=args.steps, total_frames=10**9)
    names = ("hand", "hand (A/A)", "eager", "graph")
    loops = {name: make_ppo("CartPole-v1", cfg, seed=0) for name in names}
    for loop in loops.values():  # every side calls the actor through TorchRL
        loop.rollout.body.act._fast = None
    hand = hand_written(loops["hand"])
    hand_b = hand_written(loops["hand (A/A)"])
    eager = loops["eager"]
    graph = capture(loops["graph"])
    n = args.iterations

    def run_hand():
        for _ in range(n):
            hand()

    def run_hand_b():
        for _ in range(n):
            hand_b()

    def run_eager():
        for _ in range(n):
            eager()

    def run_graph():
        run(graph, iterations=n)

    sides = {"hand": run_hand, "hand (A/A)": run_hand_b, "eager": run_eager, "graph": run_graph}
    for fn in sides.values():  # warm-up
        fn()
        fn()
    blocks = interleaved(sides, args.rounds)
    summary = summarise(blocks)
    rows = [[k, f"{100 * v['overhead']:+.2f}%", f"[{100 * v['ci95'][0]:+.2f}%, {100 * v['ci95'][1]:+.2f}%]",
             f"{100 * v['wall_overhead']:+.2f}%", f"{v['cpu_s_per_round_median'] * 1000 / 2:.0f}"]
            for k, v in summary.items()]
    text = print_table(["side", "CPU overhead vs hand (median of paired ratios)", "bootstrap 95% interval",
                        "wall overhead (median)", "CPU ms per block (median)"], rows,
                       title=f"PPO CartPole-v1 ({cfg.num_envs} envs x {cfg.steps} steps), {args.rounds} "
                             f"interleaved ABBA rounds of {n}-iteration blocks; goal: graph within 2%")
    g, aa = summary["graph"], summary["hand (A/A)"]
    verdict = ("within 2%" if g["ci95"][1] <= 0.02 else
               "above 2%" if g["ci95"][0] > 0.02 else "not resolved at 2% by this run")
    line = (f"local executor (graph) vs hand: {100 * g['overhead']:+.2f}% "
            f"[{100 * g['ci95'][0]:+.2f}%, {100 * g['ci95'][1]:+.2f}%] -> {verdict}; "
            f"A/A control {100 * aa['overhead']:+.2f}% "
            f"[{100 * aa['ci95'][0]:+.2f}%, {100 * aa['ci95'][1]:+.2f}%]")
    print(line)
    # What the executor itself adds per iteration, measured where nothing else runs.
    dispatch = dispatch_cost()
    per_iter_us = median([c for c, _ in blocks["hand"]]) / 2 / n * 1e6
    executor_share = (dispatch["graph"] - dispatch["eager"]) / per_iter_us
    line2 = (f"dispatch alone (fragments doing no work): direct calls {dispatch['direct']:.1f} us, "
             f"eager loop "
             f"{dispatch['eager']:.1f} us, local executor {dispatch['graph']:.1f} us per iteration; the "
             f"executor adds {dispatch['graph'] - dispatch['eager']:+.1f} us to the eager loop = "
             f"{100 * executor_share:+.4f}% of a {per_iter_us / 1000:.0f} ms PPO iteration")
    print(line2)
    step = step_dispatch_cost()
    steps_per_iter = args.steps
    line3 = (f"rollout body per env step (fragments doing no work): direct forwards {step['direct']:.2f} us, "
             f"fx code with module calls {step['generated']:.2f} us, Rollout's step now {step['rollout']:.2f} us: "
             f"{step['rollout'] - step['direct']:+.2f} us x {steps_per_iter} steps = "
             f"{100 * (step['rollout'] - step['direct']) * steps_per_iter / per_iter_us:+.2f}% of an iteration "
             f"(module calls: {100 * (step['generated'] - step['direct']) * steps_per_iter / per_iter_us:+.2f}%)")
    print(line3)
    os.makedirs(RESULTS_DIR, exist_ok=True)
    with open(os.path.join(RESULTS_DIR, "fragment_overhead.txt"), "w") as f:
        f.write(text + "\n" + line + "\n" + line2 + "\n" + line3 + "\n")
    payload = {"config": vars(args), "summary": summary, "verdict": verdict,
               "dispatch_us_per_iteration": dispatch,
               "rollout_step_dispatch_us": step, "executor_share_of_iteration": executor_share,
               "blocks_cpu_wall_s": blocks, "loadavg": list(os.getloadavg()), "machine": machine_info()}
    write_json("fragment_overhead", payload)
    plot(summary, blocks)
    for loop in loops.values():
        loop.close()
    return payload


def plot(summary: dict[str, dict[str, float]], blocks: dict[str, list[tuple[float, float]]]) -> str:
    """Per-round CPU ratios to ``hand`` (dots), median and 95% interval (bars), the 2% goal line."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    names = [k for k in summary if k != "hand"]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for y, name in enumerate(names):
        ratios = [100 * (c / b[0] - 1) for (c, _), b in zip(blocks[name], blocks["hand"])]
        ax.scatter(ratios, [y + 0.12] * len(ratios), s=8, alpha=0.4, color=f"C{y}")
        v = summary[name]
        ax.errorbar([100 * v["overhead"]], [y], xerr=[[100 * (v["overhead"] - v["ci95"][0])],
                                                      [100 * (v["ci95"][1] - v["overhead"])]],
                    fmt="o", color=f"C{y}", capsize=4)
    ax.axvline(0, color="black", lw=0.8)
    ax.axvline(2, color="grey", ls="--", lw=0.8)
    ax.text(2.1, len(names) - 0.85, "2% goal", fontsize=8, color="grey")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("CPU time vs hand-written loop (%): rounds (dots), median + bootstrap 95% interval")
    ax.set_title("Executor overhead, interleaved ABBA blocks (A/A control = noise floor)", fontsize=9)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    path = os.path.join(RESULTS_DIR, "fragment_overhead.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    main()
