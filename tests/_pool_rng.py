"""A Python twin of the pool's per-env generator, for reference envs that draw from ``np_random``.

Handed to a Gymnasium env as its ``np_random``, :class:`PoolRng` makes the
reference's own code draw exactly the numbers our env drew from the same seed
(MuJoCo reset noise, Box2D terrain and engine dispersion).
"""
from __future__ import annotations

import math

import numpy as np

_MASK = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _rotl(x: int, k: int) -> int:
    return ((x << k) | (x >> (64 - k))) & _MASK


class PoolRng:
    """A Python twin of the env's generator (csrc/rng.h: xoshiro256++ seeded
    through splitmix64, 53-bit uniforms, Box-Muller normals), written here from
    the published algorithm, with the two ``np.random.Generator`` methods
    Gymnasium's ``reset_model`` calls.  Handed to a Gymnasium env as its
    ``np_random``, it makes Gymnasium's own reset code draw exactly the numbers
    our env drew from the same seed."""

    def __init__(self, seed: int) -> None:
        self.s = []
        x = seed
        for _ in range(4):
            x = _splitmix64(x)
            self.s.append(x)

    def _next(self) -> int:
        s = self.s
        result = (_rotl((s[0] + s[3]) & _MASK, 23) + s[0]) & _MASK
        t = (s[1] << 17) & _MASK
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = _rotl(s[3], 45)
        return result

    def _unit(self) -> float:
        return (self._next() >> 11) * 2.0 ** -53

    def _draw(self, one, size):
        if size is None:
            return one()
        return np.array([one() for _ in range(int(np.prod(size)))]).reshape(size)

    def uniform(self, low: float = 0.0, high: float = 1.0, size=None):
        return self._draw(lambda: low + (high - low) * self._unit(), size)

    def standard_normal(self, size=None):
        def one() -> float:
            u1 = self._unit()
            while u1 <= 0.0:
                u1 = self._unit()
            u2 = self._unit()
            return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)
        return self._draw(one, size)

    def random(self, size=None):
        """Uniform in [0, 1), as ``Rng::uniform()``."""
        return self._draw(self._unit, size)

    def integers(self, low: int, high: int) -> int:
        """An int in [low, high), drawn as csrc/rng.h's ``Rng::integer`` (no modulo bias)."""
        n = high - low
        limit = _MASK - _MASK % n
        while True:
            x = self._next()
            if x < limit:
                return low + x % n
