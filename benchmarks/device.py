"""Device fragments: torch-native envs, MuJoCo Warp and the fused ``single_device`` loop.

One entry, ``python -m benchmarks.device``, in sections (``--sections`` picks
some; every section left out is printed with the reason, e.g. ``skipped: no
CUDA``):

* ``cpu-envs`` (everywhere): torch-native CartPole (``torchfrag.envs.batched``)
  with 4,096 envs against the C++ pool, both as raw steppers and through their
  TorchRL faces (``step_and_maybe_reset``), in the same run, alternating
  order, medians.
* ``cpu-ppo`` (everywhere): whole-loop PPO CartPole frames/s, ``single_device``
  on the CPU (torch-native env, fused and compiled rollout body) against
  ``local`` with the C++ pool.
* ``gpu-envs`` (CUDA): env steps/s of torch-native CartPole at 4k, 16k and
  64k envs (float64 and float32 state, and the float64 TorchRL face).
* ``warp`` (CUDA): MuJoCo Warp HalfCheetah-v5 (the issue's figure), Hopper-v5
  and Ant-v5 (4,096 worlds each) against the C++ pool on every CPU core of the
  same machine.
* ``gpu-ppo`` (CUDA): whole-loop PPO CartPole frames/s under ``single_device``
  (goal: 1,000,000 frames/s), and the wall time to a greedy mean return of 475.
* ``scaling`` (default on a CUDA machine, the lent 16-core one; anywhere with
  ``--sections scaling``): the C++ pool against EnvPool, Pong async and
  HalfCheetah with 1-16 threads (:mod:`benchmarks.pool_scaling`).
* ``ppo-halfcheetah`` (CUDA, opt-in with ``--long``): PPO HalfCheetah-v5 on
  MuJoCo Warp under ``single_device``: frames/s and the deterministic return
  after 10M frames.

The CPU and GPU models are recorded with every section. Results:
``benchmarks/results/device.json`` (sections of earlier runs that a run did
not redo are kept, so separate commands build one file), ``device.png`` (CPU
envs) and ``pool_scaling.{json,png}``.

Usage:
    python -m benchmarks.device            # every section this machine can run (not --long)
    python -m benchmarks.device --quick    # shorter measurements

On the lent GPU machine (10 minutes per command), one section group per command::

    python -m benchmarks.device --sections gpu-envs warp
    python -m benchmarks.device --sections gpu-ppo
    python -m benchmarks.device --sections scaling
    python -m benchmarks.device --sections ppo-halfcheetah
"""
from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from benchmarks._common import (
    alternate,
    bar_plot,
    cpu_model,
    fmt_rate,
    fmt_ratio,
    median,
    print_table,
    rate,
    write_json,
)

log = logging.getLogger("benchmarks.device")

ENV_ID = "CartPole-v1"


def gpu_model() -> str | None:
    """The CUDA device's name, or ``None`` without CUDA."""
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# -- env steppers ---------------------------------------------------------------------------
def native_raw(n: int, device: torch.device, dtype: torch.dtype = torch.float64,
               compile: bool = False) -> Callable[[], int]:
    """Torch-native CartPole's pure kernel (state stays on ``device``)."""
    from torchfrag.envs.batched import make

    env = make(ENV_ID, n, seed=0, device=device, dtype=dtype, check_actions=False)
    env.reset()
    if compile:
        env.compile_kernel()
    gen = torch.Generator().manual_seed(0)
    acts = [torch.randint(0, 2, (n,), generator=gen).to(device) for _ in range(64)]
    state = [env._state, env._elapsed, env._episode]
    k = [0]

    def step() -> int:
        k[0] += 1
        out = env._kernel(*state, acts[k[0] % 64])
        state[:] = out[5:]
        if k[0] % 64 == 0:
            _sync(device)
        return n

    return step


def _face(env: Any, n: int, device: torch.device) -> Callable[[], int]:
    """Steps a TorchRL env with ``step_and_maybe_reset`` and random actions."""
    gen = torch.Generator().manual_seed(0)
    acts = [torch.randint(0, 2, (n,), generator=gen).to(device) for _ in range(64)]
    carry = [env.reset()]
    k = [0]

    def step() -> int:
        k[0] += 1
        carry[0]["action"] = acts[k[0] % 64]
        _, carry[0] = env.step_and_maybe_reset(carry[0])
        if k[0] % 64 == 0:
            _sync(device)
        return n

    return step


