"""The index of ``benchmarks/results/``: which benchmark wrote each file, and the headline figures.

Every file in ``benchmarks/results/`` is listed here with the command that writes it (a test checks that
the folder holds nothing else and misses nothing listed). From the same JSON files this module renders

* the docs' results page (``docs/results.md``, written when the docs are built): per benchmark, its
  figures, plot, date, machine, load and the peers' versions;
* the README's headline table, between the ``<!-- headline:start -->`` / ``<!-- headline:end -->``
  markers, so the README and the docs can never disagree (a test checks the README against it).

Run ``python -m benchmarks.results_index --readme`` after a benchmark run to refresh the README's table.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
README = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "README.md")
START, END = "<!-- headline:start -->", "<!-- headline:end -->"


@dataclass(frozen=True)
class Headline:
    """One row of the headline table: what was compared, ours, the peer's, the ratio and the goal."""

    what: str
    ours: str
    peer: str
    ratio: str
    goal: str
    when: str | None = None
    where: str | None = None


@dataclass(frozen=True)
class Benchmark:
    """One benchmark's current result files and how to read its headline figures from them."""

    stem: str
    command: str
    title: str
    files: tuple[str, ...]
    headlines: Callable[[dict[str, Any]], list[Headline]] | None = None
    extra: dict[str, str] = field(default_factory=dict)

    def load(self) -> dict[str, Any]:
        with open(os.path.join(RESULTS, f"{self.stem}.json")) as f:
            return json.load(f)


def _rate(x: float) -> str:
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}/s"
    return f"{x:.3g}/s"


def _ratio(x: float) -> str:
    return f"**{x:.2f}x**"


def _find(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any]:
    for row in rows:
        if all(row.get(k) == v for k, v in match.items()):
            return row
    raise KeyError(f"no result with {match}")


def _envs(d: dict[str, Any]) -> list[Headline]:
    r = _find(d["records"], env_id="CartPole-v1", num_envs=256, mode="sync")
    m = r["median"]
    return [Headline("CartPole-v1 x256, sync steps/s", _rate(m["torchfrag"]), f"envpool {_rate(m['envpool'])}",
                     _ratio(m["torchfrag"] / m["envpool"]), "10x")]


def _catalog(family: str) -> Callable[[dict[str, Any]], list[Headline]]:
    """Headline of ``benchmarks.catalog --family <family>``: medians over its ids and sizes."""
    def headlines(d: dict[str, Any]) -> list[Headline]:
        recs = d["records"]
        ours = statistics.median(r["median"]["torchfrag"] for r in recs)
        peer = statistics.median(r["median"]["envpool"] for r in recs)
        ids = len({r["env_id"] for r in recs})
        sizes = sorted({r["num_envs"] for r in recs})
        fractions = [r["fraction_of_limit"] for r in recs if r.get("fraction_of_limit")]
        if not fractions:
            return [Headline(f"{family}: {ids} ids x {sizes} envs, sync "
                             "steps/s (medians over the configurations)", _rate(ours),
                             f"envpool {_rate(peer)}", _ratio(d["median_ratio_vs_envpool"]),
                             "1.1x")]
        # The physics limit: the env steps' physics alone, in a plain C++ loop.
        return [Headline(f"{family}: {ids} ids x {sizes} envs, sync steps/s (medians over the "
                         "configurations; share of the physics limit: median, lowest)",
                         f"{_rate(ours)} ({statistics.median(fractions):.0%}, "
                         f"{min(fractions):.0%})",
                         f"envpool {_rate(peer)}", _ratio(d["median_ratio_vs_envpool"]),
                         "1.1x, 85%")]
    return headlines


def _box2d(d: dict[str, Any]) -> list[Headline]:
    """The Box2D catalogue's headline, and CarRacing's (pixels: a different cost) on its own."""
    rows = _catalog("Box2D")(d)
    cars = [r for r in d["records"] if r["env_id"] == "CarRacing-v3"]
    if cars:
        sizes = sorted({r["num_envs"] for r in cars})
        rows.append(Headline(
            f"CarRacing-v3 (96x96x3 pixels): {sizes} envs, sync steps/s (medians)",
            _rate(statistics.median(r["median"]["torchfrag"] for r in cars)),
            f"envpool {_rate(statistics.median(r['median']['envpool'] for r in cars))}",
            _ratio(statistics.median(r["median"]["torchfrag"] / r["median"]["envpool"] for r in cars)),
            "1.1x"))
    return rows


