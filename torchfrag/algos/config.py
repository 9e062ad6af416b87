"""The base of every algorithm config: a dataclass that is the single source of defaults.

A config is a plain dataclass; Hydra's YAML (``conf/algo/<name>.yaml``) only
overrides some of its fields. :class:`AlgoConfig` gives every config the same
protocol: built from a mapping (ignoring keys that are not fields, such as
Hydra's ``name`` or ``_target_``), turned back into a plain dict (picklable,
for worker factories), ``frames_per_iteration`` and ``iterations``: the one conversion of
``total_frames`` into iterations (:func:`iterations_for`), used by the training loop and by
every schedule that anneals over the run.

Example:
    >>> from dataclasses import dataclass
    >>> from torchfrag.algos.config import AlgoConfig
    >>> @dataclass
    ... class MyConfig(AlgoConfig):
    ...     lr: float = 1e-3
    >>> cfg = MyConfig.from_dict({"lr": 0.1, "name": "mine", "num_envs": 4})
    >>> cfg.lr, cfg.num_envs, cfg.frames_per_iteration
    (0.1, 4, 512)
    >>> MyConfig(num_envs=8, steps=32, total_frames=100_000).iterations  # 100k frames: 390.6 -> 391
    391

    Random warm-up frames (``learning_starts``, TorchRL's ``init_random_frames``) are part of
    ``total_frames``:

    >>> @dataclass
    ... class OffPolicy(AlgoConfig):
    ...     learning_starts: int = 1000
    >>> cfg = OffPolicy(num_envs=8, steps=16, total_frames=2048)
    >>> cfg.warmup_frames, cfg.iterations, cfg.frames_per_iteration  # 1,000 + 9 x 128 = 2,152 frames
    (1000, 9, 128)
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

__all__ = ["AlgoConfig", "iterations_for"]


def iterations_for(total_frames: int, frames_per_iteration: int) -> int:
    """Iterations of a run of ``total_frames`` frames: the one conversion, everywhere.

    Rounded up, so a run collects at least ``total_frames`` frames and a schedule annealed
    over this many iterations ends exactly at the run's last iteration; at least 1.

    Args:
        total_frames: Training length in frames.
        frames_per_iteration: Frames one iteration collects.

    Raises:
        ValueError: ``frames_per_iteration`` is not positive.

    Example:
        >>> iterations_for(100_000, 256), iterations_for(512, 256), iterations_for(0, 256)
        (391, 2, 1)
    """
    if int(frames_per_iteration) <= 0:
        raise ValueError(f"frames_per_iteration must be > 0, got {frames_per_iteration!r}")
    return max(1, -(-int(total_frames) // int(frames_per_iteration)))


@dataclass
class AlgoConfig:
    """Base of the algorithm configs: plain fields, built from a (Hydra) mapping.

    Attributes:
        num_envs: Envs in the pool (all workers together).
        steps: Env steps per env per iteration (frames per iteration: ``num_envs * steps``).
        total_frames: Training length in frames.
    """

    LIST_FIELDS: ClassVar[tuple[str, ...]] = ("hidden",)

    num_envs: int = 8
    steps: int = 128
    total_frames: int = 500_000

    @classmethod
    def field_names(cls) -> set[str]:
        """Names of the config's fields."""
        return {f.name for f in fields(cls)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Any:
        """Builds a config from a mapping, ignoring unrelated keys (e.g. ``name``, ``_target_``)."""
        names = cls.field_names()
        return cls(**{k: (list(v) if k in cls.LIST_FIELDS and v is not None else v)
                      for k, v in d.items() if k in names})

    @classmethod
    def coerce(cls, cfg: Any) -> Any:
        """``None`` -> defaults; a mapping -> :meth:`from_dict`; an instance -> itself."""
        if cfg is None:
            return cls()
        if isinstance(cfg, cls):
            return cfg
        if isinstance(cfg, AlgoConfig):
            cfg = cfg.to_dict()
        return cls.from_dict(dict(cfg))

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (picklable, YAML-friendly)."""
        return asdict(self)

    @property
    def frames_per_iteration(self) -> int:
        """``num_envs * steps``."""
        return int(self.num_envs) * int(self.steps)

    @property
    def warmup_frames(self) -> int:
        """Random-action frames collected before the first iteration: ``learning_starts`` (for
        configs that have it, DQN and SAC) rounded up to whole steps of the ``num_envs`` envs.

        They count towards ``total_frames``, as TorchRL's ``init_random_frames`` do.
        """
        starts = int(getattr(self, "learning_starts", 0) or 0)
        n = max(1, int(self.num_envs))
        return -(-starts // n) * n if starts > 0 else 0

    @property
    def iterations(self) -> int:
        """Iterations of the whole run: :func:`iterations_for` of ``total_frames`` less the
        :attr:`warmup_frames` (at least one iteration)."""
        return iterations_for(max(1, int(self.total_frames) - self.warmup_frames),
                              self.frames_per_iteration)

    def validate(self, prefix: str = "algo.") -> None:
        """Refuses values no training can use, naming the key, the value and what is allowed.

        Checks the fields every shipped config shares where the config has them:
        ``num_envs``, ``steps`` and ``total_frames`` >= 1, ``gamma`` in (0, 1],
        ``lr`` finite and > 0, ``hidden`` sizes >= 1, and ``minibatch_size`` at
        most one iteration's frames. Subclasses add their own checks and call
        ``super().validate(prefix)``.

        Args:
            prefix: Prepended to field names in messages (the Hydra key's group).

        Raises:
            ValueError: The first field whose value is refused.

        Example:
            >>> from torchfrag.algos.ppo import PPOConfig
            >>> PPOConfig(gamma=1.5).validate()
            Traceback (most recent call last):
            ...
            ValueError: algo.gamma must be in (0, 1], got 1.5
        """
        for name in ("num_envs", "steps", "total_frames"):
            _require(_is_int(getattr(self, name)) and getattr(self, name) >= 1,
                     f"{prefix}{name} must be an integer >= 1", getattr(self, name))
        names = self.field_names()
        if "gamma" in names:
            _require(_is_real(self.gamma) and 0 < self.gamma <= 1, f"{prefix}gamma must be in (0, 1]",
                     self.gamma)
        if "lr" in names:
            _require(_is_real(self.lr) and math.isfinite(self.lr) and self.lr > 0,
                     f"{prefix}lr must be a finite number > 0", self.lr)
        if getattr(self, "hidden", None) is not None:
            _require(all(_is_int(h) and h >= 1 for h in self.hidden),
                     f"{prefix}hidden must list layer sizes >= 1", list(self.hidden))
        batch = getattr(self, "minibatch_size", None)
        if batch is not None:
            _require(_is_int(batch) and 1 <= batch <= self.frames_per_iteration,
                     f"{prefix}minibatch_size must be a positive integer at most one iteration's "
                     f"{self.frames_per_iteration} frames ({prefix}num_envs={self.num_envs} x "
                     f"{prefix}steps={self.steps})", batch)


def _is_int(value: Any) -> bool:
    """An integer that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value: Any) -> bool:
    """A real number that is not a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _require(ok: bool, rule: str, value: Any) -> None:
    """Raises ``ValueError("<rule>, got <value>")`` unless ``ok``."""
    if not ok:
        raise ValueError(f"{rule}, got {value!r}")