def native_face(n: int, device: torch.device, compile: bool = False) -> Callable[[], int]:
    """Torch-native CartPole through its TorchRL face (``step_and_maybe_reset``)."""
    from torchfrag.envs.batched import make

    env = make(ENV_ID, n, seed=0, device=device, check_actions=False)
    if compile:
        env.compile_kernel()
    return _face(env, n, device)


def pool_raw(n: int, threads: int) -> Callable[[], int]:
    """The C++ pool's ``step`` (NumPy in and out)."""
    from torchfrag.envs import make

    pool = make(ENV_ID, num_envs=n, num_threads=threads, seed=0)
    pool.reset()
    rng = np.random.default_rng(0)
    acts = [rng.integers(0, 2, size=n).astype(np.int64) for _ in range(64)]
    k = [0]

    def step() -> int:
        k[0] += 1
        pool.step(acts[k[0] % 64])
        return n

    return step


def pool_face(n: int, threads: int) -> Callable[[], int]:
    """The C++ pool through :class:`~torchfrag.envs.PoolEnv` (``step_and_maybe_reset``)."""
    from torchfrag.envs import PoolEnv

    env = PoolEnv(ENV_ID, n, num_threads=threads, seed=0, info_keys=[],
                  categorical_action_encoding=True)
    return _face(env, n, torch.device("cpu"))


def cpu_envs(n: int, threads: int, seconds: float, repeats: int) -> dict[str, Any]:
    """Torch-native CartPole vs the C++ pool (``threads`` workers) on the CPU, ``n`` envs.

    Torch runs with the intra-op threads set in :func:`main` (one by default:
    elementwise kernels over a few thousand envs stay below torch's parallel
    grain, and on a loaded machine OpenMP's extra threads only spin).
    """
    cpu = torch.device("cpu")
    makers = {
        "native raw (eager)": lambda: native_raw(n, cpu),
        "native raw (compiled)": lambda: native_raw(n, cpu, compile=True),
        "C++ pool raw": lambda: pool_raw(n, threads),
        "native TorchRL face (compiled)": lambda: native_face(n, cpu, compile=True),
        "C++ PoolEnv TorchRL face": lambda: pool_face(n, threads),
    }
    steppers = {name: make() for name, make in makers.items()}
    for step in steppers.values():  # compile and warm up outside the timing
        for _ in range(5):
            step()
    runs = alternate({name: (lambda s=s: rate(s, seconds)) for name, s in steppers.items()},
                     repeats)
    return {name: {"runs": r, "median": median(r)} for name, r in runs.items()}


# -- PPO ------------------------------------------------------------------------------------
def _evaluate(actor: Any, device: torch.device, episodes: int = 32) -> float:
    from torchfrag.envs.batched import make
    from torchfrag.fragments import Act

    env = make(ENV_ID, episodes, seed=1000, device=device, check_actions=False)
    act = Act(actor, exploration="deterministic")
    total = torch.zeros(episodes, device=device)
    finished = torch.zeros(episodes, dtype=torch.bool, device=device)
    carry = env.reset()
    for _ in range(int(env.max_episode_steps)):
        tr, carry = env.step_and_maybe_reset(act(carry))
        total += tr["next", "reward"].reshape(episodes) * (~finished)
        finished |= tr["next", "done"].reshape(episodes)
    return float(total.mean())


