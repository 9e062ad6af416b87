"""Checkpoint files: written atomically, verified by a SHA-256 checksum on load.

File layout: one header line ``TORCHFRAG-CKPT 1 sha256=<hex> size=<n>\\n`` then
the ``torch.save`` payload. :func:`save_checkpoint` writes a temporary file
in the same folder, flushes and fsyncs it, then renames it over the target,
so a crash never leaves a half-written checkpoint under the final name. The
temporary file's name carries the writer's process id
(``.tmp-<name>-<pid>-<random>``): :func:`remove_partial_writes` deletes those
whose writer is gone (killed mid-write), and a run does so on its next start.

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
    "remove_partial_writes",
    "save_checkpoint",
]

MAGIC = b"TORCHFRAG-CKPT"
VERSION = 1


_TMP_PREFIX = ".tmp-"


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
    fd, tmp = tempfile.mkstemp(prefix=f"{_TMP_PREFIX}{os.path.basename(path)}-{os.getpid()}-",
                               dir=folder)
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


def remove_partial_writes(folder: str) -> list[str]:
    """Deletes the temporary files of :func:`save_checkpoint` writes that were killed.

    A temporary file is removed when the process that wrote it (the id in its
    name) no longer runs; files of live processes, this one included, are
    kept (they may be writes in progress). A name without a process id (an
    older torchfrag's) counts as a dead writer's.

    Returns:
        The removed paths.

    Example:
        >>> import os, tempfile
        >>> folder = tempfile.mkdtemp()
        >>> open(os.path.join(folder, ".tmp-latest.pt-999999999-ab12"), "wb").close()
        >>> [os.path.basename(p) for p in remove_partial_writes(folder)]
        ['.tmp-latest.pt-999999999-ab12']
    """
    if not os.path.isdir(folder):
        return []
    removed = []
    for name in sorted(os.listdir(folder)):
        if name.startswith(_TMP_PREFIX) and not _writer_alive(name):
            path = os.path.join(folder, name)
            try:
                os.unlink(path)
            except FileNotFoundError:  # removed by someone else meanwhile
                continue
            removed.append(path)
    if removed:
        logger.info("removed %d partial checkpoint file(s) of killed writes in %s", len(removed), folder)
    return removed


def _writer_alive(tmp_name: str) -> bool:
    """Whether the process whose id is in ``tmp_name`` (``.tmp-<name>-<pid>-<random>``) runs."""
    parts = tmp_name.rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return False
    pid = int(parts[1])
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # no such process (or beyond any pid)
        return False
    except PermissionError:  # another user's process
        return True
    return True


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
    back to the one before. Partial files of killed writes in the checkpoint's
    folder are removed (:func:`remove_partial_writes`).

    Raises:
        CheckpointError: The file does not verify, or the folder holds no usable checkpoint.
    """
    if os.path.isdir(path):
        sub = os.path.join(path, "checkpoints")
        folder = sub if os.path.isdir(sub) else path
        remove_partial_writes(folder)
        found = find_latest_checkpoint(folder)
        if found is None:
            raise CheckpointError(f"no usable checkpoint in {folder!r}; nothing to resume from")
        return found
    remove_partial_writes(os.path.dirname(os.path.abspath(path)))
    return path, load_checkpoint(path)
