"""Wall-clock time to solve: torchfrag against CleanRL and TorchRL, same machine, same run.

For each task, each system trains with its own default recipe for that task, as
a user would run it, in its own process; the benchmark reads the training
episode returns as they appear and stops the process once the mean return of
the last ``--window`` training episodes reaches the task's target. It records
the wall-clock seconds from process start (imports, env and network
construction included, for every system alike), the frames at that point and
frames/s, and the curve of that mean against wall-clock seconds. Seeds and
systems alternate (``seed 0: torchfrag, cleanrl, torchrl; seed 1: ...``) so a
noisy host hurts none of them more than the others.

Systems:

* **torchfrag** - ``torchfrag.algos`` with the shipped presets (the main job's
  ``algo=ppo``, ``algo=dqn``, ``algo=ppo_mujoco``), built exactly as
  ``python -m torchfrag.train`` builds it, run by a small worker of this module
  that prints each iteration's finished episodes.
* **cleanrl** - CleanRL's single-file scripts (``ppo.py``, ``dqn.py``,
  ``ppo_continuous_action.py``) unchanged, with their default hyper-parameters,
  in a separate virtual environment this benchmark creates (CleanRL pins
  ``gymnasium==0.29.1``, whose vector-env API its scripts use; ``numpy<2``).
  The scripts are copied at run time into the cache folder (never into this
  repository) from a CleanRL checkout or git directory (``--cleanrl``), or from
  a ``cleanrl`` wheel on the package index when none is given (the index's
  newest, 0.4.8, is only an sdist of the older gym-era scripts: the benchmark
  then stops and asks for ``--cleanrl``).
* **torchrl** - TorchRL's ``sota-implementations`` scripts unchanged (DQN
  ``dqn_cartpole.py``; PPO ``ppo_mujoco.py``), with their default configs
  (``logger.backend=csv`` so that returns can be read), in torchfrag's own
  environment (it has TorchRL). Copied at run time into the cache folder from
  a TorchRL checkout or git directory (``--torchrl``). TorchRL has no
  discrete-action PPO script, so PPO on CartPole has no TorchRL entry.

Every process runs with ``OMP_NUM_THREADS=1`` and the same torch build (the
CleanRL environment sees torchfrag's torch through a ``.pth`` file appended
after its own packages, so its pinned gymnasium and numpy come first).

Results: ``results/time_to_solve[_<tag>].json`` and ``.png`` (mean training
return against wall-clock seconds, every system and seed), and a table of
median seconds to target, frames/s and torchfrag's ratio to each peer.

Examples (shell)::

    python -m benchmarks.time_to_solve --tasks ppo-cartpole dqn-cartpole --seeds 0 \\
        --cleanrl /path/to/cleanrl --torchrl /path/to/pytorch-rl
    python -m benchmarks.time_to_solve --tasks ppo-halfcheetah --seeds 0 1 2 --max-seconds 7200
    # SAC HalfCheetah to 3000 on a GPU machine: the three systems side by side (``--parallel``),
    # each process on its own third of the cores, networks on the GPU; JSON + PNG into DIR
    python -m benchmarks.time_to_solve --algo sac --env HalfCheetah-v5 --target 3000 \
        --device cuda --parallel --max-seconds 420 --out DIR
    # torchfrag alone with bfloat16 matrix products (extra overrides for its run), its own tag
    python -m benchmarks.time_to_solve --algo sac --systems torchfrag --max-seconds 1500 \
        --tag bf16 --torchfrag-args algo.matmul_dtype=bfloat16

Example:
    >>> from benchmarks.time_to_solve import TASKS, window_mean
    >>> TASKS["dqn-cartpole"].target, TASKS["ppo-cartpole"].torchrl is None
    (475.0, True)
    >>> window_mean([1.0, 2.0, 3.0], 2)
    2.5
"""
from __future__ import annotations

import argparse
import glob
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks._common import RESULTS_DIR, fmt_ratio, median, print_table, write_json

logger = logging.getLogger(__name__)

SYSTEMS = ("torchfrag", "cleanrl", "torchrl")
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "torchfrag", "time_to_solve")
CLEANRL_PINS = ["gymnasium==0.29.1", "numpy==1.26.4", "tyro", "tensorboard"]


