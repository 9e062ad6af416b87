"""PPO on CartPole-v1, whole training loop: torchfrag vs TorchRL's PPO example set-up.

Both sides train the same networks (64x64 tanh MLP actor and critic) with the
same batch sizes (``num_envs`` x ``steps`` frames per iteration, ``epochs``
epochs of ``minibatch_size`` minibatches), ClipPPOLoss, Adam, gradient
clipping and linear learning-rate annealing.

* ``torchfrag``: ``torchfrag.algos.ppo`` (PoolEnv + Rollout/Advantage/Learn
  fragments, captured and run by the local executor).
* ``torchrl-serial`` / ``torchrl-parallel``: the structure of TorchRL's
  ``sota-implementations/ppo`` scripts: ``GymEnv("CartPole-v1")`` in a
  ``SerialEnv`` / ``ParallelEnv`` of ``num_envs`` workers, TorchRL's
  ``Collector``, a ``ReplayBuffer(LazyTensorStorage, SamplerWithoutReplacement)``
  for minibatches, ``GAE`` recomputed at every epoch as the example does.

Frames/s covers collection + advantage + learning. The sides alternate
(reversed on every other repeat); medians are reported with the ratio
torchfrag / best TorchRL set-up (goal: >= 2x).

Run: ``python -m benchmarks.ppo_vs_torchrl`` (writes
``benchmarks/results/ppo_vs_torchrl.{txt,json,png}``).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import torch

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import (RESULTS_DIR, alternate, bar_plot, fmt_ratio, median,  # noqa: E402
                                print_table, write_json)

from torchfrag import capture  # noqa: E402
from torchfrag.algos.ppo import PPOConfig, make_actor_critic, make_ppo  # noqa: E402
from torchfrag.runtime import run  # noqa: E402


def torchfrag_side(cfg: PPOConfig, iterations: int):
    loop = make_ppo("CartPole-v1", cfg, seed=0)
    graph = capture(loop)
    run(graph, iterations=1)  # warm-up

    def measure() -> float:
        t0 = time.perf_counter()
        run(graph, iterations=iterations)
        return iterations * cfg.frames_per_iteration / (time.perf_counter() - t0)

    return measure, loop.close


def torchrl_side(cfg: PPOConfig, iterations: int, parallel: bool):
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, ReplayBuffer
    from torchrl.data.replay_buffers.samplers import SamplerWithoutReplacement
    from torchrl.envs import GymEnv, ParallelEnv, SerialEnv
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    torch.manual_seed(0)
    make = lambda: GymEnv("CartPole-v1", categorical_action_encoding=True)  # noqa: E731
    env = (ParallelEnv if parallel else SerialEnv)(cfg.num_envs, make)
    env.set_seed(0)
    actor, critic = make_actor_critic(env, cfg.hidden)
    frames_per_batch = cfg.frames_per_iteration
    collector = Collector(env, actor, frames_per_batch=frames_per_batch, total_frames=-1)
    buffer = ReplayBuffer(storage=LazyTensorStorage(frames_per_batch),
                          sampler=SamplerWithoutReplacement(), batch_size=cfg.minibatch_size)
    adv = GAE(gamma=cfg.gamma, lmbda=cfg.lmbda, value_network=critic, average_gae=False)
    loss = ClipPPOLoss(actor, critic, clip_epsilon=cfg.clip_epsilon, entropy_coeff=cfg.entropy_coef,
                       critic_coeff=cfg.critic_coef, loss_critic_type=cfg.loss_critic_type,
                       normalize_advantage=True)
    optim = torch.optim.Adam(loss.parameters(), lr=cfg.lr, eps=1e-5)
    it = iter(collector)
    total_iters = cfg.iterations  # the same schedule as the torchfrag side
    state = {"i": 0}
    num_mb = frames_per_batch // cfg.minibatch_size

    def one_iteration() -> None:
        data = next(it)
        frac = 1.0 - state["i"] / total_iters
        for g in optim.param_groups:
            g["lr"] = cfg.lr * frac
        for _ in range(cfg.epochs):
            with torch.no_grad():
                data = adv(data)
            buffer.extend(data.reshape(-1))
            for _ in range(num_mb):
                batch = buffer.sample()
                vals = loss(batch)
                total = vals["loss_objective"] + vals["loss_critic"] + vals["loss_entropy"]
                total.backward()
                torch.nn.utils.clip_grad_norm_(loss.parameters(), cfg.max_grad_norm)
                optim.step()
                optim.zero_grad()
        collector.update_policy_weights_()
        state["i"] += 1

    one_iteration()  # warm-up

    def measure() -> float:
        t0 = time.perf_counter()
        for _ in range(iterations):
            one_iteration()
        return iterations * frames_per_batch / (time.perf_counter() - t0)

    def close() -> None:
        collector.shutdown()
        if not env.is_closed:
            env.close()

    return measure, close


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iterations", type=int, default=4, help="iterations per measurement")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--no-parallel", action="store_true", help="skip the ParallelEnv set-up")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = PPOConfig(total_frames=10**7)
    sides = {"torchfrag": torchfrag_side(cfg, args.iterations),
             "torchrl-serial": torchrl_side(cfg, args.iterations, parallel=False)}
    if not args.no_parallel:
        sides["torchrl-parallel"] = torchrl_side(cfg, args.iterations, parallel=True)
    rates = alternate({k: v[0] for k, v in sides.items()}, repeats=args.repeats)
    for _, close in sides.values():
        close()
    med = {k: median(v) for k, v in rates.items()}
    peer = max((k for k in med if k != "torchfrag"), key=lambda k: med[k])
    ratio = med["torchfrag"] / med[peer]
    rows = [[k, f"{med[k]:.0f}", fmt_ratio(med["torchfrag"] / med[k]) if k != "torchfrag" else "-"]
            for k in med]
    text = print_table(
        ["set-up", "frames/s (median)", "torchfrag speed-up"], rows,
        title=(f"PPO CartPole-v1 whole training loop: {cfg.num_envs} envs x {cfg.steps} steps, "
               f"{cfg.epochs} epochs of {cfg.minibatch_size}, MLP {cfg.hidden}; "
               f"{args.repeats} alternating repeats of {args.iterations} iterations"))
    text += f"\nratio vs best TorchRL set-up ({peer}): {ratio:.2f}x (goal >= 2x)"
    print(text.splitlines()[-1])
    os.makedirs(RESULTS_DIR, exist_ok=True)
    with open(os.path.join(RESULTS_DIR, "ppo_vs_torchrl.txt"), "w") as f:
        f.write(text + "\n")
    write_json("ppo_vs_torchrl", {"config": {**vars(args), **cfg.to_dict()}, "rates": rates,
                                  "median": med, "best_peer": peer, "ratio": ratio})
    bar_plot("ppo_vs_torchrl", ["PPO CartPole-v1"], {k: [v] for k, v in med.items()},
             "frames/s (whole training loop)", "torchfrag vs TorchRL PPO set-up", log=False)


if __name__ == "__main__":
    main()
