"""Device fragments: torch-native envs and the fused ``single_device`` loop.

Sections:

* CPU (runs everywhere): torch-native CartPole (``torchfrag.envs.batched``)
  with 4,096 envs against the C++ pool, both as raw steppers and through their
  TorchRL faces (``step_and_maybe_reset``), in the same run, alternating order,
  medians. Then whole-loop PPO CartPole frames/s: ``single_device`` on the
  CPU (torch-native env, fused and compiled rollout body) against ``local``
  with the C++ pool.
* GPU (only where CUDA exists, otherwise reported as ``skipped: no CUDA``):
  env steps/s of torch-native CartPole at 4k-64k envs (float64 and float32
  state), MuJoCo Warp HalfCheetah-v5 (4,096 worlds) against the C++ pool on
  every CPU core, whole-loop PPO CartPole frames/s under ``single_device``
  (goal: 1,000,000 frames/s), and the wall time to a greedy mean return of 475.

The CPU and GPU models are recorded with every figure. Results:
``benchmarks/results/device.json`` and ``device.png``.

Usage:
    python -m benchmarks.device            # everything this machine can run
    python -m benchmarks.device --quick    # shorter measurements
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
    fmt_rate,
    fmt_ratio,
    median,
    print_table,
    rate,
    write_json,
)

log = logging.getLogger("benchmarks.device")

ENV_ID = "CartPole-v1"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or the platform's processor string."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


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

    env = PoolEnv(ENV_ID, n, num_threads=threads, seed=0, info_keys=[])
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
            device: str = "cpu", eval_every: int = 5, seed: int = 0, compile: bool = True
            ) -> dict[str, Any]:
    """Runs PPO CartPole; returns frames/s after the first (compiling) iterations and time to ``target``.

    ``policy="single_device"``: torch-native env on ``device``, fused and
    compiled rollout. ``policy="local"``: the C++ pool (:class:`~torchfrag.envs.PoolEnv`).
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
            ret = _evaluate(actor, dev)
            state["best"] = max(state["best"], ret)
            if ret >= target and state["solved_at"] is None:
                state["solved_at"] = time.perf_counter() - t0
                return True
        return i + 1 >= max_iterations

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
            "compile": compile, "fused_steps": getattr(loop.rollout, "fused_steps", 0)}


# -- GPU --------------------------------------------------------------------------------------
GPU_SIZES = (4096, 16384, 65536)
GPU_PPO_THROUGHPUT = {"num_envs": 4096, "steps": 64, "minibatch_size": 32768, "epochs": 2,
                      "lr": 2.5e-3, "total_frames": 50_000_000}
GPU_PPO_SOLVE = {"num_envs": 1024, "steps": 32, "minibatch_size": 8192, "epochs": 4, "lr": 2.5e-3,
                 "total_frames": 20_000_000}


def warp_halfcheetah(dev: torch.device, seconds: float, repeats: int, n: int = 4096
                     ) -> dict[str, Any]:
    """HalfCheetah-v5 on MuJoCo Warp (``n`` worlds on ``dev``) vs the C++ pool on every CPU core."""
    from torchfrag.envs.batched.mjwarp import warp_available

    if not warp_available():
        print("MuJoCo Warp HalfCheetah: skipped: mujoco-warp not installed (torchfrag[gpu])")
        return {"skipped": "mujoco-warp not installed"}
    from torchfrag.envs import make as make_pool
    from torchfrag.envs.batched import make

    env = make("HalfCheetah-v5", n, seed=0, device=dev)
    carry = [env.reset()]
    gen = torch.Generator().manual_seed(0)
    acts = [(torch.rand((n, 6), generator=gen) * 2 - 1).to(dev) for _ in range(16)]
    k = [0]

    def warp_step() -> int:
        k[0] += 1
        carry[0]["action"] = acts[k[0] % 16]
        _, carry[0] = env.step_and_maybe_reset(carry[0])
        if k[0] % 16 == 0:
            _sync(dev)
        return n

    cores = os.cpu_count() or 1
    pool_n = 4 * cores
    pool = make_pool("HalfCheetah-v5", num_envs=pool_n, num_threads=cores, seed=0)
    pool.reset()
    rng = np.random.default_rng(0)
    pacts = [rng.uniform(-1, 1, size=(pool_n, 6)).astype(np.float32) for _ in range(16)]

    def pool_step() -> int:
        k[0] += 1
        pool.step(pacts[k[0] % 16])
        return pool_n

    runs = alternate({"warp": lambda: rate(warp_step, seconds, warmup=8),
                      "cpp_pool": lambda: rate(pool_step, seconds)}, repeats)
    pool.close()
    w, c = median(runs["warp"]), median(runs["cpp_pool"])
    print_table(["system", "env steps/s", "ratio"], [
        [f"MuJoCo Warp x{n} on {gpu_model()}", fmt_rate(w), fmt_ratio(w / c)],
        [f"C++ pool x{pool_n}, {cores} threads ({cpu_model()})", fmt_rate(c), "1.00x"]],
        title="HalfCheetah-v5 env steps/s")
    return {"warp_envs": n, "pool_envs": pool_n, "pool_threads": cores,
            "runs": runs, "warp": w, "cpp_pool": c, "ratio": w / c}