@dataclass
class Task:
    """One task: env, target training return, and how each system runs it."""

    env: str
    target: float
    frames: int
    torchfrag: list[str]
    cleanrl: str | None
    cleanrl_args: list[str] = field(default_factory=list)
    cleanrl_extra: list[str] = field(default_factory=list)
    torchrl: str | None = None
    torchrl_args: list[str] = field(default_factory=list)
    torchrl_csv: str = ""
    torchrl_missing: str = ""
    #: CleanRL's and TorchRL's structures written in ``benchmarks/sac_peers.py`` (no checkout needed),
    #: run with ``sac_peers_args``; ``cleanrl``/``torchrl`` then only name what they follow.
    own_peers: bool = False
    sac_peers_args: list[str] = field(default_factory=list)


TASKS: dict[str, Task] = {
    "ppo-cartpole": Task(
        env="CartPole-v1", target=475.0, frames=500_000,
        torchfrag=["algo=ppo", "env=CartPole-v1"],
        cleanrl="cleanrl/ppo.py", cleanrl_args=["--env-id", "CartPole-v1", "--total-timesteps", "500000"],
        torchrl=None, torchrl_missing="TorchRL's sota-implementations have no discrete-action PPO "
                                      "(ppo_mujoco.py and ppo_atari.py only)"),
    "dqn-cartpole": Task(
        env="CartPole-v1", target=475.0, frames=500_000,
        torchfrag=["algo=dqn", "env=CartPole-v1"],
        cleanrl="cleanrl/dqn.py", cleanrl_args=["--env-id", "CartPole-v1", "--total-timesteps", "500000"],
        torchrl="sota-implementations/dqn/dqn_cartpole.py", torchrl_args=["device=cpu"],
        torchrl_csv="train/episode_reward.csv"),
    # torchfrag with CleanRL's dqn.py hyper-parameters (the dqn_cleanrl preset): same recipe, both sides
    "dqn-cartpole-cleanrl-recipe": Task(
        env="CartPole-v1", target=475.0, frames=500_000,
        torchfrag=["algo=dqn_cleanrl", "env=CartPole-v1"],
        cleanrl="cleanrl/dqn.py", cleanrl_args=["--env-id", "CartPole-v1", "--total-timesteps", "500000"],
        torchrl=None, torchrl_missing="TorchRL's dqn_cartpole.py has its own recipe (see dqn-cartpole)"),
    "ppo-halfcheetah": Task(
        env="HalfCheetah-v5", target=3000.0, frames=1_000_000,
        torchfrag=["algo=ppo_mujoco", "env=HalfCheetah-v5"],
        cleanrl="cleanrl/ppo_continuous_action.py",
        cleanrl_args=["--env-id", "HalfCheetah-v4", "--total-timesteps", "1000000"],
        cleanrl_extra=["mujoco==2.3.7"],
        torchrl="sota-implementations/ppo/ppo_mujoco.py",
        torchrl_args=["env.env_name=HalfCheetah-v5"], torchrl_csv="train/reward.csv"),
}
# SAC: the peers are benchmarks/sac_peers.py (CleanRL's and TorchRL's structures with their defaults,
# written here); all three share batch 256, one update per frame, 5000 random frames, 256x256 networks.
for _name, _env, _target, _frames in (
        ("sac-halfcheetah", "HalfCheetah-v5", 3000.0, 1_000_000),
        # HalfCheetah 3000 needs ~100k+ frames (hours per run on a 2-core host); these fit it:
        ("sac-halfcheetah-1000", "HalfCheetah-v5", 1000.0, 200_000),
        ("sac-pendulum", "Pendulum-v1", -250.0, 50_000),
        # frames/s only: 5000 random frames then 2000 learning frames (target never reached)
        ("sac-halfcheetah-speed", "HalfCheetah-v5", float("inf"), 7_000)):
    TASKS[_name] = Task(
        env=_env, target=_target, frames=_frames,
        torchfrag=["algo=sac_mujoco", f"env={_env}", f"algo.total_frames={_frames}"],
        cleanrl="sac_continuous_action.py (benchmarks/sac_peers.py)",
        torchrl="sota-implementations/sac/sac.py (benchmarks/sac_peers.py)",
        own_peers=True, sac_peers_args=["--env", _env, "--frames", str(_frames)])

_LEARN_FPS_RE = re.compile(r"learn_fps=([0-9.eE+-]+)")
_STEP_RE = re.compile(r"global_step=(\d+)")
_RET_RE = re.compile(r"episodic_return=\[?\s*([-+0-9.eE]+)")
_EPS_RE = re.compile(r"episodes=(\d+)")


def window_mean(values: Sequence[float], window: int) -> float:
    """Mean of the last ``window`` values (of all when fewer)."""
    tail = list(values)[-window:]
    return sum(tail) / len(tail)