def _atari(d: dict[str, Any]) -> list[Headline]:
    r = _find(d["results"], game="Pong", num_envs=8, mode="async")
    m = r["median_steps_per_s"]
    share = m["torchfrag"] / m["emulation"]
    return [Headline("Pong-v5 x8, async steps/s (share of the emulation limit)",
                     f"{_rate(m['torchfrag'])} ({share:.0%})", f"envpool {_rate(m['envpool'])}",
                     _ratio(m["torchfrag"] / m["envpool"]), "1.15x, 80%")]


def _mujoco(d: dict[str, Any]) -> list[Headline]:
    r = _find(d["results"], task="HalfCheetah-v5", num_envs=32, mode="sync")
    m = r["median_steps_per_s"]
    share = m["torchfrag"] / m["physics"]
    return [Headline("HalfCheetah-v5 x32, sync steps/s (share of the `mj_step` limit)",
                     f"{_rate(m['torchfrag'])} ({share:.0%})", f"envpool {_rate(m['envpool'])}",
                     _ratio(m["torchfrag"] / m["envpool"]), "1.1x, 85%")]


def _torchrl_envs(d: dict[str, Any]) -> list[Headline]:
    c = _find(d["comparisons"], env_id="CartPole-v1", comparison="PoolCollector vs Collector(ParallelEnv), MLP")
    return [Headline("`PoolCollector` vs TorchRL `Collector(ParallelEnv)`, CartPole x64, frames/s",
                     _rate(c["ours_fps"]), f"TorchRL {_rate(c['peer_fps'])}", _ratio(c["ratio"]), "3x")]


def _ppo_vs_torchrl(d: dict[str, Any]) -> list[Headline]:
    peer = d["best_peer"]
    return [Headline("PPO CartPole whole loop, frames/s", _rate(d["median"]["torchfrag"]),
                     f"TorchRL ({peer}) {_rate(d['median'][peer])}", _ratio(d["ratio"]), "2x")]


def _policies(d: dict[str, Any]) -> list[Headline]:
    h = d["headline"]
    m = h["median"]
    return [Headline(f"`actors`, slow env, 1 -> {h['workers']} workers, frames/s",
                     _rate(m[f"slow actors x{h['workers']}"]), f"1 worker {_rate(m['slow actors x1'])}",
                     _ratio(h["slow_speedup"]), "7x")]


def _policies_replay(d: dict[str, Any]) -> list[Headline]:
    r = d["replay"]
    ns = sorted(int(k) for k in r["speedup"])
    top, one = f"apex x{ns[-1]}", f"apex x{ns[0]}"
    return [Headline(f"replay-role DQN (`apex`), slow env, {ns[0]} -> {ns[-1]} actors, frames/s",
                     _rate(r["fps_median"][top]), f"{ns[0]} actor {_rate(r['fps_median'][one])}",
                     _ratio(r["speedup"][str(ns[-1])]), "-")]


def _cluster(d: dict[str, Any]) -> list[Headline]:
    h = d["headline"]
    top = f"actors x{h['hosts']}"
    return [Headline(f"`actors` across simulated hosts (namespaces), slow env, 1 -> {h['hosts']} hosts, frames/s",
                     _rate(statistics.median(h["runs"][top])),
                     f"1 host {_rate(statistics.median(h['runs']['actors x1']))}", _ratio(h["ratio"]), "6.5x")]


def _policies_cartpole(d: dict[str, Any]) -> list[Headline]:
    p = d["cartpole_pair"]
    m = p["fps_median"]
    return [Headline("`actors` x2 vs TorchRL `MultiSyncCollector` x2, PPO CartPole, frames/s",
                     _rate(m["actors x2"]), f"TorchRL {_rate(m['MultiSyncCollector x2'])}",
                     _ratio(p["ratio_fps"]), "1.5x")]


def _seconds(runs: list[dict[str, Any]], cap: float) -> float:
    return statistics.median([r["seconds_to_target"] if r.get("seconds_to_target") is not None else cap
                              for r in runs])


