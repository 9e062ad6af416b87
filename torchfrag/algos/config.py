"""The base of every algorithm config: a dataclass that is the single source of defaults.

A config is a plain dataclass; Hydra's YAML (``conf/algo/<name>.yaml``) only
overrides some of its fields. :class:`AlgoConfig` gives every config the same
protocol: built from a mapping (ignoring keys that are not fields, such as
Hydra's ``name`` or ``_target_``), turned back into a plain dict (picklable,
for worker factories), and ``frames_per_iteration``.

Example:
    >>> from dataclasses import dataclass
    >>> from torchfrag.algos.config import AlgoConfig
    >>> @dataclass
    ... class MyConfig(AlgoConfig):
    ...     lr: float = 1e-3
    >>> cfg = MyConfig.from_dict({"lr": 0.1, "name": "mine", "num_envs": 4})
    >>> cfg.lr, cfg.num_envs, cfg.frames_per_iteration
    (0.1, 4, 512)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar

__all__ = ["AlgoConfig"]


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