# -- sources of the peers' scripts (copied at run time into the cache, never into git) ------------
def _copy_tree(src: str, rel: str, dst: str) -> None:
    """Copies ``rel`` (a folder) of a checkout or a bare git directory ``src`` into ``dst``."""
    if os.path.isdir(os.path.join(src, rel)):
        shutil.copytree(os.path.join(src, rel), os.path.join(dst, rel), dirs_exist_ok=True)
        return
    names = subprocess.run(["git", f"--git-dir={src}", "ls-tree", "-r", "--name-only", "HEAD", rel],
                           check=True, capture_output=True, text=True).stdout.split()
    if not names:
        raise FileNotFoundError(f"{rel} is not in {src}")
    for name in names:
        data = subprocess.run(["git", f"--git-dir={src}", "show", f"HEAD:{name}"], check=True,
                              capture_output=True).stdout
        os.makedirs(os.path.dirname(os.path.join(dst, name)), exist_ok=True)
        with open(os.path.join(dst, name), "wb") as f:
            f.write(data)


def _git_head(src: str) -> str:
    git = ["git", f"--git-dir={src}"] if not os.path.isdir(os.path.join(src, ".git")) else ["git", "-C", src]
    proc = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
    return proc.stdout.strip() or "unknown"


def prepare_cleanrl(cache: str, source: str | None, extra: Sequence[str]) -> tuple[str, str, str]:
    """CleanRL's scripts in ``cache/cleanrl`` and its venv; returns (python, folder, version)."""
    folder = os.path.join(cache, "cleanrl")
    venv = os.path.join(cache, "cleanrl-venv")
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        subprocess.run([sys._base_executable, "-m", "venv", venv], check=True)  # noqa: SLF001
    marker = os.path.join(venv, "torchfrag-pins.txt")
    pins = "\n".join([*CLEANRL_PINS, *extra])
    if not os.path.exists(marker) or open(marker).read() != pins:
        subprocess.run([py, "-m", "pip", "install", "-q", *CLEANRL_PINS, *extra], check=True)
        with open(marker, "w") as f:
            f.write(pins)
    # The same torch build for every system: torchfrag's, after the venv's own packages.
    import torch

    site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    with open(os.path.join(site, "zz_host_torch.pth"), "w") as f:
        f.write(os.path.dirname(os.path.dirname(torch.__file__)) + "\n")
    if source:
        for rel in ("cleanrl", "cleanrl_utils"):
            _copy_tree(source, rel, folder)
        version = f"git {_git_head(source)}"
    else:  # the PyPI package ships the scripts
        dl = os.path.join(cache, "cleanrl-pypi")
        subprocess.run([py, "-m", "pip", "download", "-q", "--no-deps", "-d", dl, "cleanrl"], check=True)
        import zipfile

        wheels = sorted(glob.glob(os.path.join(dl, "cleanrl-*.whl")))
        if not wheels:  # PyPI's newest cleanrl (0.4.8) is an sdist of the old gym-era scripts
            got = ", ".join(sorted(os.listdir(dl))) or "nothing"
            raise RuntimeError(f"pip found no cleanrl wheel on the package index (got {got}); pass "
                               "--cleanrl with a CleanRL checkout or git directory")
        wheel = wheels[-1]
        zipfile.ZipFile(wheel).extractall(folder)
        version = os.path.basename(wheel)
    return py, folder, version


def prepare_torchrl(cache: str, source: str) -> tuple[str, str]:
    """TorchRL's sota-implementations in ``cache/torchrl``; returns (folder, version)."""
    folder = os.path.join(cache, "torchrl")
    _copy_tree(source, "sota-implementations/dqn", folder)
    _copy_tree(source, "sota-implementations/ppo", folder)
    return folder, f"git {_git_head(source)}"


# -- one run -------------------------------------------------------------------------------------
_PIN = "import os, sys; os.sched_setaffinity(0, {int(c) for c in sys.argv[1].split(',')}); " \
       "os.execvp(sys.argv[2], sys.argv[2:])"


def pinned(cmd: Sequence[str], cpus: Sequence[int]) -> list[str]:
    """``cmd`` run on ``cpus`` only: a small Python launcher sets the affinity, then execs ``cmd``
    (what ``taskset -c`` does, without needing it; no ``preexec_fn``, unsafe beside threads).

    Example:
        >>> import sys
        >>> from benchmarks.time_to_solve import pinned
        >>> pinned(["echo", "hi"], [2, 3])[-3:]
        ['2,3', 'echo', 'hi']
    """
    return [sys.executable, "-c", _PIN, ",".join(str(int(c)) for c in cpus), *cmd]


