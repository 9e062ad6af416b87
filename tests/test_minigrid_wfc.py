"""MiniGrid's six WFC ids against the ``minigrid`` 3.2 package's WFCEnv.

minigrid's reference runs with the pattern images torchfrag ships (its wheel
lacks them; see tests/_wfc_reference.py).  With ``reference_seed=s`` the C++
env draws from the same NumPy stream as ``WFCEnv.reset(seed=s)``: the wave's
noise, every weighted pattern choice over all attempts, the start/goal
permutation and the direction.  The tests compare whole layouts (rendered
frames), then whole episodes of random and goal-seeking actions.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable

import gymnasium
import minigrid
import networkx as nx
import numpy as np
import pytest
from _wfc_reference import PATTERNS, WFC_IDS, use_shipped_patterns
from minigrid.minigrid_env import MiniGridEnv
from test_minigrid import _reference, _run_side_by_side, _trajectory

from torchfrag.envs import list_envs, make, spec
from torchfrag.envs.minigrid import missions

gymnasium.register_envs(minigrid)


@pytest.fixture(autouse=True)
def _patterns(monkeypatch: pytest.MonkeyPatch) -> None:
    use_shipped_patterns(monkeypatch)


def test_the_six_ids_are_registered() -> None:
    assert sorted(i for i in list_envs() if "-WFC-" in i) == sorted(WFC_IDS)


def test_reference_needs_and_resets_with_the_shipped_patterns(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from minigrid.envs.wfc.config import PATTERN_PATH, WFC_PRESETS

    assert not PATTERN_PATH.exists()  # minigrid 3.2.0 ships no images: why we ship them
    for config in WFC_PRESETS.values():
        assert config.pattern_path.parent == PATTERNS and config.pattern_path.exists()
    ref = _reference("MiniGrid-WFC-ObstaclesBlackdots-v0")
    obs, _ = ref.reset(seed=0)
    assert obs["image"].shape == (7, 7, 3) and ref.grid.width == 25
    assert sum(o is not None and o.type == "goal" for o in ref.grid.grid) == 1
    monkeypatch.undo()
    with pytest.raises(FileNotFoundError):
        _reference("MiniGrid-WFC-ObstaclesBlackdots-v0").reset(seed=0)


def test_generated_header_is_current() -> None:
    """csrc/envs/minigrid_wfc_data.h is what build_tools/wfc_patterns.py writes today."""
    from build_tools import wfc_patterns

    assert wfc_patterns.HEADER.read_text() == wfc_patterns.render()


def test_one_mission_and_minigrids_time_limit() -> None:
    """(Spaces and limits are compared with the other ids in tests/test_minigrid.py.)"""
    for env_id in WFC_IDS:
        assert spec(env_id).max_episode_steps == 500  # WFCEnv: 20 * size, size 25
        assert missions(env_id) == ["traverse the maze to get to the goal"]


def _spy_reference(monkeypatch: pytest.MonkeyPatch) -> tuple[list[bool], list[int]]:
    """Per reference reset: is the largest component under half the empty cells? How many attempts?

    In the first case networkx orders the start/goal candidates by a CPython
    set's layout (the C++ side reproduces that order); attempts > 1 means the
    solve met a contradiction and restarted with the stream where it was.  The
    tests must reach both cases.
    """
    from minigrid.envs.wfc import wfcenv

    seen: list[bool] = []
    attempts: list[int] = []
    execute_wfc = wfcenv.execute_wfc

    def count_attempts(**kwargs: object) -> tuple:
        pattern, stats = execute_wfc(**kwargs)
        attempts.append(stats["attempts"])
        return pattern, stats
    original = wfcenv.WFCEnv._get_largest_component

    def spy(graph: nx.Graph) -> nx.Graph:
        empty = [n for n, d in graph.nodes(data=True) if d["navigable"] >= 0.5]
        largest = max(len(c) for c in nx.connected_components(graph.subgraph(empty)))
        seen.append(2 * largest < len(empty))
        return original(graph)

    monkeypatch.setattr(wfcenv.WFCEnv, "_get_largest_component", staticmethod(spy))
    monkeypatch.setattr(wfcenv, "execute_wfc", count_attempts)
    return seen, attempts


@pytest.mark.parametrize("env_id,seeds", [
    ("MiniGrid-WFC-MazeSimple-v0", [0, 2, 5, 7]),  # seeds 0, 2, 7: set order
    ("MiniGrid-WFC-DungeonMazeScaled-v0", [3, 4]),  # seed 3: set order
    ("MiniGrid-WFC-RoomsFabric-v0", [0, 1375]),  # seed 1375: a contradiction, 2 attempts
    ("MiniGrid-WFC-ObstaclesBlackdots-v0", [0, 1, 2, 3]),
    ("MiniGrid-WFC-ObstaclesAngular-v0", [0, 5318]),  # 5318: 2 attempts
    ("MiniGrid-WFC-ObstaclesHogs3-v0", [0, 1323]),  # 1323: 2 attempts
])
def test_whole_layouts_equal_minigrids(env_id: str, seeds: list[int],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The rendered frame (every cell of the 25x25 grid, the agent and its view) after reset."""
    halves, attempts = _spy_reference(monkeypatch)
    counts = _run_side_by_side(env_id, seeds=seeds, steps=0, max_steps=None, frames=True)
    assert counts["frames"] == len(seeds) and len(halves) == len(attempts) == len(seeds)
    if env_id in ("MiniGrid-WFC-MazeSimple-v0", "MiniGrid-WFC-DungeonMazeScaled-v0"):
        assert any(halves), "no layout reached networkx's set-ordered node list"
    if "Fabric" in env_id or "Angular" in env_id or "Hogs3" in env_id:
        assert max(attempts) > 1, "no solve restarted after a contradiction"


