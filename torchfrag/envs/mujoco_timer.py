"""MuJoCo's process-wide timer callback (``mjcb_time``) and the pool.

``libmujoco`` calls the global ``mjcb_time`` around every stage of ``mj_step``
when it is set, only to fill ``mjData.timer`` (profiling figures).  The
``mujoco`` Python package (4.0.0) installs such a callback when it is first
imported, and since ``torchfrag._C`` links the very same ``libmujoco``, every
step of the pool's MuJoCo and DeepMind Control Suite envs then pays for it
(CartpoleSwingup-v1 x8 on 2 threads: 5.8 -> 8.3 us of CPU per env step).
``mujoco.set_mjcb_time(None)`` does not remove it; :func:`clear_timer` does.
Neither the pool, Gymnasium nor dm_control reads ``mjData.timer``, and the
physics does not depend on it.

What torchfrag does about it:

* torchfrag's own imports of ``mujoco`` (frames of MuJoCo and DMC envs, the
  MuJoCo-Warp batch) run inside :func:`keep_timer_off`: a callback that the
  import installed is cleared again, so rendering leaves the process as fast
  as it was.
* A callback that *your* ``import mujoco`` installed is left alone; creating
  a MuJoCo or DMC pool while it is set warns once per process with
  :class:`MujocoTimerWarning`.  Call :func:`clear_timer` after your imports
  if you do not read ``mjData.timer``.

Example:
    >>> from torchfrag.envs import mujoco_timer
    >>> mujoco_timer.clear_timer()
    >>> mujoco_timer.timer_installed()
    False
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import warnings
from collections.abc import Iterator

from torchfrag._native import C

logger = logging.getLogger(__name__)

_warned = False


class MujocoTimerWarning(RuntimeWarning):
    """MuJoCo's timer callback is set and slows the pool's MuJoCo steps."""


def timer_installed() -> bool:
    """Whether ``libmujoco``'s process-wide ``mjcb_time`` callback is set.

    Returns:
        ``True`` once something (usually ``import mujoco``) set the callback
        and nothing cleared it.

    Example:
        >>> from torchfrag.envs.mujoco_timer import timer_installed
        >>> isinstance(timer_installed(), bool)
        True
    """
    return bool(C.mujoco_timer_installed())


def clear_timer() -> None:
    """Unsets ``libmujoco``'s process-wide ``mjcb_time`` callback.

    MuJoCo steps then skip the clock reads around each stage, for every MuJoCo
    user in the process (the ``mujoco`` package, Gymnasium, dm_control, the
    pool): ``mjData.timer`` stops being filled; nothing else changes (the
    physics does not read it).  ``mujoco.set_mjcb_time(f)`` installs a callback
    again.  Safe to call when none is set.

    Example:
        >>> import mujoco  # installs the callback
        >>> from torchfrag.envs.mujoco_timer import clear_timer, timer_installed
        >>> clear_timer()
        >>> timer_installed()
        False
    """
    C.clear_mujoco_timer()


@contextlib.contextmanager
def keep_timer_off() -> Iterator[None]:
    """Runs a block that may import ``mujoco``; clears a callback it installed.

    For torchfrag's own imports of ``mujoco`` (directly or through Gymnasium's
    MuJoCo envs): a callback that was already set when the block began was
    installed by the user's code and is kept.

    Example:
        >>> from torchfrag.envs.mujoco_timer import keep_timer_off, timer_installed
        >>> before = timer_installed()
        >>> with keep_timer_off():
        ...     import mujoco
        >>> timer_installed() == before
        True
    """
    was_set = timer_installed()
    try:
        yield
    finally:
        if not was_set and timer_installed():
            clear_timer()
            logger.debug("cleared the mjcb_time callback that torchfrag's import of mujoco"
                         " installed (it slows MuJoCo steps; only mjData.timer used it)")


def uses_mujoco(env_id: str, option_names: object) -> bool:
    """Whether a native env steps with ``libmujoco`` (the MuJoCo and DMC families).

    Args:
        env_id: A native env id.
        option_names: The names of its options (MuJoCo tasks have ``xml_file``).

    Example:
        >>> from torchfrag.envs.mujoco_timer import uses_mujoco
        >>> uses_mujoco("Hopper-v5", ["xml_file"]), uses_mujoco("CartPole-v1", [])
        (True, False)
    """
    from torchfrag.envs.dmc_observations import is_dmc

    return "xml_file" in option_names or is_dmc(env_id)  # type: ignore[operator]


def warn_if_installed(env_id: str, option_names: object) -> None:
    """Warns once per process when a MuJoCo or DMC pool is made while the callback is set.

    Args:
        env_id: The native id of the pool being made.
        option_names: The names of its options.

    Example:
        >>> from torchfrag.envs.mujoco_timer import warn_if_installed
        >>> warn_if_installed("CartPole-v1", [])  # not a MuJoCo env: never warns
    """
    global _warned
    if _warned or not timer_installed() or not uses_mujoco(env_id, option_names):
        return
    _warned = True
    warnings.warn(
        f"{env_id}: `import mujoco` installed MuJoCo's process-wide timer callback (mjcb_time), "
        "which slows every MuJoCo step of the pool (about +40% CPU per step on light models); "
        "call torchfrag.envs.mujoco_timer.clear_timer() after your imports to remove it (it only "
        "fills mjData.timer, which the pool, Gymnasium and dm_control do not read)",
        MujocoTimerWarning, stacklevel=_caller_level())


def _caller_level() -> int:
    """The ``stacklevel`` of the first caller outside torchfrag, from the caller of this function."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
    level, frame = 1, sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(package):
        frame, level = frame.f_back, level + 1
    return level
