"""The `minigrid` package's WFC envs, made runnable with the pattern images torchfrag ships.

minigrid 3.2.0 registers six ``MiniGrid-WFC-*-v0`` ids whose configs read PNG
files from ``minigrid/envs/wfc/patterns/``, a folder that neither its wheel nor
its sdist contains, so their ``reset()`` fails.  :func:`use_shipped_patterns`
points each preset's config at ``torchfrag/envs/wfc_patterns/`` (the same
images, copied from the Minigrid repository) for the duration of a test.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import torchfrag.envs

PATTERNS = Path(torchfrag.envs.__file__).parent / "wfc_patterns"

# EnvPool 1.2.5's WFC ids (minigrid's default WFC_PRESETS).
WFC_IDS = [f"MiniGrid-WFC-{p}-v0" for p in ("MazeSimple", "DungeonMazeScaled", "RoomsFabric",
                                            "ObstaclesBlackdots", "ObstaclesAngular",
                                            "ObstaclesHogs3")]


def use_shipped_patterns(monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes minigrid's WFC presets read the shipped images (undone when the test ends)."""
    from minigrid.envs.wfc.config import WFC_PRESETS

    for config in WFC_PRESETS.values():
        monkeypatch.setattr(config, "pattern_path", PATTERNS / config.pattern_path.name)
