"""ALE lives of a pool's Atari envs, where TorchRL's ``EndOfLifeTransform`` looks for them.

TorchRL's :class:`~torchrl.envs.EndOfLifeTransform` reads
``env.unwrapped.ale.lives()`` after every step and reset (a Gymnasium Atari
env's ``ALEInterface``). The pool's ALE instances live in C++, behind its
threads; what they report is the ``lives`` info of each step and reset, so
:class:`AleLives` keeps those and answers ``lives()`` as ``ale.lives()`` would
at that moment: after a step, the lives at the end of that step (also for an
env the pool has already auto-reset); after a reset, the new game's.

Example:
    >>> import numpy as np
    >>> from torchfrag.envs.lives import AleLives
    >>> lives = AleLives(2, batched=True)
    >>> lives.reset(None, {"lives": np.array([5, 5])})
    >>> lives.stepped({"lives": np.array([5, 5]), "final_lives": np.array([4, 0])},
    ...               np.array([False, True]))
    >>> lives.lives().tolist()
    [4, 0]
    >>> lives.reset(np.array([], dtype=np.int64), None, served=np.array([1]))
    >>> lives.lives().tolist()
    [4, 5]
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

__all__ = ["AleLives"]


class AleLives:
    """Per-env ALE lives kept from pool infos; ``lives()`` as Gymnasium's ``unwrapped.ale.lives()``.

    Args:
        num_envs: Envs in the pool.
        batched: Whether :meth:`lives` returns ``[num_envs]`` (a batched
            ``PoolEnv``) or a 0-dim tensor (one unbatched env, as GymEnv's).
    """

    def __init__(self, num_envs: int, batched: bool) -> None:
        self._now = np.zeros(num_envs, dtype=np.int64)
        # Lives of the new game the pool auto-reset an env into, until that reset is asked for.
        self._next_game = np.zeros(num_envs, dtype=np.int64)
        self._batched = batched

    def stepped(self, info: dict[str, Any], done: np.ndarray) -> None:
        """After a pool step: each env's lives at the end of the step, even where it auto-reset."""
        self._now[:] = info["final_lives"]
        if done.any():
            self._next_game[done] = np.asarray(info["lives"])[done]

    def reset(self, env_ids: np.ndarray | None, info: dict[str, Any] | None,
              served: np.ndarray | None = None) -> None:
        """After a reset: ``env_ids`` (``None``: all) were reset by the pool (their ``info``);
        ``served`` were answered from the pool's earlier auto-reset."""
        if env_ids is None:
            self._now[:] = info["lives"]
        elif len(env_ids):
            self._now[env_ids] = info["lives"]
        if served is not None and len(served):
            self._now[served] = self._next_game[served]

    def lives(self) -> torch.Tensor:
        """Current lives, ``int64``: ``[num_envs]`` batched, 0-dim unbatched."""
        out = torch.from_numpy(self._now.copy())
        return out if self._batched else out[0]
