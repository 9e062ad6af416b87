"""TorchRL integration throughput: PoolEnv and PoolCollector vs the raw pool, envpool and TorchRL.

All systems of one env id are built once, then measured in the same run in
alternating order (reversed every other repeat); the table reports medians of
frames (env steps) per second and our ratio to each peer. Results go to
``benchmarks/results/torchrl_envs.json`` and ``torchrl_envs.png``.

Systems (CartPole-v1, 64 envs; Pong-v5, 8 envs, when the Atari envs are built):

* ``raw pool``: ``EnvPool.step`` on precomputed NumPy actions (sync), and
  ``send``/``recv`` of half the envs at a time (async): our floor.
* ``envpool numpy``: envpool 1.2's ``step`` on precomputed NumPy actions.
* ``PoolEnv.rollout``: TorchRL's ``env.rollout(T, break_when_any_done=False)``
  on :class:`~torchfrag.envs.PoolEnv`, random actions, a ``[64, T]`` TensorDict;
  each call continues the previous one (``auto_reset=False``), as in training.
* ``ParallelEnv.rollout`` / ``SerialEnv.rollout``: the same call on TorchRL's
  batched envs of ``GymEnv``. ``ParallelEnv`` runs 2 workers (one per core)
  of ``SerialEnv(32)``: 64 single-env workers do not start on a 2-core machine
  (8 workers take ~45 s to start and step at ~800 frames/s).
* ``... (GymEnv conventions)``: the same with ``PoolEnv`` in GymEnv's
  conventions (``OneHot`` actions, no info entries; batched); the collector
  gets that ``PoolEnv`` instance (TorchRL's ``Collector`` then runs it, as
  the pool path yields the pool's own conventions) and a one-hot MLP policy.
* ``PoolCollector`` vs ``Collector(ParallelEnv)``: the same MLP policy
  (4-64-64-2, sampled actions) as one ``TensorDictModule``, ``frames_per_batch``
  = 64 x 32; and ``PoolCollector(deterministic=True)`` vs its default mode.

Torch runs on one thread (``torch.set_num_threads(1)``) for every system: the
pool's threads need the other core.

Usage:
    python -m benchmarks.torchrl_envs            # full run (a few minutes)
    python -m benchmarks.torchrl_envs --quick    # CartPole only, fewer repeats
"""
from __future__ import annotations

import argparse
import functools
import logging
import os
import warnings
from collections.abc import Callable
from typing import Any

# One OpenMP thread here and in TorchRL's worker processes (set before torch loads).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from benchmarks._common import (  # noqa: E402
    alternate,
    bar_plot,
    fmt_rate,
    fmt_ratio,
    median,
    print_table,
    rate,
    write_json,
)

log = logging.getLogger("benchmarks.torchrl_envs")

Runner = Callable[[], float]


# -- systems -------------------------------------------------------------------------------
class _MLPPolicy(torch.nn.Module):
    """4-64-64-n MLP, actions sampled from its logits (any batch shape)."""

    def __init__(self, obs_dim: int, n_actions: int, one_hot: bool = False) -> None:
        super().__init__()
        self.one_hot = one_hot
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(torch.nn.Linear(obs_dim, 64), torch.nn.Tanh(),
                                       torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                       torch.nn.Linear(64, n_actions))

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        logits = self.net(observation)
        if self.one_hot:  # GymEnv's default OneHot action encoding
            return torch.distributions.OneHotCategorical(logits=logits).sample().long()
        return torch.distributions.Categorical(logits=logits).sample()


def _mlp_policy(obs_dim: int, n_actions: int, one_hot: bool = False) -> Any:
    from tensordict.nn import TensorDictModule

    return TensorDictModule(_MLPPolicy(obs_dim, n_actions, one_hot), ["observation"], ["action"])


#: PoolEnv options for GymEnv's conventions (batched: the benchmark needs num_envs).
GYM_CONVENTIONS = {"categorical_action_encoding": False, "info_keys": []}


def raw_pool_sync(env_id: str, n: int, min_time: float, **options: Any) -> tuple[Runner, Any]:
    from torchfrag.envs import make

    pool = make(env_id, n, seed=0, autoreset="same_step", **options)
    pool.reset()
    rng = np.random.default_rng(0)
    k = pool.action_space.n
    actions = [rng.integers(0, k, size=n).astype(np.int64) for _ in range(64)]
    state = {"i": 0}

    def step() -> int:
        for _ in range(16):
            pool.step(actions[state["i"] % 64])
            state["i"] += 1
        return 16 * n

    return (lambda: rate(step, min_time)), pool.close


