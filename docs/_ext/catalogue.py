"""Sphinx extension: the env catalogue page, generated from the pool's own registry.

``list_envs()`` and ``spec()`` are the source of truth: every registered id appears, with its observation
and action spaces, its step limit and the options its family accepts (name, type, default, meaning), so
the page can never list an id the pool does not build or miss one it does.
"""
from __future__ import annotations

import os
import re
from typing import Any, Callable

from generated import write_if_changed

#: Families in page order: (title, one-line description, membership test on an env id).
FAMILIES: list[tuple[str, str, Callable[[str], bool]]] = [
    ("Classic control", "Gymnasium's classic control tasks, aligned step for step with Gymnasium.",
     lambda i: i in {"CartPole-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0",
                     "Pendulum-v1"}),
    ("Toy text", "Gymnasium's toy text tasks (Gymnasium 1.4 ids), aligned with Gymnasium.",
     lambda i: i.split("-")[0] in {"FrozenLake", "FrozenLake8x8", "Taxi", "CliffWalking",
                                   "CliffWalkingSlippery", "Blackjack"}),
    ("Box2D", "Gymnasium's Box2D tasks on Box2D 2.3.",
     lambda i: re.match(r"(LunarLander|BipedalWalker|CarRacing)", i) is not None),
    ("MiniGrid", "The minigrid package's grid worlds, EnvPool's MiniGrid set.",
     lambda i: i.startswith("MiniGrid-")),
    ("MuJoCo", "Gymnasium's MuJoCo v5 tasks on the MuJoCo the pool links, aligned with Gymnasium.",
     lambda i: i.split("-")[0] in {"Ant", "HalfCheetah", "Hopper", "Humanoid", "HumanoidStandup",
                                   "InvertedDoublePendulum", "InvertedPendulum", "Pusher", "Reacher",
                                   "Swimmer", "Walker2d"}),
    ("DeepMind Control Suite", "dm_control's suite tasks, EnvPool's ids.",
     lambda i: re.match(r"(Acrobot|BallInCup|Cartpole|Cheetah|Finger|Fish|Hopper|Humanoid|Manipulator|"
                        r"Pendulum|PointMass|Reacher|Swimmer|Walker)[A-Z]\w*-v1$", i) is not None),
    ("Atari", "The ALE games with EnvPool's *-v5 preprocessing defaults, aligned with ale-py.",
     lambda i: "noop_max" in _options(i)),
    ("Testing", "Envs for testing the pool itself (sleeps, failures on demand).",
     lambda i: i.startswith("Debug")),
]


def _options(env_id: str) -> dict[str, Any]:
    from torchfrag.envs import spec

    return dict(spec(env_id).options)


def family_of(env_id: str) -> str:
    """The catalogue family an id is listed under (``"Other"`` when none matches)."""
    for title, _, member in FAMILIES:
        if member(env_id):
            return title
    return "Other"


def _space(space: Any) -> str:
    name = type(space).__name__
    if name == "Discrete":
        return f"Discrete({space.n})"
    shape = "x".join(str(d) for d in getattr(space, "shape", ()) or ())
    dtype = getattr(space, "dtype", "")
    return f"{name}({shape}, {dtype})"


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_page() -> str:
    """The MyST text of the catalogue page."""
    from torchfrag.envs import list_envs, spec

    ids = list_envs()
    by_family: dict[str, list[str]] = {}
    for env_id in ids:
        by_family.setdefault(family_of(env_id), []).append(env_id)
    lines = ["# Env catalogue", "",
             f"The pool builds **{len(ids)}** env ids. This page is generated from `list_envs()` and "
             "`spec()` when the docs are built. Every id works on every face: "
             "`torchfrag.envs.make`, `gymnasium.make_vec(\"torchfrag/<id>\")`, `PoolEnv` and the CLI "
             "(`env=<id>`). Options are passed as keyword arguments to `make` (or `PoolEnv`) and as "
             "`env.options.<name>=<value>` on the command line.", ""]
    titles = [t for t, _, _ in FAMILIES] + ["Other"]
    descriptions = {t: d for t, d, _ in FAMILIES}
    for title in titles:
        members = by_family.get(title)
        if not members:
            continue
        lines += [f"## {title}", "", descriptions.get(title, ""), "",
                  "| id | observation | action | step limit |", "|---|---|---|---|"]
        for env_id in members:
            s = spec(env_id)
            lines.append(f"| `{env_id}` | {_space(s.observation_space)} | {_space(s.action_space)} | "
                         f"{s.max_episode_steps} |")
        lines.append("")
        seen: set[tuple[str, ...]] = set()
        for env_id in members:
            options = spec(env_id).options
            key = tuple(sorted(options))
            if key in seen or not options:
                continue
            seen.add(key)
            lines += [f"Options of `{env_id}`" + (" (and of the ids sharing them)" if len(members) > 1 else "")
                      + ":", "", "| option | type | default | per env | meaning |", "|---|---|---|---|---|"]
            for name, info in options.items():
                lines.append(f"| `{name}` | {info.type} | `{_cell(info.default)}` | "
                             f"{'yes' if info.per_env else 'no'} | {_cell(info.doc)} |")
            lines.append("")
    return "\n".join(lines)


def write_page(app: Any) -> None:
    path = os.path.join(app.srcdir, "envs_catalogue.md")
    text = render_page()
    write_if_changed(path, text)


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", write_page)
    return {"parallel_read_safe": True, "version": "1"}