class RunWatch:
    """Launches one training process, follows its training returns, stops it at the target."""

    def __init__(self, cmd: list[str], cwd: str, target: float, window: int, max_seconds: float,
                 csv_glob: str | None = None, cpus: Sequence[int] | None = None) -> None:
        self.cmd, self.cwd, self.target, self.window = cmd, cwd, target, window
        self.cpus = sorted(cpus) if cpus else None
        self.max_seconds, self.csv_glob = max_seconds, csv_glob
        self.returns: deque[float] = deque(maxlen=window)
        self.curve: list[tuple[float, int, float]] = []
        self.solved_at: tuple[float, int] | None = None
        self.step = 0
        self.learn_fps: float | None = None
        self.tail: deque[str] = deque(maxlen=30)
        self._lock = threading.Lock()

    def _add(self, t: float, step: int, values: Sequence[float]) -> None:
        with self._lock:
            self.step = max(self.step, step)
            self.returns.extend(values)
            mean = window_mean(self.returns, self.window)
            self.curve.append((round(t, 3), step, mean))
            if self.solved_at is None and len(self.returns) == self.window and mean >= self.target:
                self.solved_at = (t, step)

    def _read_stdout(self, proc: subprocess.Popen, t0: float) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.tail.append(line.rstrip())
            learn = _LEARN_FPS_RE.search(line)
            if learn:
                self.learn_fps = float(learn.group(1))
            ret, step = _RET_RE.search(line), _STEP_RE.search(line)
            if ret and step:
                eps = _EPS_RE.search(line)
                n = int(eps.group(1)) if eps else 1
                self._add(time.monotonic() - t0, int(step.group(1)), [float(ret.group(1))] * n)

    def _poll_csv(self, t0: float, seen: dict[str, int]) -> None:
        for path in glob.glob(self.csv_glob or "", recursive=True):
            try:
                with open(path) as f:
                    rows = [r.strip().split(",") for r in f if r.strip()]
            except OSError:
                continue
            for row in rows[seen.get(path, 0):]:
                try:
                    self._add(time.monotonic() - t0, int(float(row[0])), [float(row[1])])
                except (ValueError, IndexError):
                    pass
            seen[path] = len(rows)

    def run(self, env: dict[str, str]) -> dict[str, Any]:
        """Runs to the target, the process's end or ``max_seconds``; returns the record."""
        t0 = time.monotonic()
        cmd = pinned(self.cmd, self.cpus) if self.cpus else self.cmd
        proc = subprocess.Popen(cmd, cwd=self.cwd, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, bufsize=1, start_new_session=True)
        reader = threading.Thread(target=self._read_stdout, args=(proc, t0), daemon=True)
        reader.start()
        seen: dict[str, int] = {}
        stopped = "exited"
        try:
            while proc.poll() is None:
                if self.csv_glob:
                    self._poll_csv(t0, seen)
                if self.solved_at is not None:
                    stopped = "target"
                    break
                if time.monotonic() - t0 > self.max_seconds:
                    stopped = "time limit"
                    break
                time.sleep(0.2)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            reader.join(timeout=5)
        if self.csv_glob:
            self._poll_csv(t0, seen)
        elapsed = time.monotonic() - t0
        seconds, frames = self.solved_at if self.solved_at else (None, None)
        return {"seconds_to_target": seconds, "frames_to_target": frames,
                "fps": (frames / seconds) if seconds else (self.step / elapsed if elapsed else None),
                "learn_fps": self.learn_fps, "wall_seconds": elapsed, "last_step": self.step, "stopped": stopped,
                "returncode": proc.returncode, "curve": self.curve, "cpus": self.cpus,
                "log_tail": list(self.tail)[-8:] if self.solved_at is None else []}