def _learning_fps(task: str, systems: dict[str, list[dict[str, Any]]], names: dict[str, str]) -> Headline:
    """Frames/s after the random warm-up; the ratio is torchfrag's time per frame over the peer's."""
    def fps(runs: list[dict[str, Any]]) -> float:
        return statistics.median([r["learn_fps"] for r in runs if r.get("learn_fps")] or [float("nan")])

    ours = fps(systems["torchfrag"])
    peers = [(names[p], fps(systems[p])) for p in ("cleanrl", "torchrl") if p in systems]
    return Headline(f"{task}: frames/s while learning (median of {len(systems['torchfrag'])} runs)",
                    f"{ours:.0f} frames/s", "; ".join(f"{n} {v:.0f} frames/s" for n, v in peers),
                    " / ".join(_ratio(v / ours) for _, v in peers), "0.5x")


def _time_to_solve(d: dict[str, Any]) -> list[Headline]:
    rows = []
    cap = float(d.get("max_seconds", 600.0))
    names = {"cleanrl": "CleanRL", "torchrl": "TorchRL"}
    for task, systems in d["records"].items():
        target = d["tasks"][task].get("target")
        if target is not None and math.isinf(float(target)):  # a frames/s task (sac-halfcheetah-speed)
            rows.append(_learning_fps(task, systems, names))
            continue
        ours = _seconds(systems["torchfrag"], cap)
        peers, ratios = [], []
        for peer in ("cleanrl", "torchrl"):
            if peer not in systems:
                continue
            theirs = _seconds(systems[peer], cap)
            bound = any(r.get("seconds_to_target") is None for r in systems[peer])
            peers.append(f"{names[peer]} {'>= ' if bound else ''}{theirs:.1f} s")
            ratios.append(("<= " if bound else "") + _ratio(ours / theirs))
        rows.append(Headline(f"{task}: seconds to a training return of {target:g} "
                             f"(median of {len(systems['torchfrag'])} seeds)",
                             f"{ours:.1f} s", "; ".join(peers), " / ".join(ratios), "0.5x"))
    return rows


def _time_to_solve_as(label: str) -> Callable[[dict[str, Any]], list[Headline]]:
    """:func:`_time_to_solve`'s rows with ``label`` after the task (runs of one setting, e.g. bf16 products)."""
    def rows(d: dict[str, Any]) -> list[Headline]:
        return [replace(h, what=h.what.replace(":", f" ({label}):", 1)) for h in _time_to_solve(d)]

    return rows


def _learning(d: dict[str, Any]) -> list[Headline]:
    rows = []
    for task, t in d["tasks"].items():
        frames = f"{t['budget'] / 1e6:.2g}M" if t["budget"] >= 1e6 else f"{t['budget'] / 1e3:.0f}k"
        ref_frames = f"{t['reference_frames'] / 1e6:.2g}M"
        rows.append(Headline(f"{task} (`{t['preset']}`): training return at {frames} frames, "
                             f"{len(t['runs'])} seed(s)", f"{t['final_return_mean']:.1f}",
                             f"CleanRL {t['reference']:g} at {ref_frames}", "-", "CleanRL's"))
    return rows


def _device(d: dict[str, Any]) -> list[Headline]:
    ppo = d["sections"]["gpu-ppo"]
    fps = ppo["ppo_throughput"]["frames_per_s"]
    return [Headline("`single_device` PPO CartPole, frames/s on one GPU", _rate(fps), "-", "-", "1M/s",
                     when=ppo.get("time"), where=ppo.get("gpu"))]


