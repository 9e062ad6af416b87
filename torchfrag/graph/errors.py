"""Errors raised while capturing a loop, and how they find the offending line."""
from __future__ import annotations

import inspect
import linecache
import os
import re

__all__ = ["CaptureError", "MissingKeyError", "user_location", "location_from_stack_trace"]

_SKIP_PARTS = (
    os.sep + "torch" + os.sep,
    os.sep + "tensordict" + os.sep,
    os.path.join("torchfrag", "graph") + os.sep,
    os.sep + "contextlib.py",
)


class CaptureError(RuntimeError):
    """A loop cannot be captured as a fragment graph; the message says where and how to fix it."""

    def __init__(self, message: str, location: tuple[str, int, str] | None = None,
                 fix: str | None = None) -> None:
        self.location = location
        self.fix = fix
        text = message
        if location is not None:
            path, line, code = location
            text += f"\n  at {path}:{line}: {code.strip()}"
        if fix:
            text += f"\n  fix: {fix}"
        super().__init__(text)


class MissingKeyError(CaptureError):
    """A fragment reads a key that nothing upstream produces and no input supplies."""


def _skipped(path: str) -> bool:
    return any(part in path for part in _SKIP_PARTS)


def user_location() -> tuple[str, int, str] | None:
    """The innermost frame on the stack that is user code (not torch, tensordict or capture)."""
    frame = inspect.currentframe()
    while frame is not None:
        path = frame.f_code.co_filename
        if not _skipped(path):
            line = frame.f_lineno
            return path, line, linecache.getline(path, line)
        frame = frame.f_back
    return None


_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+), in [^\n]*\n\s*([^\n]*)')


def location_from_stack_trace(stack_trace: str | None) -> tuple[str, int, str] | None:
    """The last user-code frame in an fx node's recorded ``stack_trace``."""
    if not stack_trace:
        return None
    found = None
    for m in _FRAME_RE.finditer(stack_trace):
        path = m.group(1)
        if not _skipped(path):
            found = (path, int(m.group(2)), m.group(3))
    return found