def raw_pool_async(env_id: str, n: int, min_time: float, **options: Any) -> tuple[Runner, Any]:
    from torchfrag.envs import make

    m = n // 2
    pool = make(env_id, n, batch_size=m, seed=0, autoreset="same_step", **options)
    rng = np.random.default_rng(0)
    k = pool.action_space.n
    actions = [rng.integers(0, k, size=m).astype(np.int64) for _ in range(64)]
    pool.async_reset()
    state = {"i": 0}

    def step() -> int:
        for _ in range(16):
            *_, info = pool.recv()
            pool.send(actions[state["i"] % 64], info["env_id"])
            state["i"] += 1
        return 16 * m

    return (lambda: rate(step, min_time)), pool.close


def envpool_numpy(env_id: str, n: int, min_time: float) -> tuple[Runner, Any] | None:
    try:
        import envpool
    except ImportError:
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        env = envpool.make(env_id, env_type="gymnasium", num_envs=n, num_threads=2, seed=0)
    env.reset()
    rng = np.random.default_rng(0)
    k = env.action_space.n
    actions = [rng.integers(0, k, size=n).astype(np.int32) for _ in range(64)]
    state = {"i": 0}

    def step() -> int:
        for _ in range(16):
            env.step(actions[state["i"] % 64])
            state["i"] += 1
        return 16 * n

    return (lambda: rate(step, min_time)), env.close


def pool_env_rollout(env_id: str, n: int, steps: int, min_time: float,
                     **kwargs: Any) -> tuple[Runner, Any]:
    from torchfrag.envs import PoolEnv

    # Index actions, as the GymEnv peers (categorical_action_encoding=True).
    env = PoolEnv(env_id, n, seed=0, **{"categorical_action_encoding": True, **kwargs})
    state = {"td": env.reset()}

    def step() -> int:
        # Continue from the previous rollout (no reset per call), as a training loop does.
        td = env.rollout(steps, break_when_any_done=False, auto_reset=False,
                         tensordict=state["td"])
        state["td"] = env.step_mdp(td[..., -1])
        return td.numel()

    return (lambda: rate(step, min_time)), env.close


def _gym_cartpole() -> Any:
    from torchrl.envs import GymEnv

    return GymEnv("CartPole-v1", categorical_action_encoding=True)


def _gym_pong() -> Any:
    import ale_py
    import gymnasium as gym
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation
    from torchrl.envs import GymWrapper

    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0)
    env = FrameStackObservation(AtariPreprocessing(env, frame_skip=4, screen_size=84), 4)
    return GymWrapper(env, categorical_action_encoding=True)


def _serial(factory: Callable[[], Any], n: int) -> Any:
    from torchrl.envs import SerialEnv

    return SerialEnv(n, factory)