@pytest.mark.parametrize("env_id", WFC_IDS)
def test_whole_episodes_match_minigrid(env_id: str) -> None:
    # Two episodes per env (the second on the next layout of the continuing stream).
    counts = _run_side_by_side(env_id, seeds=[7, 1000 + len(env_id)], steps=61, max_steps=30)
    assert counts["episodes"] == 4


def _towards_goal(seed: int, p: float = 0.8) -> Callable[[MiniGridEnv], int | None]:
    """Hint: with probability ``p``, the first action of a shortest path to the goal."""
    rng = np.random.default_rng(seed)

    def hint(ref: MiniGridEnv) -> int | None:
        if rng.random() >= p:
            return None
        start, grid = tuple(int(v) for v in ref.agent_pos), ref.grid
        parent: dict[tuple[int, int], tuple[int, int] | None] = {start: None}
        queue = deque([start])
        while queue:
            x, y = queue.popleft()
            cell = grid.get(x, y)
            if cell is not None and cell.type == "goal" and (x, y) != start:
                step = (x, y)
                while parent[step] != start:
                    step = parent[step]
                want = [(1, 0), (0, 1), (-1, 0), (0, -1)].index(
                    (step[0] - start[0], step[1] - start[1]))
                if want == ref.agent_dir:
                    return int(ref.actions.forward)
                return int(ref.actions.right if want == (ref.agent_dir + 1) % 4
                           else ref.actions.left)
            for dx, dy in ((1, 0), (0, 1), (-1, 0), (0, -1)):
                nxt = (x + dx, y + dy)
                other = grid.get(*nxt)
                if nxt not in parent and (other is None or other.can_overlap()):
                    parent[nxt] = (x, y)
                    queue.append(nxt)
        return None

    return hint


@pytest.mark.parametrize("env_id", ["MiniGrid-WFC-MazeSimple-v0",
                                    "MiniGrid-WFC-ObstaclesBlackdots-v0"])
def test_goals_are_reached_and_rewarded_alike(env_id: str) -> None:
    """Mostly shortest-path actions: episodes end at the goal with minigrid's reward."""
    counts = _run_side_by_side(env_id, seeds=[0, 1], steps=160, max_steps=None,
                               hint=_towards_goal(len(env_id)))
    assert counts["wins"] >= 2, counts


def test_same_seed_same_trajectories_whatever_threads_and_async_order() -> None:
    env_id = "MiniGrid-WFC-ObstaclesHogs3-v0"
    a = _trajectory(env_id, 1, 21)
    np.testing.assert_array_equal(a, _trajectory(env_id, 3, 21))
    np.testing.assert_array_equal(a, _trajectory(env_id, 3, 21, batch_size=3))
    assert not np.array_equal(a, _trajectory(env_id, 1, 22))


@pytest.mark.parametrize("options,name", [
    ({"reference_seed": -2}, "reference_seed"),
    ({"max_episode_steps": 0}, "max_episode_steps"),
    ({"size": 13}, "size"),
])
def test_bad_options_are_refused_by_name(options: dict, name: str) -> None:
    with pytest.raises((ValueError, TypeError), match=name):
        make("MiniGrid-WFC-MazeSimple-v0", num_envs=1, **options)


def test_every_face_builds_a_wfc_env() -> None:
    from torchrl.envs.utils import check_env_specs

    from torchfrag.envs import PoolEnv
    from torchfrag.train import compose_config

    env_id = "MiniGrid-WFC-RoomsFabric-v0"
    vec = gymnasium.make_vec(f"torchfrag/{env_id}", num_envs=3)
    obs, info = vec.reset(seed=0)
    assert obs.shape == (3, 7, 7, 3) and obs.dtype == np.uint8
    assert info["mission"].tolist() == [0, 0, 0]
    vec.close()
    env = PoolEnv(env_id, num_envs=2, seed=1)
    check_env_specs(env, seed=0)
    env.close()
    assert compose_config([f"env={env_id}"]).env.id == env_id  # the CLI's env=...
