"""Checkpoint files: written atomically, verified by a SHA-256 checksum on load.

File layout: one header line ``TORCHFRAG-CKPT 1 sha256=<hex> size=<n>\\n`` then
the ``torch.save`` payload. :func:`save_checkpoint` writes a temporary file
in the same folder, flushes and fsyncs it, then renames it over the target,
so a crash never leaves a half-written checkpoint under the final name.

Example:
    >>> import os, tempfile, torch
    >>> from torchfrag.runtime.checkpoint import load_checkpoint, save_checkpoint
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
    >>> _ = save_checkpoint({"w": torch.ones(2), "iteration": 3}, path)
    >>> load_checkpoint(path)["iteration"]
    3
"""
from __future__ import annotations

import hashlib
import io
import logging
import os
import tempfile
from typing import Any

import torch

logger = logging.getLogger(__name__)

__all__ = [
    "CheckpointError",
    "MAGIC",
    "find_latest_checkpoint",
    "load_checkpoint",
    "load_for_resume",
    "save_checkpoint",
]

MAGIC = b"TORCHFRAG-CKPT"
VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint file is missing, truncated, corrupted or of an unknown format."""


def save_checkpoint(state: dict[str, Any], path: str) -> str:
    """Writes ``state`` to ``path`` atomically (temp file + fsync + rename).

    Args:
        state: Tensors, state dicts and plain Python values.
        path: Target file; its folder is created if needed.

    Returns:
        The SHA-256 hex digest of the payload.
    """
    buf = io.BytesIO()
    torch.save(state, buf)
    payload = buf.getvalue()
    digest = hashlib.sha256(payload).hexdigest()
    header = b"%s %d sha256=%s size=%d\n" % (MAGIC, VERSION, digest.encode(), len(payload))
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-" + os.path.basename(path) + "-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:  # make the rename itself durable
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:  # pragma: no cover - platform dependent
        pass
    logger.debug("saved checkpoint %s (%d bytes, sha256 %s)", path, len(payload), digest)
    return digest


def load_checkpoint(path: str) -> dict[str, Any]:
    """Reads a checkpoint written by :func:`save_checkpoint`, verifying its checksum.

    Raises:
        CheckpointError: Missing file, unknown format, wrong size or checksum mismatch.
    """
    if not os.path.isfile(path):
        raise CheckpointError(f"checkpoint {path!r} does not exist")
    with open(path, "rb") as f:
        header = f.readline()
        payload = f.read()
    parts = header.rstrip(b"\n").split(b" ")
    if len(parts) != 4 or parts[0] != MAGIC:
        raise CheckpointError(f"{path!r} is not a torchfrag checkpoint (bad header)")
    try:
        version = int(parts[1])
        key_d, digest = parts[2].decode("ascii").split("=", 1)
        key_s, size_text = parts[3].decode("ascii").split("=", 1)
        size = int(size_text)
    except (ValueError, UnicodeDecodeError):
        raise CheckpointError(f"{path!r} has a damaged header line: {header[:120]!r}") from None
    if (key_d, key_s) != ("sha256", "size"):
        raise CheckpointError(f"{path!r} has a damaged header line: {header[:120]!r}")
    if version != VERSION:
        raise CheckpointError(f"{path!r} has checkpoint format {version}, expected {VERSION}")
    if len(payload) != size:
        raise CheckpointError(f"{path!r} is truncated: {len(payload)} of {size} payload bytes")
    actual = hashlib.sha256(payload).hexdigest()
    if actual != digest:
        raise CheckpointError(f"{path!r} is corrupted: sha256 {actual} != recorded {digest}")
    try:
        return torch.load(io.BytesIO(payload), weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means an unusable file
        # A payload whose checksum matches but holds a global the safe loader
        # refuses (or is otherwise not loadable) is as unusable as a torn one.
        raise CheckpointError(f"{path!r} does not load safely: {type(err).__name__}: "
                              f"{str(err).splitlines()[0] if str(err) else ''}") from err


def find_latest_checkpoint(folder: str) -> tuple[str, dict[str, Any]] | None:
    """Returns ``(path, state)`` of the newest checkpoint in ``folder`` that verifies.

    Newer files come first (by modification time); a file that fails its
    checks (truncated, corrupted, foreign) is skipped with a warning, and
    leftover temporary files of interrupted writes are ignored. Returns
    ``None`` when no checkpoint in the folder loads.

    Example:
        >>> import os, tempfile, torch
        >>> folder = tempfile.mkdtemp()
        >>> find_latest_checkpoint(folder) is None
        True
        >>> _ = save_checkpoint({"iteration": 1}, os.path.join(folder, "a.pt"))
        >>> find_latest_checkpoint(folder)[1]["iteration"]
        1
    """
    if not os.path.isdir(folder):
        return None
    candidates = [os.path.join(folder, n) for n in os.listdir(folder)
                  if n.endswith(".pt") and not n.startswith(".tmp-")]
    candidates.sort(key=lambda p: (os.path.getmtime(p), p), reverse=True)
    for path in candidates:
        try:
            return path, load_checkpoint(path)
        except (CheckpointError, OSError, ValueError, RuntimeError) as err:
            logger.warning("skipping unusable checkpoint %s: %s", path, err)
    return None


def load_for_resume(path: str) -> tuple[str, dict[str, Any]]:
    """Loads what ``resume=<path>`` names: a checkpoint file, a checkpoint folder, or a run folder.

    For a folder (or a run folder holding ``checkpoints/``) the newest
    checkpoint that verifies is used, so a crash during the last write falls
    back to the one before.

    Raises:
        CheckpointError: The file does not verify, or the folder holds no usable checkpoint.
    """
    if os.path.isdir(path):
        sub = os.path.join(path, "checkpoints")
        folder = sub if os.path.isdir(sub) else path
        found = find_latest_checkpoint(folder)
        if found is None:
            raise CheckpointError(f"no usable checkpoint in {folder!r}; nothing to resume from")
        return found
    return path, load_checkpoint(path)
