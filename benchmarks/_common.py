"""Timing, tables, JSON and plots shared by the benchmarks.

The machine the benchmarks run on is shared and noisy, so every comparison
is made in one run: the systems are measured in alternating order (reversed on
every other repeat) and reported as medians, next to the peer's figure and the
ratio.

Example:
    >>> from benchmarks._common import alternate, rate
    >>> results = alternate({"a": lambda: rate(lambda: 10, 0.01)}, repeats=3)
    >>> len(results["a"])
    3
"""
from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

#: Where JSON and PNG results go: ``benchmarks/results/``, or ``$TORCHFRAG_RESULTS_DIR`` when set
#: (the GPU check writes every figure of a run into its own output folder this way).
RESULTS_DIR = os.environ.get("TORCHFRAG_RESULTS_DIR") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "results")


def rate(step: Callable[[], int], min_time: float, warmup: int = 3) -> float:
    """Calls ``step`` (which returns how many frames it produced) for at least
    ``min_time`` seconds after ``warmup`` calls; returns frames per second."""
    for _ in range(warmup):
        step()
    frames = 0
    start = time.perf_counter()
    while True:
        frames += step()
        elapsed = time.perf_counter() - start
        if elapsed >= min_time:
            return frames / elapsed


def alternate(systems: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Measures every system ``repeats`` times, alternating the order.

    Args:
        systems: Name -> a callable that runs one measurement and returns a rate.
        repeats: Measurements per system.

    Returns:
        Name -> list of rates, one per repeat.
    """
    out: dict[str, list[float]] = {name: [] for name in systems}
    names = list(systems)
    for r in range(repeats):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            out[name].append(systems[name]())
    return out


def process_cpu() -> float:
    """CPU seconds of this process, all threads (not its children)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class Runner:
    """One system under one configuration, built for one measurement.

    ``run(seconds)`` returns ``(env steps per second, CPU microseconds per env
    step)``; the CPU figure is ``None`` where the work happens in other
    processes (Gymnasium's AsyncVectorEnv).

    Args:
        steps: Advances the system once; returns how many env steps that made.
        close: Releases the system (threads, processes).
        in_process: Whether this process's CPU time covers the system's work.
    """

    def __init__(self, steps: Callable[[], int], close: Callable[[], None],
                 in_process: bool = True) -> None:
        self._steps = steps
        self.close = close
        self._in_process = in_process

    def run(self, seconds: float) -> tuple[float, float | None]:
        """Warms up briefly, then calls the step function until ``seconds`` have passed."""
        warm = time.perf_counter()
        while time.perf_counter() - warm < min(0.3, seconds / 4):  # resets, cold caches
            self._steps()
        done = 0
        cpu0 = process_cpu()
        start = time.perf_counter()
        while True:
            done += self._steps()
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                cpu = (process_cpu() - cpu0) / done * 1e6 if self._in_process else None
                return done / elapsed, cpu


def pool_stepper(pool: Any, actions: Sequence[Any], mode: str) -> Callable[[], int]:
    """The step function of one throughput sample for a pool-like env (torchfrag's or EnvPool's).

    ``sync`` resets the pool and steps all its envs per call; ``async`` starts it with
    ``async_reset`` and per call receives one batch and sends the next actions to the envs it
    came from. The actions cycle through ``actions`` (one row per env each), cut to the batch.

    Args:
        pool: Anything with EnvPool's API (``reset``/``step`` and ``async_reset``/``recv``/``send``).
        actions: Action batches for all envs, cycled through.
        mode: ``"sync"`` or ``"async"``.

    Returns:
        A callable that advances the pool once and returns how many env steps that was.

    Example:
        >>> from benchmarks._common import pool_stepper
        >>> from torchfrag.envs import make
        >>> pool = make("CartPole-v1", num_envs=4, batch_size=2)
        >>> step = pool_stepper(pool, [[0, 1, 0, 1]], "async")
        >>> step()
        2
        >>> pool.close()
    """
    if mode not in ("sync", "async"):
        raise ValueError(f"mode must be 'sync' or 'async', got {mode!r}")
    k = [0]
    if mode == "sync":
        pool.reset()
        num = len(actions[0])

        def step() -> int:
            k[0] += 1
            pool.step(actions[k[0] % len(actions)])
            return num
        return step
    pool.async_reset()

    def step_async() -> int:
        k[0] += 1
        *_, info = pool.recv()
        ids = info["env_id"]
        pool.send(actions[k[0] % len(actions)][:len(ids)], ids)
        return len(ids)
    return step_async


def measure_isolated(makers: dict[str, Callable[[], Runner]], rounds: int, seconds: float
                     ) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Measures each system ``rounds`` times, alone, in alternating order.

    Every measurement builds its system, runs it and closes it before the next
    one starts, so no other system's threads are alive while it is timed (an
    idle pool with envs in flight, or spinning workers, would otherwise take
    CPU from the one being measured and show up in its CPU figure). The order
    rotates every round and is reversed on odd rounds.

    Args:
        makers: Name -> a callable building a fresh :class:`Runner`.
        rounds: Measurements per system.
        seconds: Duration of each measurement.

    Returns:
        ``(rates, cpus)``: name -> steps/s of each round, and name -> CPU
        microseconds per step of each round (empty for out-of-process systems).

    Example:
        >>> from benchmarks._common import Runner, measure_isolated
        >>> rates, cpus = measure_isolated({"x": lambda: Runner(lambda: 1, lambda: None)}, 2, 0.01)
        >>> len(rates["x"]), len(cpus["x"])
        (2, 2)
    """
    names = list(makers)
    rates: dict[str, list[float]] = {name: [] for name in names}
    cpus: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        if r % 2:
            order = order[::-1]
        for name in order:
            runner = makers[name]()
            try:
                rate_, cpu = runner.run(seconds)
            finally:
                runner.close()
            rates[name].append(rate_)
            if cpu is not None:
                cpus[name].append(cpu)
    return rates, cpus


def isolated_config(makers: dict[str, Callable[[], Runner]], rounds: int, seconds: float,
                    **label: Any) -> dict[str, Any]:
    """One configuration of a throughput table: :func:`measure_isolated`, then medians.

    Args:
        makers: Name -> a callable building a fresh :class:`Runner`.
        rounds: Measurements per system.
        seconds: Duration of each measurement.
        **label: What the row is (env id, number of envs, mode, threads): copied into the row.

    Returns:
        The label, ``median_steps_per_s`` and ``median_cpu_us_per_step`` (name -> median; CPU
        only for in-process systems) and the samples they were taken from.

    Example:
        >>> from benchmarks._common import Runner, isolated_config
        >>> row = isolated_config({"x": lambda: Runner(lambda: 1, lambda: None)}, 2, 0.01, task="t")
        >>> row["task"], sorted(row["median_steps_per_s"])
        ('t', ['x'])
    """
    rates, cpus = measure_isolated(makers, rounds, seconds)
    return {**label,
            "median_steps_per_s": {k: median(v) for k, v in rates.items()},
            "median_cpu_us_per_step": {k: median(v) for k, v in cpus.items() if v},
            "samples_steps_per_s": rates, "samples_cpu_us_per_step": cpus}


def median(values: Sequence[float]) -> float:
    """Median, or NaN for an empty sequence."""
    return statistics.median(values) if values else float("nan")


def fmt_rate(x: float | None) -> str:
    """A rate as a short human string (``12.3k``, ``4.56M``)."""
    if x is None or x != x:
        return "-"
    for div, unit in ((1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:.3g}{unit}"
    return f"{x:.3g}"


def fmt_ratio(x: float | None) -> str:
    """A ratio as ``2.31x`` (``-`` when undefined)."""
    return "-" if x is None or x != x else f"{x:.2f}x"


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], title: str = "") -> str:
    """Prints (and returns) a plain-text table with aligned columns."""
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    if title:
        lines.append(title)
    for k, row in enumerate(cells):
        lines.append("  ".join(c.rjust(w) for c, w in zip(row, widths)))
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    text = "\n".join(lines)
    print(text, flush=True)
    return text


#: Packages whose versions a result records: the peers a figure is a ratio against, and our own stack.
PEER_PACKAGES = ("envpool", "torchrl", "tensordict", "torch", "gymnasium", "ale-py", "mujoco", "dm-control",
                 "minigrid", "box2d")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or the platform's processor string."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _versions() -> dict[str, str]:
    from importlib import metadata

    found = {}
    for name in PEER_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def machine_info() -> dict[str, Any]:
    """Where and when the numbers were taken: date, machine, load and the peers' versions.

    The results page of the docs (``benchmarks/results_index.py``) shows these beside every figure.
    """
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    return {
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "time": time.strftime("%Y-%m-%d %H:%M:%S"),
        "loadavg": load,
        "versions": _versions(),
    }


def write_json(name: str, payload: dict[str, Any], folder: str | None = None) -> str:
    """Writes ``<folder>/<name>.json`` (default: ``RESULTS_DIR``, read when called) and returns its path."""
    folder = folder or RESULTS_DIR  # at call time: tests point RESULTS_DIR at a temporary folder
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.json")
    payload = {"machine": machine_info(), **payload}
    with open(path, "w") as f:
        json.dump(payload, f, indent=2, default=float)
    return path


def bar_plot(name: str, groups: Sequence[str], series: dict[str, Sequence[float]],
             ylabel: str, title: str, log: bool = True) -> str:
    """Grouped bar chart ``benchmarks/results/<name>.png``; returns its path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    os.makedirs(RESULTS_DIR, exist_ok=True)
    x = np.arange(len(groups))
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(groups) + 2), 4.5))
    for k, (label, values) in enumerate(series.items()):
        vals = [v if v == v and v is not None else 0.0 for v in values]
        ax.bar(x + (k - (len(series) - 1) / 2) * width, vals, width, label=label)
    ax.set_xticks(x)
    ax.set_xticklabels(groups, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if log:
        ax.set_yscale("log")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    path = os.path.join(RESULTS_DIR, f"{name}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