def ppo_run(policy: str, cfg: dict[str, Any], max_iterations: int, target: float | None,
            device: str = "cpu", eval_every: int = 5, seed: int = 0, compile: bool = True,
            max_seconds: float | None = None) -> dict[str, Any]:
    """Runs PPO CartPole; returns frames/s after the first (compiling) iterations and time to ``target``.

    ``policy="single_device"``: torch-native env on ``device``, fused and
    compiled rollout. ``policy="local"``: the C++ pool (:class:`~torchfrag.envs.PoolEnv`).
    The run stops after ``max_iterations``, at ``target``, or once ``max_seconds``
    of wall time (compilation included) have passed, whichever comes first.
    """
    from torchfrag.algos.ppo import PPOConfig, PPOLoop, make_actor_critic, make_env
    from torchfrag.envs.batched import make
    from torchfrag.graph import capture
    from torchfrag.policies import SingleDevicePolicy
    from torchfrag.runtime import run

    torch.manual_seed(seed)
    conf = PPOConfig.from_dict(cfg)
    if policy == "single_device":
        env = make(ENV_ID, conf.num_envs, seed=seed, check_actions=False)
        pol: Any = SingleDevicePolicy(device_name=device, compile=compile)
    else:
        env = make_env(ENV_ID, conf.num_envs, seed=seed)
        pol = "local"
    actor, critic = make_actor_critic(env, conf.hidden)
    loop = PPOLoop(env, actor, critic, conf)
    dev = torch.device(device if policy == "single_device" else "cpu")
    marks: list[tuple[int, float]] = []
    state: dict[str, Any] = {"solved_at": None, "best": -float("inf")}
    t0 = time.perf_counter()

    def hook(i: int, metrics: Any, graph: Any) -> bool:
        _sync(dev)
        marks.append((i + 1, time.perf_counter() - t0))
        if target is not None and (i + 1) % eval_every == 0:
            e0 = time.perf_counter()
            ret = _evaluate(actor, dev)
            state["eval_s"] = state.get("eval_s", 0.0) + time.perf_counter() - e0
            state["best"] = max(state["best"], ret)
            if ret >= target and state["solved_at"] is None:
                state["solved_at"] = time.perf_counter() - t0
                return True
        out_of_time = max_seconds is not None and marks[-1][1] >= max_seconds
        return i + 1 >= max_iterations or out_of_time

    try:
        run(capture(loop), pol, iterations=max_iterations, hooks=[hook])
    finally:
        loop.close()
    fpi = conf.frames_per_iteration
    # Throughput from the third iteration on: the first ones compile.
    first = min(2, len(marks) - 1)
    (i0, s0), (i1, s1) = marks[first], marks[-1]
    fps = (i1 - i0) * fpi / (s1 - s0) if i1 > i0 else float("nan")
    return {"policy": policy, "device": str(dev), "config": conf.to_dict(),
            "iterations": len(marks), "frames": len(marks) * fpi, "frames_per_s": fps,
            "seconds": marks[-1][1], "first_iterations_s": marks[first][1],
            "time_to_target_s": state["solved_at"], "best_eval": state["best"], "target": target,
            # The greedy evaluations (eager, every eval_every iterations) are in the wall time
            # above; this is their share, so the training time alone can be read off too.
            "eval_s": state.get("eval_s", 0.0),
            "compile": compile, "fused_steps": getattr(loop.rollout, "fused_steps", 0),
            "max_seconds": max_seconds}


# -- GPU --------------------------------------------------------------------------------------
GPU_SIZES = (4096, 16384, 65536)
GPU_PPO_THROUGHPUT = {"num_envs": 4096, "steps": 64, "minibatch_size": 32768, "epochs": 2,
                      "lr": 2.5e-3, "total_frames": 50_000_000}
GPU_PPO_SOLVE = {"num_envs": 1024, "steps": 32, "minibatch_size": 8192, "epochs": 4, "lr": 2.5e-3,
                 "total_frames": 20_000_000}


def warp_vs_pool(env_id: str, dev: torch.device, seconds: float, repeats: int, n: int = 4096,
                 threads: int | None = None) -> dict[str, Any]:
    """``env_id`` on MuJoCo Warp (``n`` worlds on ``dev``) vs the C++ pool on ``threads`` CPU
    cores (default: all; 4 envs per thread), env steps/s, alternating, medians."""
    from torchfrag.envs.batched.mjwarp import warp_available

    if not warp_available():
        print(f"MuJoCo Warp {env_id}: skipped: mujoco-warp not installed (torchfrag[gpu])")
        return {"skipped": "mujoco-warp not installed"}
    from torchfrag.envs import make as make_pool
    from torchfrag.envs.batched import make

    env = make(env_id, n, seed=0, device=dev)
    k_act = int(env.action_spec.shape[-1])
    carry = [env.reset()]
    gen = torch.Generator().manual_seed(0)
    acts = [(torch.rand((n, k_act), generator=gen) * 2 - 1).to(dev) for _ in range(16)]
    k = [0]

    def warp_step() -> int:
        k[0] += 1
        carry[0]["action"] = acts[k[0] % 16]
        _, carry[0] = env.step_and_maybe_reset(carry[0])
        if k[0] % 16 == 0:
            _sync(dev)
        return n

    cores = threads or os.cpu_count() or 1
    pool_n = 4 * cores
    pool = make_pool(env_id, num_envs=pool_n, num_threads=cores, seed=0)
    pool.reset()
    rng = np.random.default_rng(0)
    pacts = [rng.uniform(-1, 1, size=(pool_n, k_act)).astype(np.float32) for _ in range(16)]

    def pool_step() -> int:
        k[0] += 1
        pool.step(pacts[k[0] % 16])
        return pool_n

    runs = alternate({"warp": lambda: rate(warp_step, seconds, warmup=8),
                      "cpp_pool": lambda: rate(pool_step, seconds)}, repeats)
    pool.close()
    w, c = median(runs["warp"]), median(runs["cpp_pool"])
    print_table(["system", "env steps/s", "ratio"], [
        [f"MuJoCo Warp x{n} on {gpu_model() if dev.type == 'cuda' else dev}", fmt_rate(w),
         fmt_ratio(w / c)],
        [f"C++ pool x{pool_n}, {cores} threads ({cpu_model()})", fmt_rate(c), "1.00x"]],
        title=f"{env_id} env steps/s")
    return {"env_id": env_id, "device": str(dev), "warp_envs": n, "pool_envs": pool_n,
            "pool_threads": cores, "runs": runs, "warp": w, "cpp_pool": c, "ratio": w / c}