#: Every benchmark with its current files, in the order of the results page.
BENCHMARKS: list[Benchmark] = [
    Benchmark("envs", "python -m benchmarks.envs", "Classic control vs envpool and Gymnasium vector envs",
              ("envs.json", "envs.png"), _envs),
    Benchmark("envs_toy_text", "python -m benchmarks.envs --toy-text", "Toy text vs envpool",
              ("envs_toy_text.json", "envs_toy_text.png")),
    Benchmark("catalog_minigrid", "python -m benchmarks.catalog --family minigrid",
              "MiniGrid vs envpool", ("catalog_minigrid.json", "catalog_minigrid.png"),
              _catalog("MiniGrid")),
    Benchmark("catalog_minigrid_wfc", "python -m benchmarks.catalog --family minigrid_wfc",
              "MiniGrid's WFC ids vs envpool",
              ("catalog_minigrid_wfc.json", "catalog_minigrid_wfc.png"), _catalog("MiniGrid WFC")),
    Benchmark("catalog_dmc", "python -m benchmarks.catalog --family dmc",
              "DeepMind Control Suite vs envpool 1.2.5 and the mj_step limit",
              ("catalog_dmc.json", "catalog_dmc.png"), _catalog("DMC")),
    Benchmark("catalog_box2d", "python -m benchmarks.catalog --family box2d",
              "Box2D vs envpool 1.2.5 and the Box2D limit", ("catalog_box2d.json", "catalog_box2d.png"),
              _box2d),
    Benchmark("atari", "python -m benchmarks.atari",
              "Atari vs envpool and ale-py's AtariVectorEnv, and the emulation limit",
              ("atari.json", "atari.png"), _atari),
    Benchmark("mujoco", "python -m benchmarks.mujoco", "MuJoCo vs envpool and Gymnasium, and the mj_step limit",
              ("mujoco.json", "mujoco.png"), _mujoco),
    Benchmark("torchrl_envs", "python -m benchmarks.torchrl_envs",
              "PoolEnv and PoolCollector vs TorchRL's envs and collectors",
              ("torchrl_envs.json", "torchrl_envs.png"), _torchrl_envs),
    Benchmark("ppo_vs_torchrl", "python -m benchmarks.ppo_vs_torchrl", "PPO loop vs TorchRL's PPO set-up",
              ("ppo_vs_torchrl.json", "ppo_vs_torchrl.png", "ppo_vs_torchrl.txt"), _ppo_vs_torchrl),
    Benchmark("fragment_overhead", "python -m benchmarks.fragment_overhead",
              "The captured graph's executor vs the same loop by hand",
              ("fragment_overhead.json", "fragment_overhead.png", "fragment_overhead.txt")),
    Benchmark("policies", "python -m benchmarks.policies", "PPO under each distribution policy, 1-8 workers",
              ("policies.json", "policies.png")),
    Benchmark("policies_cartpole", "python -m benchmarks.policies --cartpole-only",
              "actors vs TorchRL's MultiSyncCollector (the headline pair alone)",
              ("policies_cartpole.json", "policies_cartpole.png"), _policies_cartpole),
    Benchmark("policies_headline", "python -m benchmarks.policies --headline-only",
              "The alternating headline pairs alone (the slow-env row of the README's table)",
              ("policies_headline.json",), _policies),
    Benchmark("policies_multi_learner", "python -m benchmarks.policies --multi-learner-only",
              "multi_learner vs actors on the slow env", ("policies_multi_learner.json",)),
    Benchmark("policies_replay", "python -m benchmarks.policies --replay-only",
              "Replay-role DQN (policy=apex) on the slow env, 1, 2, 4 actors", ("policies_replay.json",
                                                                                "policies_replay.png"),
              _policies_replay),
    Benchmark("cluster", "python -m benchmarks.cluster (as root)",
              "Policies across simulated hosts: scaling, link limits, bytes predicted vs carried, 64-node model",
              ("cluster.json", "cluster.png"), _cluster),
    Benchmark("device", "python -m benchmarks.device (bash benchmarks/gpu_check.sh on a GPU machine)",
              "Torch-native and MuJoCo Warp envs, single_device PPO; the GPU figures",
              ("device.json", "device.png", "device_gpu.png"), _device),
    Benchmark("pool_scaling", "python -m benchmarks.pool_scaling", "The pool's thread scaling vs envpool",
              ("pool_scaling.json", "pool_scaling.png")),
    Benchmark("library_parts", "python -m benchmarks.library_parts", "Single library parts, timed alone",
              ("library_parts.json", "library_parts.png")),
    Benchmark("learning", "python -m benchmarks.learning", "Learning curves next to CleanRL's published figures",
              ("learning.json", "learning.png"), _learning),
    Benchmark("learning_car_racing", "python -m torchfrag.train env=CarRacing-v3 (the preset), then "
              "python -m benchmarks.run_curve RUN_DIR --name learning_car_racing",
              "PPO on CarRacing-v3's pixels: one seed's training curve (CPU)",
              ("learning_car_racing.json", "learning_car_racing.png")),
    Benchmark("time_to_solve_ppo_halfcheetah", "python -m benchmarks.time_to_solve --tag ppo_halfcheetah",
              "PPO HalfCheetah: time to a return of 3000 vs CleanRL and TorchRL",
              ("time_to_solve_ppo_halfcheetah.json", "time_to_solve_ppo_halfcheetah.png"), _time_to_solve),
    Benchmark("time_to_solve_sac", "python -m benchmarks.time_to_solve --tasks sac-halfcheetah-speed "
              "--seeds 0 1 2 --tag sac_speed; ... --tasks sac-pendulum --seeds 0 1 --window 10 "
              "--tag sac_pendulum; ... --merge sac_speed sac_pendulum --tag sac",
              "SAC: HalfCheetah frames/s and Pendulum time to -250 vs CleanRL- and TorchRL-style SAC",
              ("time_to_solve_sac.json", "time_to_solve_sac.png"), _time_to_solve),
    Benchmark("sac_update", "python -m benchmarks.sac_update --repeats 7",
              "One SAC gradient step: float32, bfloat16 and CleanRL-style; kernel split, per-step overhead, threads",
              ("sac_update.json",)),
    Benchmark("sac_frame", "python -m benchmarks.sac_frame --repeats 5 --frames 200",
              "One SAC training frame on HalfCheetah (one thread): ms per piece, float32 and bfloat16",
              ("sac_frame.json",)),
    Benchmark("time_to_solve_sac_HalfCheetah-v5",
              "python -m benchmarks.time_to_solve --algo sac --env HalfCheetah-v5 --target 3000 --parallel "
              "--max-seconds 900",
              "SAC HalfCheetah to 3000, the three side by side (CPU)",
              ("time_to_solve_sac_HalfCheetah-v5.json", "time_to_solve_sac_HalfCheetah-v5.png"),
              _time_to_solve_as("float32, three systems on 2 cores")),
    Benchmark("time_to_solve_sac_HalfCheetah-v5_bf16",
              "python -m benchmarks.time_to_solve --algo sac --env HalfCheetah-v5 --target 3000 --systems torchfrag "
              "cleanrl --parallel --max-seconds 640 --seeds 0 1 --tag bf16 --torchfrag-args algo.matmul_dtype=bfloat16",
              "SAC HalfCheetah to 3000 with bfloat16 products vs CleanRL-style float32, side by side (one core each)",
              ("time_to_solve_sac_HalfCheetah-v5_bf16.json", "time_to_solve_sac_HalfCheetah-v5_bf16.png"),
              _time_to_solve_as("bf16 products, one core each")),
    Benchmark("time_to_solve_sac_HalfCheetah-v5_bf16_vs_torchrl",
              "python -m benchmarks.time_to_solve --algo sac --env HalfCheetah-v5 --target 3000 --systems torchfrag "
              "torchrl --parallel --max-seconds 700 --seeds 0 1 --tag bf16_vs_torchrl "
              "--torchfrag-args algo.matmul_dtype=bfloat16",
              "SAC HalfCheetah to 3000 with bfloat16 products vs TorchRL-style float32, side by side (one core each)",
              ("time_to_solve_sac_HalfCheetah-v5_bf16_vs_torchrl.json",
               "time_to_solve_sac_HalfCheetah-v5_bf16_vs_torchrl.png"),
              _time_to_solve_as("bf16 products, one core each")),
    Benchmark("time_to_solve_dqn_cartpole", "python -m benchmarks.time_to_solve --tag dqn_cartpole",
              "DQN CartPole: time to 475 vs CleanRL and TorchRL",
              ("time_to_solve_dqn_cartpole.json", "time_to_solve_dqn_cartpole.png"), _time_to_solve),
    Benchmark("time_to_solve_ppo_cartpole_zoo_vs_cleanrl",
              "python -m benchmarks.time_to_solve --tag ppo_cartpole_zoo_vs_cleanrl",
              "PPO CartPole: time to 475 vs CleanRL",
              ("time_to_solve_ppo_cartpole_zoo_vs_cleanrl.json", "time_to_solve_ppo_cartpole_zoo_vs_cleanrl.png"),
              _time_to_solve),
]