# -- the torchfrag worker --------------------------------------------------------------------------
def torchfrag_worker(overrides: list[str]) -> None:
    """Trains the composed config as ``torchfrag.train`` does, printing each iteration's episodes."""
    from omegaconf import OmegaConf

    from torchfrag.algos import factory_from_config
    from torchfrag.algos.loop import env_fragment
    from torchfrag.graph import capture
    from torchfrag.runtime import run
    from torchfrag.train import compose_config

    cfg = compose_config(overrides)
    algo = OmegaConf.to_container(cfg.algo, resolve=True)
    factory = factory_from_config(algo, cfg.env.id, seed=int(cfg.seed), env_options=dict(cfg.env.options))
    pcfg = factory.config()
    loop = factory()
    rollout = env_fragment(loop)
    iterations = pcfg.iterations
    start: list[tuple[float, int]] = []  # the loop has finished its random warm-up when it is built

    def hook(i: int, metrics: Any, graph: Any) -> bool:
        if not start:
            start.append((time.perf_counter(), rollout.frames))
        ep = rollout.stats.pop()
        if ep:
            sys.stdout.write(f"global_step={rollout.frames}, episodes={ep['episodes']}, "
                             f"episodic_return={ep['episode_return']}\n")
            if rollout.frames > start[0][1]:  # so far: a run stopped from outside still reports it
                sys.stdout.write(f"learn_fps={(rollout.frames - start[0][1]) / (time.perf_counter() - start[0][0])}\n")
            sys.stdout.flush()
        return False

    run(capture(loop), iterations=iterations, hooks=[hook])
    if start and rollout.frames > start[0][1]:
        sys.stdout.write(f"learn_fps={(rollout.frames - start[0][1]) / (time.perf_counter() - start[0][0])}\n")
    loop.close()


# -- the benchmark ---------------------------------------------------------------------------------
def _command(system: str, task: Task, seed: int, paths: dict[str, Any], run_dir: str
             ) -> tuple[list[str], str, str | None, dict[str, str]] | None:
    if system == "torchfrag":
        return ([sys.executable, "-m", "benchmarks.time_to_solve", "--worker", "--",
                 *task.torchfrag, f"seed={seed}"], os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                None, {})
    if task.own_peers:
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        return ([sys.executable, "-m", "benchmarks.sac_peers", "--style", system, "--seed", str(seed),
                 *task.sac_peers_args], here, None, {})
    if system == "cleanrl":
        if task.cleanrl is None or "cleanrl" not in paths:
            return None
        py, folder = paths["cleanrl"]
        # the scripts import cleanrl_utils from the checkout's root
        return ([py, os.path.join(folder, task.cleanrl), "--seed", str(seed), *task.cleanrl_args],
                run_dir, None, {"PYTHONPATH": folder})
    if task.torchrl is None or "torchrl" not in paths:
        return None
    folder = paths["torchrl"]
    script = os.path.join(folder, task.torchrl)
    # TorchRL's scripts take no seed: every TorchRL run is unseeded (noted in the results)
    return ([sys.executable, script, "logger.backend=csv", "logger.video=False", f"hydra.run.dir={run_dir}",
             *task.torchrl_args], os.path.dirname(script), os.path.join(run_dir, "**", task.torchrl_csv), {})


def _run_dir(cache: str, task_name: str, system: str, seed: int) -> str:
    run_dir = os.path.join(cache, "runs", f"{task_name}_{system}_s{seed}_{int(time.time())}")
    os.makedirs(run_dir, exist_ok=True)
    return run_dir


def split_cpus(n: int, cpus: Sequence[int] | None = None) -> list[list[int]]:
    """``n`` disjoint, equal sets of this process's CPUs (the remainder unused); with fewer CPUs
    than ``n``, every run gets all of them (the scheduler shares them equally: pinning three runs
    round-robin on two CPUs gave two of them half a CPU each and the third a whole one).

    Example:
        >>> from benchmarks.time_to_solve import split_cpus
        >>> split_cpus(3, range(16))
        [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14]]
        >>> split_cpus(3, [0, 1])
        [[0, 1], [0, 1], [0, 1]]
    """
    cpus = sorted(cpus if cpus is not None else os.sched_getaffinity(0))
    if n < 1 or not cpus:
        raise ValueError(f"split_cpus: need n >= 1 and at least one CPU, got n={n}, cpus={cpus}")
    if len(cpus) < n:
        return [list(cpus) for _ in range(n)]
    share = len(cpus) // n
    return [cpus[i * share:(i + 1) * share] for i in range(n)]


def sac_task(env_id: str, target: float, frames: int = 1_000_000, device: str = "cpu") -> Task:
    """SAC on any continuous-action env: torchfrag's ``algo=sac_mujoco`` preset against the
    CleanRL- and TorchRL-style peers of ``benchmarks/sac_peers.py``, networks on ``device``.

    Example:
        >>> from benchmarks.time_to_solve import sac_task
        >>> sac_task("Pendulum-v1", -1000.0, 20_000, "cuda").torchfrag[-1]
        'algo.device=cuda'
    """
    return Task(env=env_id, target=float(target), frames=int(frames),
                torchfrag=["algo=sac_mujoco", f"env={env_id}", f"algo.total_frames={int(frames)}",
                           f"algo.device={device}"],
                cleanrl="sac_continuous_action.py (benchmarks/sac_peers.py)",
                torchrl="sota-implementations/sac/sac.py (benchmarks/sac_peers.py)", own_peers=True,
                sac_peers_args=["--env", env_id, "--frames", str(int(frames)), "--device", device])