#: Tasks of the ``warp`` section: the issue's HalfCheetah first, then Hopper and Ant.
WARP_TASKS = ("HalfCheetah-v5", "Hopper-v5", "Ant-v5")


def warp_section(dev: torch.device, seconds: float, repeats: int, n: int = 4096
                 ) -> dict[str, Any]:
    """Every MuJoCo Warp task vs the C++ pool on all CPU cores (:func:`warp_vs_pool`)."""
    return {env_id: warp_vs_pool(env_id, dev, seconds, repeats, n) for env_id in WARP_TASKS}


def gpu_envs(seconds: float, repeats: int) -> dict[str, Any]:
    """Torch-native CartPole env steps/s at 4k-64k envs on CUDA (float64, float32, TorchRL face)."""
    dev = torch.device("cuda")
    out: dict[str, Any] = {"gpu": gpu_model(), "cpu": cpu_model(), "env_steps": {}}
    rows = []
    for n in GPU_SIZES:
        steppers = {
            "float64": native_raw(n, dev, torch.float64, compile=True),
            "float32": native_raw(n, dev, torch.float32, compile=True),
            "float64 TorchRL face": native_face(n, dev, compile=True),
        }
        runs = alternate({k: (lambda s=s: rate(s, seconds, warmup=64)) for k, s in steppers.items()},
                         repeats)
        out["env_steps"][n] = {k: {"runs": r, "median": median(r)} for k, r in runs.items()}
        rows.append([n, *(fmt_rate(median(r)) for r in runs.values())])
    print_table(["envs", "float64", "float32", "float64 TorchRL face"], rows,
                title=f"torch-native {ENV_ID} env steps/s on {gpu_model()}")
    return out


def gpu_ppo(save: Callable[[dict[str, Any]], None] | None = None, quick: bool = False
            ) -> dict[str, Any]:
    """Whole-loop PPO CartPole under ``single_device`` on CUDA: frames/s (goal 1M) and time to 475.

    Args:
        save: Called with the throughput figure as soon as it is measured, so
            that a run cut short during the time-to-475 run keeps it.
        quick: Shorter caps (20 throughput iterations; 90 s to reach 475
            instead of 150 s).
    """
    thr = ppo_run("single_device", GPU_PPO_THROUGHPUT, 20 if quick else 40, None, device="cuda",
                  max_seconds=60.0 if quick else 120.0)
    if save is not None:
        save({"gpu": gpu_model(), "cpu": cpu_model(), "ppo_throughput": thr})
    solve = ppo_run("single_device", GPU_PPO_SOLVE, 2000, 475.0, device="cuda", eval_every=2,
                    max_seconds=90.0 if quick else 150.0)
    print_table(["run", "frames/s", "goal", "time to 475", "of it evaluating", "best eval"], [
        ["throughput", fmt_rate(thr["frames_per_s"]), "1M", "-", "-", "-"],
        ["time to 475", fmt_rate(solve["frames_per_s"]), "-",
         f"{solve['time_to_target_s']:.1f}s" if solve["time_to_target_s"] else "not reached",
         f"{solve['eval_s']:.1f}s", f"{solve['best_eval']:.1f}"]], title=f"PPO CartPole, single_device on {gpu_model()}")
    return {"gpu": gpu_model(), "cpu": cpu_model(), "ppo_throughput": thr, "ppo_time_to_475": solve}


