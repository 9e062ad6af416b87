"""Rendered frames as observations: what ``PoolEnv(id, from_pixels=True)`` adds for non-image envs.

TorchRL's ``GymEnv(id, from_pixels=True)`` puts ``env.render()`` under
``"pixels"`` (uint8 ``[H, W, 3]``) after every reset and step. For a pool the
frames come from :meth:`torchfrag.envs.EnvPool.render`, which draws each env's
state with Gymnasium's own code (MuJoCo's offscreen renderer for MuJoCo). With
same-step auto-reset, a finished env is already in its next episode when the
step returns, so its terminal frame is the one the pool kept for it
(:meth:`~torchfrag.envs.EnvPool.keep_final_frames`), and the new episode's
first frame is kept for the reset TorchRL asks for next.

Example:
    >>> from torchfrag.envs import make
    >>> from torchfrag.envs.pixels import PixelFrames
    >>> pool = make("CartPole-v1", num_envs=2, autoreset="same_step")
    >>> frames = PixelFrames(pool, pixels_only=True, seed=0)
    >>> _ = pool.reset()
    >>> frames.shape, frames.render_all().shape
    ((400, 600, 3), (2, 400, 600, 3))
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from torchfrag.envs.pool import EnvPool

__all__ = ["PixelFrames"]


class PixelFrames:
    """Renders the frames of every env of a same-step auto-resetting pool.

    Args:
        pool: The pool (``autoreset="same_step"``).
        pixels_only: Whether ``"pixels"`` replaces ``"observation"`` (GymEnv's
            ``pixels_only``).
        seed: The pool's seed, set again after the reset that measures a frame.
    """

    def __init__(self, pool: EnvPool, pixels_only: bool,
                 seed: int | Sequence[int] | None = None) -> None:
        if pool.autoreset != "same_step":
            raise ValueError("PixelFrames needs a pool with autoreset='same_step'")
        self.pool = pool
        self.pixels_only = bool(pixels_only)
        for i in range(pool.num_envs):
            pool.keep_final_frames(i)  # also says early whether the env can render at all
        # One frame to know the shape: the env must have been reset to draw it.
        pool.reset()
        first = pool.render(0)
        if seed is not None:
            # The probe's reset drew from the envs' streams: start them over, so that the
            # first real reset is the one a pool with this seed gives.
            pool.seed(seed)
        #: Frame shape, ``(H, W, 3)``.
        self.shape: tuple[int, ...] = tuple(first.shape)
        #: First frames of new episodes the pool started on its own, per env.
        self.reset_frames = np.zeros((pool.num_envs, *self.shape), dtype=np.uint8)

    def render_all(self) -> np.ndarray:
        """Frames of all envs as they are now, ``[num_envs, H, W, 3]``."""
        return np.stack([self.pool.render(i) for i in range(self.pool.num_envs)])

    def render_ids(self, ids: np.ndarray) -> None:
        """Renders envs ``ids`` (just reset) into :attr:`reset_frames`."""
        for i in ids:
            self.reset_frames[int(i)] = self.pool.render(int(i))

    def after_step(self, done: np.ndarray) -> np.ndarray:
        """Frames of the step just taken: terminal frames for finished envs.

        The finished envs' new first frames go to :attr:`reset_frames`.
        """
        out = np.empty((self.pool.num_envs, *self.shape), dtype=np.uint8)
        for i in range(self.pool.num_envs):
            if done[i]:
                out[i] = self.pool.render(i, final=True)
                self.reset_frames[i] = self.pool.render(i)
            else:
                out[i] = self.pool.render(i)
        return out
