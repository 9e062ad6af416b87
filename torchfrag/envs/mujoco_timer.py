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
* A callback installed before a MuJoCo or DMC pool is made is cleared when the
  pool is made, with one INFO log line per process.  Most programs never
  asked for it: TorchRL 0.14's ``import torchrl.envs`` imports ``mujoco``
  itself, so every TorchRL script paid it.  Call :func:`keep_timer` first if
  you read ``mjData.timer``.

Example:
    >>> from torchfrag.envs import mujoco_timer
    >>> mujoco_timer.clear_timer()
    >>> mujoco_timer.timer_installed()
    False
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

from torchfrag._native import C

logger = logging.getLogger(__name__)

_keep = False
_logged = False


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


def keep_timer(keep: bool = True) -> None:
    """Stops (or, with ``False``, resumes) the clearing of the callback when a pool is made.

    For programs that read ``mjData.timer``: MuJoCo and DMC pools made
    afterwards leave an installed ``mjcb_time`` callback alone, and their
    steps pay for it.

    Args:
        keep: ``True`` keeps the callback; ``False`` restores the default.

    Example:
        >>> from torchfrag.envs.mujoco_timer import keep_timer
        >>> keep_timer()
        >>> keep_timer(False)
    """
    global _keep
    if not isinstance(keep, bool):
        raise TypeError(f"keep_timer(keep=...) expects a bool, got {type(keep).__name__}")
    _keep = keep


def clear_for_pool(env_id: str, option_names: object) -> None:
    """Clears the callback, if set, when a MuJoCo or DMC pool is made (unless :func:`keep_timer`).

    Logs once per process at INFO that it did, and why.

    Args:
        env_id: The native id of the pool being made.
        option_names: The names of its options.

    Example:
        >>> from torchfrag.envs.mujoco_timer import clear_for_pool
        >>> clear_for_pool("CartPole-v1", [])  # not a MuJoCo env: never touches it
    """
    global _logged
    if _keep or not uses_mujoco(env_id, option_names) or not timer_installed():
        return
    clear_timer()
    if not _logged:
        _logged = True
        logger.info(
            "%s: cleared MuJoCo's process-wide timer callback (mjcb_time), which `import mujoco` "
            "installs (TorchRL's `import torchrl.envs` does so) and which slowed every MuJoCo step "
            "of the pool (about +40%% CPU per step on light models); it only fills mjData.timer. "
            "Call torchfrag.envs.mujoco_timer.keep_timer() before making pools to keep it", env_id)