#: PPO HalfCheetah on MuJoCo Warp (CUDA): 2,048 worlds x 32 steps per iteration.
WARP_PPO = {"num_envs": 2048, "steps": 32, "minibatch_size": 16384, "epochs": 4, "lr": 3e-4,
            "hidden": [256, 256], "gamma": 0.99, "lmbda": 0.95, "entropy_coef": 0.0,
            "reward_scale": 0.1, "obs_norm": True, "total_frames": 10_000_000}


def _warp_halfcheetah_env(n: int, seed: int, device: torch.device, obs_norm: bool = False,
                          frozen: Any = None, **options: Any) -> Any:
    """HalfCheetah-v5 on MuJoCo Warp with float32 observations for the networks (as
    :func:`torchfrag.algos.envs.make_env` gives the C++ pool's), normalised when asked
    (``obs_norm``: running statistics; ``frozen``: a trained loop's frozen ones)."""
    from torchrl.envs import Compose, DoubleToFloat, TransformedEnv, VecNormV2

    from torchfrag.algos.envs import _obs_clip
    from torchfrag.envs.batched import make

    transforms: list[Any] = [DoubleToFloat(in_keys=["observation"])]
    if obs_norm:
        transforms += [VecNormV2(in_keys=["observation"], decay=0.99999, eps=1e-8,
                                 reduce_batch_dims=True), _obs_clip()]
    if frozen is not None:
        transforms.append(frozen)
    env = make("HalfCheetah-v5", n, seed=seed, device=device, **options)
    return TransformedEnv(env, Compose(*transforms))


def _evaluate_halfcheetah(actor: Any, device: torch.device, episodes: int, steps: int = 1000,
                          frozen: Any = None) -> float:
    """Mean deterministic return of ``actor`` over ``steps``-step HalfCheetah-v5 episodes on Warp."""
    from torchfrag.fragments import Act

    env = _warp_halfcheetah_env(episodes, 1000, device, frozen=frozen, max_episode_steps=steps)
    act = Act(actor, exploration="deterministic")
    total = torch.zeros(episodes, dtype=torch.float64, device=device)
    carry = env.reset()
    with torch.no_grad():
        for _ in range(steps):
            tr, carry = env.step_and_maybe_reset(act(carry))
            total += tr["next", "reward"].reshape(episodes).to(torch.float64)
    return float(total.mean())


def ppo_halfcheetah_warp(device: str = "cuda", cfg: dict[str, Any] | None = None,
                         eval_episodes: int = 64, eval_steps: int = 1000, seed: int = 0,
                         compile: bool = True) -> dict[str, Any]:
    """PPO HalfCheetah-v5 with MuJoCo Warp worlds on ``device`` under ``single_device``.

    Returns frames/s (from the third iteration on) and the mean deterministic
    return over ``eval_episodes`` episodes of ``eval_steps`` steps (Gymnasium's
    1000 by default) after ``cfg["total_frames"]`` frames (default
    :data:`WARP_PPO`: 10M frames). The same code runs on the CPU (Warp's CPU
    mode), which the tests use with a tiny configuration.
    """
    from torchfrag.algos.ppo import PPOConfig, PPOLoop, make_actor_critic
    from torchfrag.graph import capture
    from torchfrag.policies import SingleDevicePolicy
    from torchfrag.runtime import run

    torch.manual_seed(seed)
    conf = PPOConfig.from_dict(cfg or WARP_PPO)
    dev = torch.device(device)
    env = _warp_halfcheetah_env(conf.num_envs, seed, dev, obs_norm=conf.obs_norm)
    actor, critic = make_actor_critic(env, conf.hidden)
    loop = PPOLoop(env, actor, critic, conf)
    iterations = conf.iterations
    marks: list[float] = []
    t0 = time.perf_counter()

    def hook(i: int, metrics: Any, graph: Any) -> bool:
        _sync(dev)
        marks.append(time.perf_counter() - t0)
        return i + 1 >= iterations

    try:
        run(capture(loop), SingleDevicePolicy(device_name=device, compile=compile),
            iterations=iterations, hooks=[hook])
        ret = _evaluate_halfcheetah(actor, dev, eval_episodes, eval_steps, loop.eval_transform())
    finally:
        loop.close()
    fpi = conf.frames_per_iteration
    first = min(2, len(marks) - 1)
    done = len(marks) - 1 - first
    fps = done * fpi / (marks[-1] - marks[first]) if done > 0 else float("nan")
    out = {"device": str(dev), "gpu": gpu_model(), "cpu": cpu_model(), "config": conf.to_dict(),
           "iterations": len(marks), "frames": len(marks) * fpi, "frames_per_s": fps,
           "seconds": marks[-1] if marks else float("nan"), "eval_episodes": eval_episodes,
           "eval_steps": eval_steps, "eval_return": ret}
    print_table(["frames", "frames/s", "seconds", "mean return (deterministic)"], [
        [fmt_rate(out["frames"]), fmt_rate(fps), f"{out['seconds']:.0f}", f"{ret:.1f}"]],
        title=f"PPO HalfCheetah-v5 on MuJoCo Warp, single_device on {gpu_model() or device}")
    return out