def gpu_sections(seconds: float, repeats: int) -> dict[str, Any]:
    """Env steps/s at 4k-64k envs and PPO under ``single_device`` on CUDA; skipped without it."""
    if not torch.cuda.is_available():
        print("GPU sections: skipped: no CUDA", flush=True)
        return {"skipped": "no CUDA"}
    dev = torch.device("cuda")
    out: dict[str, Any] = {"gpu": gpu_model(), "env_steps": {}}
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
    out["halfcheetah"] = warp_halfcheetah(dev, seconds, repeats)
    thr = ppo_run("single_device", GPU_PPO_THROUGHPUT, 40, None, device="cuda")
    solve = ppo_run("single_device", GPU_PPO_SOLVE, 2000, 475.0, device="cuda", eval_every=2)
    out["ppo_throughput"], out["ppo_time_to_475"] = thr, solve
    print_table(["run", "frames/s", "goal", "time to 475", "best eval"], [
        ["throughput", fmt_rate(thr["frames_per_s"]), "1M", "-", "-"],
        ["time to 475", fmt_rate(solve["frames_per_s"]), "-",
         f"{solve['time_to_target_s']:.1f}s" if solve["time_to_target_s"] else "not reached",
         f"{solve['best_eval']:.1f}"]], title="PPO CartPole, single_device on CUDA")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter measurements")
    parser.add_argument("--envs", type=int, default=4096, help="envs of the CPU comparison")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="C++ pool threads and torch threads on the CPU")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch intra-op threads (torch-native env and PPO)")
    parser.add_argument("--no-ppo", action="store_true", help="skip the PPO sections")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.torch_threads)
    seconds, repeats = (1.0, 3) if args.quick else (3.0, 5)
    info = {"cpu_model": cpu_model(), "gpu_model": gpu_model(), "torch": torch.__version__,
            "threads": args.threads, "torch_threads": args.torch_threads}
    print(f"CPU: {info['cpu_model']} ({os.cpu_count()} cores, C++ pool {args.threads} threads, "
          f"torch {args.torch_threads}); "
          f"GPU: {info['gpu_model'] or 'none'}", flush=True)

    envs = cpu_envs(args.envs, args.threads, seconds, repeats)
    pool_raw_rate = envs["C++ pool raw"]["median"]
    pool_face_rate = envs["C++ PoolEnv TorchRL face"]["median"]
    rows = []
    for name, r in envs.items():
        peer = pool_face_rate if "face" in name else pool_raw_rate
        rows.append([name, fmt_rate(r["median"]), fmt_rate(peer), fmt_ratio(r["median"] / peer)])
    print_table(["system", "env steps/s", "C++ pool (same kind)", "ratio"], rows,
                title=f"{ENV_ID}, {args.envs} envs on the CPU (medians of {repeats})")
    best_native = max(envs["native raw (eager)"]["median"], envs["native raw (compiled)"]["median"])
    winner = "the C++ pool" if pool_raw_rate > best_native else "the torch-native env"
    print(f"On this CPU {winner} wins the raw comparison "
          f"({fmt_ratio(best_native / pool_raw_rate)} torch-native / C++).", flush=True)

    payload: dict[str, Any] = {"info": info, "cpu_envs": {"num_envs": args.envs, "systems": envs,
                                                          "winner": winner}}
    if not args.no_ppo:
        iters = 8 if args.quick else 20
        cpu_cfg = {"num_envs": 16, "steps": 128, "minibatch_size": 512, "lr": 1e-3,
                   "total_frames": 2048 * iters}
        fused = ppo_run("single_device", cpu_cfg, iters, None)
        local = ppo_run("local", cpu_cfg, iters, None)
        payload["cpu_ppo"] = {"single_device": fused, "local_cpp_pool": local}
        print_table(["loop", "frames/s", "peer (local, C++ pool)", "ratio"], [
            ["single_device CPU, torch-native, fused", fmt_rate(fused["frames_per_s"]),
             fmt_rate(local["frames_per_s"]), fmt_ratio(fused["frames_per_s"] / local["frames_per_s"])]],
            title="PPO CartPole whole loop on the CPU (after the compiling iterations)")
    payload["gpu"] = gpu_sections(seconds, repeats)
    path = write_json("device", payload)
    names = list(envs)
    png = bar_plot("device", names, {f"{args.envs} envs, CPU": [envs[k]["median"] for k in names]},
                   "env steps/s", f"{ENV_ID} on the CPU: torch-native vs C++ pool")
    print(f"wrote {path} and {png}")


if __name__ == "__main__":
    main()