def benchmark(tasks: list[str], seeds: list[int], systems: list[str], window: int, max_seconds: float,
              cache: str, cleanrl_src: str | None, torchrl_src: str | None,
              on_record: Callable[[dict[str, Any]], None] | None = None,
              parallel: bool = False) -> dict[str, Any]:
    """Runs every (task, seed, system), alternating systems within each seed.

    ``on_record`` gets the result so far after every run (``main`` writes it to
    the JSON file, so a run cut short keeps what it measured). ``parallel``:
    the systems of one seed run at the same time instead, each process pinned
    to its own equal share of the CPUs (:func:`split_cpus`) with that many
    threads (a machine with an accelerator they all share).
    """
    os.makedirs(cache, exist_ok=True)
    paths: dict[str, Any] = {}
    versions: dict[str, str] = {}
    notes: list[str] = []
    external = [t for t in tasks if not TASKS[t].own_peers]
    if "cleanrl" in systems and external:
        extra = sorted({x for t in tasks for x in TASKS[t].cleanrl_extra})
        py, folder, versions["cleanrl"] = prepare_cleanrl(cache, cleanrl_src, extra)
        paths["cleanrl"] = (py, folder)
    if "torchrl" in systems and external:
        if torchrl_src:
            paths["torchrl"], versions["torchrl"] = prepare_torchrl(cache, torchrl_src)
        else:
            notes.append("torchrl skipped: give --torchrl (a checkout or git directory of pytorch/rl)")
    import torchrl

    import torchfrag

    versions["torchfrag"] = getattr(torchfrag, "__version__", "dev")
    versions["torchrl_package"] = torchrl.__version__
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
           "WANDB_MODE": "disabled"}
    env.pop("PYTHONPATH", None)
    records: dict[str, dict[str, list[dict[str, Any]]]] = {}
    lock = threading.Lock()
    result = {"records": records, "versions": versions, "notes": notes, "window": window,
              "max_seconds": max_seconds, "seeds": seeds, "parallel": parallel,
              "tasks": {t: {"env": TASKS[t].env, "target": TASKS[t].target} for t in tasks}}
    for task_name in tasks:
        task = TASKS[task_name]
        records[task_name] = {s: [] for s in systems}
        if task.own_peers:
            notes.append(f"{task_name}: cleanrl/torchrl are benchmarks/sac_peers.py, their structures and "
                         f"defaults re-written here (not their scripts)")
        elif task.torchrl is None and "torchrl" in systems:
            notes.append(f"{task_name}: torchrl n/a - {task.torchrl_missing}")
        elif "torchrl" in paths:
            notes.append(f"{task_name}: TorchRL's script takes no seed, its runs are unseeded; its returns "
                         f"are the logged per-batch means of the episodes finished in each batch")
        for seed in seeds:
            runs = [(system, _command(system, task, seed, paths, _run_dir(cache, task_name, system, seed)))
                    for system in systems]
            runs = [(system, cmd) for system, cmd in runs if cmd is not None]
            cpu_sets = split_cpus(len(runs)) if parallel else [None] * len(runs)

            def one(system: str, cmd: tuple, cpus: list[int] | None, seed: int = seed,
                    task_name: str = task_name, task: Task = task, n_runs: int = len(runs)) -> None:
                argv, cwd, csv_glob, extra_env = cmd
                logger.info("%s seed %d%s: %s", task_name, seed, f" on CPUs {cpus}" if cpus else "",
                            " ".join(argv))
                # One thread per CPU of its own share (1 where the runs share every CPU).
                n = str(max(1, min(len(cpus), len(os.sched_getaffinity(0)) // n_runs))) if cpus else ""
                threads = {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n} if cpus else {}
                load_before = os.getloadavg()[0]
                rec = RunWatch(argv, cwd, task.target, window, max_seconds, csv_glob,
                               cpus=cpus).run({**env, **extra_env, **threads})
                rec["seed"] = seed
                rec["load_avg_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]  # before, after
                with lock:
                    records[task_name][system].append(rec)
                    logger.info("%s %s seed %d: %s s to %.0f (%s frames, %s fps, learning %s fps), stopped: %s",
                                task_name, system, seed, rec["seconds_to_target"], task.target,
                                rec["frames_to_target"], rec["fps"], rec["learn_fps"], rec["stopped"])
                    if on_record is not None:
                        on_record(result)

            if parallel:  # side by side, each process on its own CPUs
                workers = [threading.Thread(target=one, args=(system, cmd, cpus))
                           for (system, cmd), cpus in zip(runs, cpu_sets)]
                for w in workers:
                    w.start()
                for w in workers:
                    w.join()
            else:  # one after the other, alternating systems within each seed
                for system, cmd in runs:
                    one(system, cmd, None)
    return result


def _median_bounds(recs: list[dict[str, Any]]) -> tuple[float, float]:
    """Lower and upper bounds on the median seconds to target over ``recs``.

    A run that never reached the target took longer than it ran: its seconds
    lie between its wall seconds and infinity. Both bounds are equal (the exact
    median) when every run solved.
    """
    low = [float(r["seconds_to_target"] or r["wall_seconds"]) for r in recs]
    high = [float(r["seconds_to_target"]) if r["seconds_to_target"] else float("inf") for r in recs]
    return median(low), median(high)


def summarize(result: dict[str, Any]) -> tuple[list[list[Any]], str]:
    """Table rows: task, system, median seconds to target (solved/ran), frames/s, torchfrag's ratio.

    Unsolved runs are never dropped from a median (that would report the lucky
    seeds only): they count as "longer than they ran". A median is shown
    exactly when that settles it (every run solved, or the unsolved runs ran
    longer than the median); otherwise as ``>= s`` for a peer (the lower
    bound) and ``<= s`` for torchfrag (the upper bound, ``not reached`` when
    infinite), and the ratio ``torchfrag / peer`` is then the upper bound
    ``<= x``: torchfrag's upper bound over the peer's lower bound.
    """
    rows = []
    for task, per_system in result["records"].items():
        ours = _median_bounds(per_system["torchfrag"]) if per_system.get("torchfrag") else None
        for system, recs in per_system.items():
            if not recs:
                continue
            solved = sum(1 for r in recs if r["seconds_to_target"])
            low, high = _median_bounds(recs)
            exact = low == high  # every run solved, or the unsolved ones all lie above the median
            if exact:
                shown = f"{low:.1f}"
            elif system == "torchfrag":
                shown = f"<= {high:.1f}" if high != float("inf") else "not reached"
            else:
                shown = f">= {low:.1f}"
            fps = median([r["fps"] for r in recs if r["fps"]])
            learn = [r["learn_fps"] for r in recs if r.get("learn_fps")]
            ratio = "-"
            if system != "torchfrag" and ours is not None and ours[1] != float("inf"):
                value = fmt_ratio(ours[1] / low)
                ratio = value if exact and ours[0] == ours[1] else f"<= {value}"
            ours_learn = [r["learn_fps"] for r in per_system.get("torchfrag", []) if r.get("learn_fps")]
            if system != "torchfrag" and ratio == "-" and learn and ours_learn:
                ratio = f"{fmt_ratio(median(learn) / median(ours_learn))} (time per learning frame)"
            rows.append([task, system, shown, f"{solved}/{len(recs)}", f"{fps:.0f}",
                         f"{median(learn):.0f}" if learn else "-", ratio])
    text = print_table(["task", "system", "median s to target", "solved", "frames/s",
                        "learning frames/s", "torchfrag / system"], rows, title="Wall-clock seconds to the target training return")
    return rows, text


def merge(paths: Sequence[str]) -> dict[str, Any]:
    """One result from several runs of this benchmark (different tasks, or more seeds)."""
    out: dict[str, Any] = {"records": {}, "versions": {}, "notes": [], "tasks": {}, "seeds": [],
                           "merged_from": [os.path.basename(p) for p in paths]}
    for path in paths:
        with open(path) as f:
            part = json.load(f)
        out["window"], out["max_seconds"] = part["window"], part["max_seconds"]
        out["versions"].update(part["versions"])
        out["tasks"].update(part["tasks"])
        out["notes"] += [n for n in part["notes"] if n not in out["notes"]]
        out["seeds"] = sorted(set(out["seeds"]) | set(part["seeds"]))
        for task, per_system in part["records"].items():
            for system, recs in per_system.items():
                out["records"].setdefault(task, {}).setdefault(system, []).extend(recs)
    return out


def plot(result: dict[str, Any], path: str) -> None:
    """Mean training return against wall-clock seconds, one panel per task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = list(result["records"])
    fig, axes = plt.subplots(1, len(tasks), figsize=(6 * len(tasks), 4.2), squeeze=False)
    colors = {"torchfrag": "C0", "cleanrl": "C1", "torchrl": "C2"}
    for ax, task in zip(axes[0], tasks):
        for system, recs in result["records"][task].items():
            for k, r in enumerate(recs):
                if r["curve"]:
                    xs = [c[0] for c in r["curve"]]
                    ys = [c[2] for c in r["curve"]]
                    ax.plot(xs, ys, color=colors[system], lw=1.2, alpha=0.85,
                            label=system if k == 0 else None)
        target = result["tasks"][task]["target"]
        if target not in (float("inf"), float("-inf")):  # a frames/s task has no target to draw
            ax.axhline(target, color="k", ls=":", lw=1, label="target")
        ax.set_title(f"{task} ({result['tasks'][task]['env']})")
        ax.set_xlabel("wall-clock seconds (from process start)")
        ax.set_ylabel(f"mean return, last {result['window']} training episodes")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", nargs="+", default=["ppo-cartpole", "dqn-cartpole"], choices=sorted(TASKS))
    p.add_argument("--seeds", nargs="+", type=int, default=None, help="default 0 1 2 (with --algo: 0)")
    p.add_argument("--systems", nargs="+", default=list(SYSTEMS), choices=SYSTEMS)
    p.add_argument("--window", type=int, default=20, help="training episodes in the mean (default 20)")
    p.add_argument("--max-seconds", type=float, default=1800.0, help="per run (default 1800)")
    p.add_argument("--cache", default=DEFAULT_CACHE, help=f"peers' scripts and venv (default {DEFAULT_CACHE})")
    p.add_argument("--cleanrl", default=None, help="CleanRL checkout or git directory (default: PyPI)")
    p.add_argument("--torchrl", default=None, help="pytorch/rl checkout or git directory")
    p.add_argument("--tag", default="")
    p.add_argument("--merge", nargs="+", default=None, metavar="TAG",
                   help="merge results/time_to_solve_<TAG>.json files (earlier runs) into one table/plot")
    p.add_argument("--algo", choices=["sac"], default=None,
                   help="one ad-hoc task instead of --tasks: this algorithm on --env to --target")
    p.add_argument("--env", default="HalfCheetah-v5", help="with --algo (default HalfCheetah-v5)")
    p.add_argument("--target", type=float, default=3000.0, help="with --algo (default 3000)")
    p.add_argument("--frames", type=int, default=1_000_000, help="with --algo: training length")
    p.add_argument("--device", default="cpu", help="with --algo: where every system's networks run")
    p.add_argument("--torchfrag-args", nargs="+", default=[], metavar="KEY=VALUE",
                   help="with --algo: more overrides for torchfrag's run (e.g. algo.matmul_dtype=bfloat16)")
    p.add_argument("--parallel", action="store_true",
                   help="run the systems of a seed side by side, each on its own share of the CPUs")
    p.add_argument("--out", default=None, help="folder for the JSON and PNG (default benchmarks/results)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("overrides", nargs="*", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        torchfrag_worker(args.overrides)
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    tasks = args.tasks
    if args.seeds is None:
        args.seeds = [0] if args.algo else [0, 1, 2]
    if args.algo:
        name = f"time_to_solve_{args.algo}_{args.env}" + (f"_{args.tag}" if args.tag else "")
        task_name = f"{args.algo}-{args.env}"
        TASKS[task_name] = sac_task(args.env, args.target, args.frames, args.device)
        TASKS[task_name].torchfrag.extend(args.torchfrag_args)
        tasks = [task_name]
    else:
        name = "time_to_solve" + (f"_{args.tag}" if args.tag else "")
    folder = os.path.abspath(args.out) if args.out else RESULTS_DIR
    extra = {"device": _device_info(args.device)} if args.algo else {}

    def save_partial(partial: dict[str, Any]) -> None:
        write_json(name, {**partial, **extra, "partial": True}, folder)

    if args.merge:
        result = merge([os.path.join(RESULTS_DIR, f"time_to_solve_{t}.json") for t in args.merge])
    else:
        result = benchmark(tasks, args.seeds, args.systems, args.window, args.max_seconds,
                           args.cache, args.cleanrl, args.torchrl, on_record=save_partial,
                           parallel=args.parallel)
    rows, text = summarize(result)
    for note in result["notes"]:
        print("note:", note)
    result["table"] = text
    path = write_json(name, {**result, **extra}, folder)
    plot(result, os.path.join(folder, f"{name}.png"))
    print(f"wrote {path} and {name}.png")


def _device_info(device: str) -> dict[str, Any]:
    """The device the networks ran on, named (a GPU's model), for the results."""
    import torch

    info: dict[str, Any] = {"device": device}
    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        info["name"] = torch.cuda.get_device_name(torch.device(device))
    return info


if __name__ == "__main__":
    main()