#: Sections of :func:`main`, in the order they run.
SECTIONS = ("cpu-envs", "cpu-ppo", "gpu-envs", "warp", "gpu-ppo", "scaling", "ppo-halfcheetah")
#: Sections that need CUDA.
CUDA_SECTIONS = ("gpu-envs", "warp", "gpu-ppo", "ppo-halfcheetah")


def default_sections(cuda: bool) -> list[str]:
    """What a plain ``python -m benchmarks.device`` runs: the CPU sections, and on a CUDA
    machine (the lent one, with 16 cores) every GPU figure and the pool's thread scaling.
    ``ppo-halfcheetah`` (10M frames) is opt-in (``--long`` or ``--sections``)."""
    return [s for s in SECTIONS
            if s != "ppo-halfcheetah" and (cuda or s not in (*CUDA_SECTIONS, "scaling"))]


def plan(sections: list[str] | None, cuda: bool, long: bool = False
         ) -> tuple[list[str], dict[str, str]]:
    """The sections to run and, for each section left out, why.

    Raises:
        ValueError: an unknown section name.

    Example:
        >>> run_, skipped = plan(None, cuda=False)
        >>> run_, skipped["gpu-ppo"]
        (['cpu-envs', 'cpu-ppo'], 'skipped: no CUDA')
    """
    if sections is not None:
        unknown = [s for s in sections if s not in SECTIONS]
        if unknown:
            raise ValueError(f"sections {unknown} unknown; choose from {list(SECTIONS)}")
    wanted = list(sections) if sections is not None else default_sections(cuda) + (
        ["ppo-halfcheetah"] if long else [])
    todo: list[str] = []
    skipped: dict[str, str] = {}
    for s in SECTIONS:
        if s in wanted and (cuda or s not in CUDA_SECTIONS):
            todo.append(s)
        elif s in CUDA_SECTIONS and not cuda:
            skipped[s] = "skipped: no CUDA"
        elif s == "scaling":
            skipped[s] = ("skipped: not the lent CUDA machine; run it there, or here with "
                          "--sections scaling (or python -m benchmarks.pool_scaling)")
        elif s == "ppo-halfcheetah":
            skipped[s] = "skipped: opt-in (--long): 10M frames of PPO HalfCheetah on MuJoCo Warp"
        else:
            skipped[s] = "skipped: not requested"
    return todo, skipped


def _merge_write(sections: dict[str, Any], info: dict[str, Any]) -> str:
    """Writes ``device.json``, keeping the sections of earlier runs that this run did not redo."""
    import json

    from benchmarks._common import RESULTS_DIR

    path = os.path.join(RESULTS_DIR, "device.json")
    old: dict[str, Any] = {}
    try:
        with open(path) as f:
            saved = json.load(f)
    except (OSError, ValueError):
        saved = {}
    old = dict(saved.get("sections", {}))
    # Files written before the sections existed: their CPU figures, with that run's models.
    for key, name in (("cpu_envs", "cpu-envs"), ("cpu_ppo", "cpu-ppo")):
        if key in saved and name not in old:
            info_old = saved.get("info", {})
            old[name] = {"cpu": info_old.get("cpu_model"), "gpu": info_old.get("gpu_model"),
                         "time": saved.get("machine", {}).get("time"), **saved[key]}
    merged = {k: v for k, v in old.items() if k in SECTIONS}
    for name, value in sections.items():
        if "skipped" not in value or name not in merged:  # a skip never hides an earlier figure
            merged[name] = value
    return write_json("device", {"info": info, "sections": merged})