def torchrl_batched(kind: str, factory: Callable[[], Any], n: int, steps: int,
                    min_time: float) -> tuple[Runner, Any]:
    from torchrl.envs import ParallelEnv, SerialEnv

    if kind == "parallel":
        env = ParallelEnv(2, functools.partial(_serial, factory, n // 2))
    else:
        env = SerialEnv(n, factory)
    state = {"td": env.reset()}

    def step() -> int:
        td = env.rollout(steps, break_when_any_done=False, auto_reset=False,
                         tensordict=state["td"])
        state["td"] = env.step_mdp(td[..., -1])
        return td.numel()

    return (lambda: rate(step, min_time, warmup=1)), env.close


def pool_collector(env_id: str, n: int, policy: Any, fpb: int, min_time: float,
                   deterministic: bool = False, env_options: dict | None = None
                   ) -> tuple[Runner, Any]:
    from torchfrag.collectors import PoolCollector
    from torchfrag.envs import PoolEnv

    if env_options is not None:  # a PoolEnv instance with these options, as a user passes it
        c = PoolCollector(PoolEnv(env_id, n, seed=0, categorical_action_encoding=True,
                                  **env_options), policy,
                          frames_per_batch=fpb, total_frames=-1)
    else:
        c = PoolCollector(env_id, policy, num_envs=n, frames_per_batch=fpb, total_frames=-1,
                          deterministic=deterministic, seed=0)
    it = iter(c)

    def step() -> int:
        return next(it).numel()

    return (lambda: rate(step, min_time, warmup=2)), c.shutdown


def torchrl_collector(factory: Callable[[], Any], n: int, policy: Any, fpb: int,
                      min_time: float) -> tuple[Runner, Any]:
    from torchrl.collectors import Collector
    from torchrl.envs import ParallelEnv

    env = ParallelEnv(2, functools.partial(_serial, factory, n // 2))
    c = Collector(env, policy, frames_per_batch=fpb, total_frames=-1)
    it = iter(c)

    def step() -> int:
        return next(it).numel()

    return (lambda: rate(step, min_time, warmup=1)), c.shutdown


# -- one env id ----------------------------------------------------------------------------
def bench_env(env_id: str, n: int, repeats: int, min_time: float, steps: int, peer_steps: int,
              full: bool) -> dict[str, Any]:
    """Builds and measures every system for ``env_id``; returns medians and samples."""
    from torchfrag.envs import spec

    s = spec(env_id)
    is_cartpole = env_id == "CartPole-v1"
    factory = _gym_cartpole if is_cartpole else _gym_pong
    fpb = n * 32
    builders: dict[str, Callable[[], tuple[Runner, Any] | None]] = {
        "raw pool (sync)": lambda: raw_pool_sync(env_id, n, min_time),
        "raw pool (async)": lambda: raw_pool_async(env_id, n, min_time),
        "envpool numpy": lambda: envpool_numpy(env_id, n, min_time),
        "PoolEnv.rollout": lambda: pool_env_rollout(env_id, n, steps, min_time),
        "PoolEnv.rollout (no infos)": lambda: pool_env_rollout(env_id, n, steps, min_time,
                                                               info_keys=[]),
        "PoolEnv.rollout (GymEnv conventions)": lambda: pool_env_rollout(
            env_id, n, steps, min_time, **GYM_CONVENTIONS),
        "ParallelEnv.rollout": lambda: torchrl_batched("parallel", factory, n, peer_steps,
                                                       min_time),
        "SerialEnv.rollout": lambda: torchrl_batched("serial", factory, n, peer_steps, min_time),
        "PoolCollector (random)": lambda: pool_collector(env_id, n, None, fpb, min_time),
        "PoolCollector (random, deterministic)": lambda: pool_collector(
            env_id, n, None, fpb, min_time, deterministic=True),
    }
    if is_cartpole:
        policy = _mlp_policy(s.observation_space.shape[0], s.action_space.n)
        builders.update({
            "PoolCollector (MLP)": lambda: pool_collector(env_id, n, policy, fpb, min_time),
            "PoolCollector (MLP, deterministic)": lambda: pool_collector(
                env_id, n, policy, fpb, min_time, deterministic=True),
            "PoolCollector (MLP, GymEnv conventions)": lambda: pool_collector(
                env_id, n, _mlp_policy(s.observation_space.shape[0], s.action_space.n, True),
                fpb, min_time, env_options=GYM_CONVENTIONS),
            "Collector(ParallelEnv) (MLP)": lambda: torchrl_collector(factory, n, policy, fpb,
                                                                      min_time),
        })
    else:
        builders["Collector(ParallelEnv) (random)"] = lambda: torchrl_collector(
            factory, n, None, fpb, min_time)
        builders["PoolCollector (random, GymEnv conventions)"] = lambda: pool_collector(
            env_id, n, None, fpb, min_time, env_options=GYM_CONVENTIONS)
    if not full:
        builders.pop("SerialEnv.rollout", None)
    systems: dict[str, Runner] = {}
    closers = []
    for name, build in builders.items():
        log.info("building %s / %s", env_id, name)
        try:
            built = build()
        except Exception as err:  # a peer that cannot run here is reported, not fatal
            log.warning("%s / %s unavailable: %s", env_id, name, err)
            continue
        if built is None:
            continue
        systems[name], close = built
        closers.append(close)
    try:
        samples = alternate(systems, repeats)
    finally:
        for close in closers:
            try:
                close()
            except Exception:  # noqa: BLE001 - best effort cleanup
                pass
    return {"num_envs": n, "samples": samples,
            "median": {k: median(v) for k, v in samples.items()}}


COMPARISONS = [
    # (label, ours, peer, goal)
    ("PoolEnv.rollout vs envpool numpy loop", "PoolEnv.rollout", "envpool numpy", 1.0),
    ("PoolEnv.rollout GymEnv conventions vs envpool numpy loop",
     "PoolEnv.rollout (GymEnv conventions)", "envpool numpy", 1.0),
    ("PoolEnv.rollout vs ParallelEnv.rollout", "PoolEnv.rollout", "ParallelEnv.rollout", 5.0),
    ("PoolEnv.rollout vs SerialEnv.rollout", "PoolEnv.rollout", "SerialEnv.rollout", None),
    ("PoolEnv.rollout vs raw pool (overhead)", "PoolEnv.rollout", "raw pool (sync)", None),
    ("PoolEnv.rollout no infos vs raw pool", "PoolEnv.rollout (no infos)", "raw pool (sync)",
     None),
    ("PoolCollector vs Collector(ParallelEnv), MLP", "PoolCollector (MLP)",
     "Collector(ParallelEnv) (MLP)", 3.0),
    ("PoolCollector GymEnv conventions vs Collector(ParallelEnv), MLP",
     "PoolCollector (MLP, GymEnv conventions)", "Collector(ParallelEnv) (MLP)", 3.0),
    ("PoolCollector vs Collector(ParallelEnv), random", "PoolCollector (random)",
     "Collector(ParallelEnv) (random)", None),
    ("PoolCollector GymEnv conventions vs Collector(ParallelEnv), random",
     "PoolCollector (random, GymEnv conventions)", "Collector(ParallelEnv) (random)", 3.0),
    ("PoolCollector random vs raw pool async", "PoolCollector (random)", "raw pool (async)",
     None),
    ("deterministic vs default, MLP", "PoolCollector (MLP, deterministic)",
     "PoolCollector (MLP)", None),
    ("deterministic vs default, random", "PoolCollector (random, deterministic)",
     "PoolCollector (random)", None),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="CartPole only, fewer repeats")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--min-time", type=float, default=None, help="seconds per measurement")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    repeats = args.repeats or (3 if args.quick else 5)
    min_time = args.min_time or (0.5 if args.quick else 1.5)

    from torchfrag.envs import list_envs

    configs = [("CartPole-v1", 64, 256, 16)]
    if not args.quick and "Pong-v5" in list_envs():
        configs.append(("Pong-v5", 8, 32, 8))
    results: dict[str, Any] = {}
    rows, groups, ours_s, peer_s = [], [], [], []
    table: list[dict[str, Any]] = []
    for env_id, n, steps, peer_steps in configs:
        res = bench_env(env_id, n, repeats, min_time, steps, peer_steps, full=not args.quick)
        results[env_id] = res
        med = res["median"]
        for name, value in med.items():
            log.info("%-40s %s frames/s", f"{env_id} {name}", fmt_rate(value))
        for label, ours, peer, goal in COMPARISONS:
            if ours not in med or peer not in med:
                continue
            ratio = med[ours] / med[peer]
            ok = "" if goal is None else ("yes" if ratio >= goal else "NO")
            rows.append([env_id, f"{n}", label, fmt_rate(med[ours]), fmt_rate(med[peer]),
                         fmt_ratio(ratio), "-" if goal is None else f">={goal:g}x {ok}"])
            table.append({"env_id": env_id, "num_envs": n, "comparison": label, "ours": ours,
                          "peer": peer, "ours_fps": med[ours], "peer_fps": med[peer],
                          "ratio": ratio, "goal": goal})
            groups.append(f"{env_id.split('-')[0]}: {label}")
            ours_s.append(med[ours])
            peer_s.append(med[peer])
    text = print_table(["env", "n", "comparison", "ours", "peer", "ratio", "goal"], rows,
                       title=f"frames/s, medians of {repeats} alternating repeats")
    path = write_json("torchrl_envs", {"repeats": repeats, "min_time": min_time,
                                       "quick": args.quick, "results": results,
                                       "comparisons": table, "table": text})
    png = bar_plot("torchrl_envs", groups, {"ours": ours_s, "peer": peer_s}, "frames / s",
                   "TorchRL integration: ours vs peer (medians)")
    log.info("wrote %s and %s", path, png)


if __name__ == "__main__":
    main()
