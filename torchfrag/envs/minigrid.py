"""MiniGrid's missions: the text behind the pool's ``mission`` info.

The C++ MiniGrid envs report the mission as an index into the id's mission
list (an int64 info beside the ``direction`` info), so that batches stay
numeric.  :func:`missions` gives that list, built from minigrid 3.2's mission
templates; :func:`mission_text` turns a batch of indices into strings.

Example:
    >>> from torchfrag.envs.minigrid import missions
    >>> missions("MiniGrid-GoToDoor-5x5-v0")[:2]
    ['go to the blue door', 'go to the green door']
    >>> missions("MiniGrid-Empty-5x5-v0")
    ['get to the green goal square']
"""
from __future__ import annotations

import re
from typing import Iterable

__all__ = ["missions", "mission_text"]

# minigrid's COLOR_NAMES (sorted by name): the order in which its envs draw colours.
_COLOR_NAMES = ["blue", "green", "grey", "purple", "red", "yellow"]
_FETCH_SYNTAX = ["get a", "go get a", "fetch a", "go fetch a", "you must fetch a"]

# Single-mission envs: id pattern -> mission.
_FIXED = [
    (r"MiniGrid-Empty-", "get to the green goal square"),
    (r"MiniGrid-Dynamic-Obstacles-", "get to the green goal square"),
    (r"MiniGrid-DoorKey-", "use the key to open the door and then get to the goal"),
    (r"MiniGrid-FourRooms-", "reach the goal"),
    (r"MiniGrid-LavaGap", "avoid the lava and get to the green goal square"),
    (r"MiniGrid-LavaCrossing", "avoid the lava and get to the green goal square"),
    (r"MiniGrid-SimpleCrossing", "find the opening and get to the green goal square"),
    (r"MiniGrid-MultiRoom-", "traverse the rooms to get to the goal"),
    (r"MiniGrid-Memory", "go to the matching object at the end of the hallway"),
    (r"MiniGrid-DistShift", "get to the green goal square"),
    (r"MiniGrid-Unlock-", "open the door"),
    (r"MiniGrid-RedBlueDoors-", "open the red door then the blue door"),
    (r"MiniGrid-Playground-", ""),  # no task
    (r"MiniGrid-ObstructedMaze-", "pick up the blue ball"),
    (r"MiniGrid-WFC-", "traverse the maze to get to the goal"),
]


def missions(env_id: str) -> list[str]:
    """The mission strings of a MiniGrid id, in the order of the ``mission`` info's values.

    Args:
        env_id: a MiniGrid id of the pool, e.g. ``"MiniGrid-Fetch-5x5-N2-v0"``.

    Returns:
        The list whose entry ``k`` is the mission that ``info["mission"] == k`` stands for.

    Raises:
        ValueError: ``env_id`` is not one of the pool's MiniGrid ids.

    Example:
        >>> missions("MiniGrid-Fetch-5x5-N2-v0")[1]
        'get a blue ball'
    """
    if env_id.startswith("MiniGrid-Fetch-"):
        return [f"{s} {c} {t}"
                for s in _FETCH_SYNTAX for c in _COLOR_NAMES for t in ("key", "ball")]
    if env_id.startswith("MiniGrid-GoToDoor-"):
        return [f"go to the {c} door" for c in _COLOR_NAMES]
    if env_id.startswith("MiniGrid-KeyCorridor"):
        return [f"pick up the {c} ball" for c in _COLOR_NAMES]
    objects = [f"{c} {t}" for c in _COLOR_NAMES for t in ("key", "ball", "box")]
    if env_id.startswith("MiniGrid-GoToObject-"):
        return [f"go to the {o}" for o in objects]
    if env_id == "MiniGrid-LockedRoom-v0":
        return [f"get the {a} key from the {b} room, unlock the {a} door and go to the goal"
                for a in _COLOR_NAMES for b in _COLOR_NAMES]
    if env_id.startswith("MiniGrid-PutNear-"):
        return [f"put the {a} near the {b}" for a in objects for b in objects]
    if env_id in ("MiniGrid-UnlockPickup-v0", "MiniGrid-BlockedUnlockPickup-v0"):
        return [f"pick up the {c} box" for c in _COLOR_NAMES]
    for pattern, text in _FIXED:
        if re.match(pattern, env_id):
            return [text]
    raise ValueError(f"{env_id!r} is not a MiniGrid id of torchfrag's pool "
                     "(see torchfrag.envs.list_envs())")


def mission_text(env_id: str, ids: Iterable[int]) -> list[str]:
    """Mission strings for a batch of ``mission`` info values.

    Args:
        env_id: the pool's MiniGrid id.
        ids: the ``mission`` info of a batch (any iterable of ints, a NumPy array say).

    Returns:
        One string per entry of ``ids``.

    Example:
        >>> mission_text("MiniGrid-GoToDoor-5x5-v0", [5, 0])
        ['go to the yellow door', 'go to the blue door']
    """
    table = missions(env_id)
    return [table[int(k)] for k in ids]
