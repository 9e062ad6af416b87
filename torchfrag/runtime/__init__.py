"""Executors for captured loops: local (in process) and RPC (:mod:`torchfrag.runtime.rpc`).

Example:
    >>> from torchfrag.runtime import POLICIES
    >>> POLICIES[:3]
    ('local', 'actors', 'async_actors')
"""
from __future__ import annotations

from torchfrag.runtime.local import POLICIES, Hook, RunResult, run

__all__ = ["POLICIES", "Hook", "RunResult", "run"]

from torchfrag.runtime.checkpoint import CheckpointError, load_checkpoint, save_checkpoint  # noqa: E402

__all__ += ["CheckpointError", "load_checkpoint", "save_checkpoint"]
