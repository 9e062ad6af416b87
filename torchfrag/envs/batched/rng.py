"""Counter-based random numbers that are the same on every torch device.

A batched env draws its randoms from a hash of (env seed, episode, step,
draw index) computed with 64-bit integer arithmetic, which every device
evaluates bit for bit alike. So the same seed gives the same initial states
on the CPU and on an accelerator, nothing is drawn on the host, and an env's
randoms do not depend on which other envs reset at the same step.

Example:
    >>> import torch
    >>> from torchfrag.envs.batched.rng import counter_uniform, env_seeds
    >>> seeds = env_seeds(0, 3)
    >>> u = counter_uniform(seeds, torch.zeros(3, dtype=torch.int64), 0, 2)
    >>> u.shape, bool(((u >= 0) & (u < 1)).all())
    (torch.Size([3, 2]), True)
"""
from __future__ import annotations

import functools

import torch

__all__ = ["mix64", "counter_uniform", "env_seeds"]


def _signed(x: int) -> int:
    """Unsigned 64-bit constant as the int64 with the same bits."""
    return x - (1 << 64) if x >= 1 << 63 else x


_GOLDEN = _signed(0x9E3779B97F4A7C15)
_M1 = _signed(0xBF58476D1CE4E5B9)
_M2 = _signed(0x94D049BB133111EB)
_STEP = _signed(0xD1B54A32D192ED03)
_DRAW = _signed(0xABC98388FB8FAC03)


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    # Logical right shift of int64 (torch's >> is arithmetic on signed ints).
    return (x >> s) & ((1 << (64 - s)) - 1)


def mix64(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64's finaliser on int64 tensors (wrapping arithmetic)."""
    x = (x ^ _shr(x, 30)) * _M1
    x = (x ^ _shr(x, 27)) * _M2
    return x ^ _shr(x, 31)


@functools.lru_cache(maxsize=None)
def _draw_offsets(k: int) -> tuple[int, ...]:
    """``j * _DRAW`` for ``j`` in ``1..k``, wrapped to int64, as Python ints.

    Draw ``j`` adds its own scalar rather than ``arange(1, k + 1) * _DRAW``:
    under ``torch.compile`` that product becomes an index expression, and
    Triton rejects a 64-bit constant times an index (``Scalar ... is out of
    range for type int32``, seen on an H100 with torch 2.11). A scalar operand
    is an int64 kernel constant, and no device tensor is made per call.
    """
    mask = (1 << 64) - 1
    return tuple(_signed((j * (_DRAW & mask)) & mask) for j in range(1, k + 1))


def counter_uniform(seeds: torch.Tensor, episode: torch.Tensor, step: int | torch.Tensor,
                    k: int) -> torch.Tensor:
    """``k`` float64 uniforms in ``[0, 1)`` per env, a pure function of its arguments.

    Args:
        seeds: ``[B]`` int64 per-env seeds.
        episode: ``[B]`` int64 episode counters.
        step: Step within the episode (0 for reset draws), an int or ``[B]`` int64.
        k: Draws per env.

    Returns:
        ``[B, k]`` float64 on the device of ``seeds``.
    """
    if isinstance(step, int):
        # A Python int product would overflow instead of wrapping: multiply as int64.
        step = torch.full_like(seeds, step)
    base = mix64(seeds * _GOLDEN + episode) + step * _STEP
    mixed = mix64(base)
    bits = mix64(torch.stack([mixed + c for c in _draw_offsets(k)], dim=-1))
    return _shr(bits, 11).to(torch.float64) * (2.0 ** -53)


def env_seeds(seed: int, num_envs: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Per-env int64 seeds derived from one seed (env ``i`` gets ``mix64(seed, i)``)."""
    idx = torch.arange(num_envs, dtype=torch.int64, device=device)
    return mix64(mix64(torch.full_like(idx, _signed(int(seed) & ((1 << 64) - 1)))) + idx)