def listed_files() -> set[str]:
    """Every file name the index lists."""
    return {name for b in BENCHMARKS for name in b.files}


def _when_where(d: dict[str, Any]) -> tuple[str, str, str, str]:
    m = d.get("machine", {})
    when = m.get("time") or d.get("time") or "date not recorded"
    where = ", ".join(str(x) for x in (m.get("cpu_model") or d.get("cpu_model"), d.get("gpu_model"),
                                       f"{m['cpu_count']} cores" if "cpu_count" in m else None) if x)
    load = m.get("loadavg") or d.get("load_average_at_start") or d.get("loadavg")
    load_text = "/".join(f"{x:.1f}" for x in load) if load else "not recorded"
    versions = m.get("versions") or d.get("versions") or {}
    peers = ", ".join(f"{k} {v}" for k, v in versions.items() if k not in {"python", "numpy"}) or "not recorded"
    return when, where or "not recorded", load_text, peers


def headline_rows() -> list[tuple[Benchmark, Headline, dict[str, Any]]]:
    rows = []
    for b in BENCHMARKS:
        if b.headlines is None:
            continue
        d = b.load()
        rows += [(b, h, d) for h in b.headlines(d)]
    return rows


def render_headline_table() -> str:
    """The README's headline table (markdown), from the current JSON files."""
    lines = ["| what | torchfrag | peer | ratio | goal | measured |", "|---|---|---|---|---|---|"]
    for b, h, d in headline_rows():
        when, where, _, _ = _when_where(d)
        when, where = h.when or when, h.where or where
        lines.append(f"| {h.what} | {h.ours} | {h.peer} | {h.ratio} | {h.goal} | {when.split(' ')[0] if when[:1].isdigit() else when}; {where} |")
    return "\n".join(lines)


