"""When the training CLI writes a checkpoint, and which of its checkpoints it keeps.

A run writes ``<run dir>/checkpoints/iter_NNNNNN.pt`` (plus ``latest.pt``) when any of three
cadences is due (each ``0`` turns it off): every ``checkpoint_every`` iterations, every
``checkpoint_every_frames`` frames (a frame count crossing a multiple), every
``checkpoint_every_seconds`` seconds since the last one. The final state is always written.
Of the ``iter_*`` files this run wrote, the last ``checkpoint_keep`` are kept, plus (with
``checkpoint_keep_best``) the one with the highest mean training return; the others are removed.

Example:
    >>> cadence = Cadence(every_iterations=0, every_frames=1000, every_seconds=0.0)
    >>> cadence.due(iteration=3, frames=900, now=10.0)
    False
    >>> cadence.due(iteration=4, frames=1200, now=11.0)
    True
    >>> cadence.mark(iteration=4, frames=1200, now=11.0)
    >>> cadence.due(iteration=5, frames=1500, now=12.0)
    False
"""
from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["Cadence", "Retention"]


@dataclass
class Cadence:
    """Whether a checkpoint is due, by iterations, frames or seconds (``0``: that one is off).

    Args:
        every_iterations: Iterations between checkpoints.
        every_frames: A checkpoint each time the frame count crosses a multiple of this.
        every_seconds: Seconds (of the clock given to :meth:`due`) since the last checkpoint.
    """

    every_iterations: int = 0
    every_frames: int = 0
    every_seconds: float = 0.0
    _frames: int = field(default=0, repr=False)
    _time: float | None = field(default=None, repr=False)

    @classmethod
    def from_config(cls, cfg: Any) -> Cadence:
        """The cadence a training config asks for (``checkpoint_every``, ``checkpoint_every_frames``,
        ``checkpoint_every_seconds``).

        Example:
            >>> from omegaconf import OmegaConf
            >>> cfg = OmegaConf.create({"checkpoint_every": 0, "checkpoint_every_frames": 512,
            ...                         "checkpoint_every_seconds": 0})
            >>> Cadence.from_config(cfg).every_frames
            512
        """
        return cls(every_iterations=int(cfg.checkpoint_every),
                   every_frames=int(cfg.checkpoint_every_frames),
                   every_seconds=float(cfg.checkpoint_every_seconds))

    def start(self, frames: int, now: float) -> None:
        """Counts from ``frames`` and time ``now`` (a run's start or its resumed state)."""
        self._frames, self._time = frames, now

    def due(self, iteration: int, frames: int, now: float) -> bool:
        """Whether a checkpoint should be written after ``iteration`` iterations and ``frames`` frames.

        Example:
            >>> Cadence(every_iterations=2).due(iteration=4, frames=0, now=0.0)
            True
        """
        if self.every_iterations and iteration % self.every_iterations == 0:
            return True
        if self.every_frames and frames // self.every_frames > self._frames // self.every_frames:
            return True
        if self.every_seconds:
            if self._time is None:
                self._time = now
            return now - self._time >= self.every_seconds
        return False

    def mark(self, iteration: int, frames: int, now: float) -> None:
        """Records a checkpoint written at ``frames`` frames, time ``now``."""
        del iteration  # the iteration cadence needs no memory
        self._frames, self._time = frames, now


class Retention:
    """Keeps the last ``keep`` checkpoint files written, plus the best-scoring one; removes the rest.

    Only files handed to :meth:`add` are ever removed (not ``latest.pt``, not an earlier run's).

    Args:
        keep: How many of the most recent files to keep (at least 1).
        keep_best: Also keep the file with the highest score (a score of ``None`` never wins).

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> r = Retention(keep=1, keep_best=True)
        >>> for i, score in enumerate([5.0, 9.0, 1.0, 2.0]):
        ...     _ = (d / f"{i}.pt").write_bytes(b"x")
        ...     _ = r.add(str(d / f"{i}.pt"), score)
        >>> sorted(p.name for p in d.iterdir())
        ['1.pt', '3.pt']
    """

    def __init__(self, keep: int = 3, keep_best: bool = True) -> None:
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(f"checkpoint_keep must be an integer >= 1, got {keep!r}")
        self.keep, self.keep_best = keep, keep_best
        self.written: list[dict[str, Any]] = []  # {"path", "score"}, oldest first

    @property
    def best(self) -> str | None:
        """Path of the highest-scoring file written so far (``None`` when no file had a score)."""
        scored = [w for w in self.written if w["score"] is not None and math.isfinite(w["score"])]
        return max(scored, key=lambda w: w["score"])["path"] if scored else None

    def add(self, path: str, score: float | None) -> list[str]:
        """Records a file just written, removes those no longer kept; returns the removed paths."""
        self.written = [w for w in self.written if w["path"] != path]  # rewritten: now the newest
        self.written.append({"path": path, "score": score})
        keep = {w["path"] for w in self.written[-self.keep:]}
        if self.keep_best and self.best is not None:
            keep.add(self.best)
        removed = [w["path"] for w in self.written if w["path"] not in keep]
        self.written = [w for w in self.written if w["path"] in keep]
        for old in removed:
            try:
                os.remove(old)
            except FileNotFoundError:
                pass
        if removed:
            logger.debug("removed old checkpoints: %s", removed)
        return removed

    def index(self) -> list[dict[str, Any]]:
        """The kept files and their scores, oldest first (saved in each checkpoint)."""
        return [dict(w) for w in self.written]