def gpu_plot(sections: dict[str, Any]) -> str | None:
    """Draws ``device_gpu.png`` from saved GPU sections; ``None`` when none was measured.

    Left: torch-native CartPole env steps/s against the number of envs
    (``gpu-envs``). Right: MuJoCo Warp against the C++ pool on the same
    machine's cores (``warp``), with the ratio over each pair.
    """
    envs = sections.get("gpu-envs", {}).get("env_steps")
    warp = {k: v for k, v in sections.get("warp", {}).items()
            if isinstance(v, dict) and "warp" in v}
    if not envs and not warp:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks._common import RESULTS_DIR

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.3))
    if envs:
        sizes = sorted(envs, key=int)
        for kind in next(iter(envs.values())):
            axes[0].plot([int(n) for n in sizes], [envs[n][kind]["median"] for n in sizes], "o-",
                         label=kind)
        axes[0].set_xscale("log", base=2)
        axes[0].set_yscale("log")
        axes[0].set_xlabel("envs")
        axes[0].set_ylabel("env steps / s")
        axes[0].axhline(1e8, color="gray", ls="--", lw=0.8, label="goal 100M at 64k envs")
        axes[0].set_title(f"torch-native {ENV_ID} on {sections['gpu-envs'].get('gpu')}", fontsize=9)
        axes[0].legend(fontsize=8)
        axes[0].grid(alpha=0.3)
    if warp:
        names = list(warp)
        x = np.arange(len(names))
        axes[1].bar(x - 0.2, [warp[k]["warp"] for k in names], 0.4, label="MuJoCo Warp (GPU)")
        axes[1].bar(x + 0.2, [warp[k]["cpp_pool"] for k in names], 0.4,
                    label=f"C++ pool ({next(iter(warp.values()))['pool_threads']} threads)")
        for i, k in enumerate(names):
            top = max(warp[k]["warp"], warp[k]["cpp_pool"])
            axes[1].text(i, top * 1.05, f"{warp[k]['ratio']:.2f}x", ha="center", fontsize=8)
        axes[1].set_ylim(0, 1.15 * max(max(v["warp"], v["cpp_pool"]) for v in warp.values()))
        axes[1].set_xticks(x, names)
        axes[1].set_ylabel("env steps / s")
        axes[1].set_title(f"MuJoCo Warp x{next(iter(warp.values()))['warp_envs']} vs C++ pool, "
                          f"{sections['warp'].get('gpu')}", fontsize=9)
        axes[1].legend(fontsize=8)
        axes[1].grid(axis="y", alpha=0.3)
    else:
        axes[1].set_axis_off()
    fig.tight_layout()
    path = os.path.join(RESULTS_DIR, "device_gpu.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter measurements")
    parser.add_argument("--sections", nargs="*", default=None, choices=SECTIONS,
                        help="sections to run (default: every section this machine can run, "
                             "except the opt-in ppo-halfcheetah)")
    parser.add_argument("--long", action="store_true",
                        help="also run ppo-halfcheetah (PPO HalfCheetah on MuJoCo Warp, 10M frames)")
    parser.add_argument("--envs", type=int, default=4096, help="envs of the CPU comparison")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="C++ pool threads and torch threads on the CPU")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch intra-op threads (torch-native env and PPO)")
    parser.add_argument("--no-ppo", action="store_true", help="skip the CPU PPO section")
    parser.add_argument("--replot", action="store_true",
                        help="only redraw device_gpu.png from the saved device.json")
    args = parser.parse_args(argv)
    if args.replot:
        import json

        from benchmarks._common import RESULTS_DIR

        with open(os.path.join(RESULTS_DIR, "device.json")) as f:
            print(f"wrote {gpu_plot(json.load(f)['sections'])}")
        return
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.torch_threads)
    seconds, repeats = (1.0, 3) if args.quick else (3.0, 5)
    cuda = torch.cuda.is_available()
    todo, skipped = plan(args.sections, cuda, args.long)
    if args.no_ppo and "cpu-ppo" in todo:
        todo.remove("cpu-ppo")
        skipped["cpu-ppo"] = "skipped: --no-ppo"
    info = {"cpu_model": cpu_model(), "gpu_model": gpu_model(), "torch": torch.__version__,
            "threads": args.threads, "torch_threads": args.torch_threads, "quick": args.quick}
    print(f"CPU: {info['cpu_model']} ({os.cpu_count()} cores, C++ pool {args.threads} threads, "
          f"torch {args.torch_threads}); GPU: {info['gpu_model'] or 'none'}", flush=True)
    print(f"sections: running {todo}", flush=True)
    for name, why in skipped.items():
        print(f"  {name}: {why}", flush=True)
    results: dict[str, Any] = {name: {"skipped": why} for name, why in skipped.items()}
    stamp = {"cpu": info["cpu_model"], "gpu": info["gpu_model"], "quick": args.quick,
             "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    path = _merge_write(results, info)

    def save(name: str, value: dict[str, Any]) -> None:
        # Every figure is on disk as soon as it is measured: a run cut short keeps it.
        results[name] = {**stamp, **value}
        _merge_write({name: results[name]}, info)

    for name in todo:
        print(f"\n== {name}", flush=True)
        if name == "cpu-envs":
            out = cpu_section(args.envs, args.threads, seconds, repeats)
        elif name == "cpu-ppo":
            out = cpu_ppo_section(args.quick)
        elif name == "gpu-envs":
            out = gpu_envs(seconds, repeats)
        elif name == "warp":
            out = warp_section(torch.device("cuda"), seconds, repeats)
        elif name == "gpu-ppo":
            out = gpu_ppo(save=lambda partial: save("gpu-ppo", partial), quick=args.quick)
        elif name == "scaling":
            from benchmarks import pool_scaling

            out = pool_scaling.run(quick=args.quick)
        else:
            out = ppo_halfcheetah_warp("cuda")
        save(name, out)
    if any(n in todo for n in ("gpu-envs", "warp")):
        import json

        with open(path) as f:
            print(f"wrote {gpu_plot(json.load(f)['sections'])}")
    print(f"wrote {path}")


def cpu_section(n: int, threads: int, seconds: float, repeats: int) -> dict[str, Any]:
    """Torch-native CartPole vs the C++ pool on the CPU: table, verdict and ``device.png``."""
    envs = cpu_envs(n, threads, seconds, repeats)
    pool_raw_rate = envs["C++ pool raw"]["median"]
    pool_face_rate = envs["C++ PoolEnv TorchRL face"]["median"]
    rows = []
    for name, r in envs.items():
        peer = pool_face_rate if "face" in name else pool_raw_rate
        rows.append([name, fmt_rate(r["median"]), fmt_rate(peer), fmt_ratio(r["median"] / peer)])
    print_table(["system", "env steps/s", "C++ pool (same kind)", "ratio"], rows,
                title=f"{ENV_ID}, {n} envs on the CPU (medians of {repeats})")
    best_native = max(envs["native raw (eager)"]["median"], envs["native raw (compiled)"]["median"])
    winner = "the C++ pool" if pool_raw_rate > best_native else "the torch-native env"
    print(f"On this CPU {winner} wins the raw comparison "
          f"({fmt_ratio(best_native / pool_raw_rate)} torch-native / C++).", flush=True)
    names = list(envs)
    png = bar_plot("device", names, {f"{n} envs, CPU": [envs[k]["median"] for k in names]},
                   "env steps/s", f"{ENV_ID} on the CPU: torch-native vs C++ pool")
    return {"num_envs": n, "systems": envs, "winner": winner, "png": os.path.relpath(png)}


def cpu_ppo_section(quick: bool) -> dict[str, Any]:
    """Whole-loop PPO CartPole frames/s on the CPU: ``single_device`` (fused) vs ``local`` (C++ pool)."""
    iters = 8 if quick else 20
    cpu_cfg = {"num_envs": 16, "steps": 128, "minibatch_size": 512, "lr": 1e-3,
               "total_frames": 2048 * iters}
    fused = ppo_run("single_device", cpu_cfg, iters, None)
    local = ppo_run("local", cpu_cfg, iters, None)
    print_table(["loop", "frames/s", "peer (local, C++ pool)", "ratio"], [
        ["single_device CPU, torch-native, fused", fmt_rate(fused["frames_per_s"]),
         fmt_rate(local["frames_per_s"]), fmt_ratio(fused["frames_per_s"] / local["frames_per_s"])]],
        title="PPO CartPole whole loop on the CPU (after the compiling iterations)")
    return {"single_device": fused, "local_cpp_pool": local}


if __name__ == "__main__":
    main()