def render_results_page() -> str:
    """The docs' results page (MyST markdown)."""
    out = ["# Results", "",
           "Generated from `benchmarks/results/` by `benchmarks/results_index.py` when the docs are built: the "
           "last run of each benchmark, with when, where and under what load it ran, and the versions of the "
           "peers it was compared with. Ratios are ours / the peer's (higher is better, except for times, where "
           "lower is better). Every figure is a median of alternating runs of both sides.", "",
           "## Headline figures", "", render_headline_table(), ""]
    for b in BENCHMARKS:
        d = b.load()
        when, where, load, peers = _when_where(d)
        out += [f"## {b.title}", "", f"`{b.command}`", "",
                f"- measured: {when}", f"- machine: {where}", f"- load average at start: {load}",
                f"- versions: {peers}", f"- files: " + ", ".join(f"`results/{f}`" for f in b.files), ""]
        if b.headlines is not None:
            out += ["| what | torchfrag | peer | ratio | goal |", "|---|---|---|---|---|"]
            out += [f"| {h.what} | {h.ours} | {h.peer} | {h.ratio} | {h.goal} |" for h in b.headlines(d)]
            out.append("")
        table = d.get("table")
        if isinstance(table, str) and table.strip():
            out += ["```text", table.rstrip(), "```", ""]
        for f in b.files:
            if f.endswith(".png"):
                out += [f"![{b.title}](../benchmarks/results/{f})", ""]
    return "\n".join(out)


def update_readme(path: str = README) -> bool:
    """Rewrites the README's headline table from the JSON files; returns whether it changed."""
    text = open(path).read()
    if START not in text or END not in text:
        raise ValueError(f"{path} has no {START} ... {END} block")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{START}\n{render_headline_table()}\n{END}{tail}"
    if new != text:
        with open(path, "w") as f:
            f.write(new)
    return new != text


def readme_table(path: str = README) -> str:
    """The headline table the README holds now."""
    text = open(path).read()
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", action="store_true", help="rewrite the README's headline table")
    args = parser.parse_args()
    if args.readme:
        print("README updated" if update_readme() else "README already current")
    else:
        print(render_headline_table())


if __name__ == "__main__":
    main()
