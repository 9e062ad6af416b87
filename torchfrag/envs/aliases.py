"""Gymnasium's ``ALE/<Game>-v5`` ids, served by the native Atari env with Gymnasium's meaning.

``ALE/Pong-v5`` is the pool's ``Pong-v5`` with the options that make it what
``gymnasium.make("ALE/Pong-v5")`` (ale-py's ``AtariEnv``) is: frame skip 4
without max-pooling (every skipped frame is emulated, even after a game over),
sticky actions with probability 0.25, raw RGB ``[210, 160, 3]`` frames (a
game's own screen size where it is taller), no stacking, no no-op or FIRE
reset, the minimal action set, a 108,000-frame (27,000-step) limit.

Gymnasium's keyword arguments of those ids are accepted with their meaning
(``frameskip``, ``repeat_action_probability``, ``full_action_space``,
``obs_type="rgb"``/``"grayscale"``, ``max_num_frames_per_episode``, ``mode``,
``difficulty``), as are the pool's own Atari options.

Sticky actions draw from the env's own random stream (seeded from the pool
seed), not from ALE's: with ``repeat_action_probability`` 0 (or 1) a
trajectory equals Gymnasium's step for step; with 0.25 the two follow the same
law, not the same draws.

Example:
    >>> from torchfrag.envs.aliases import resolve
    >>> native, options = resolve("ALE/Pong-v5", {"frameskip": 2})
    >>> native, options["frame_skip"], options["max_episode_steps"]
    ('Pong-v5', 2, 54000)
"""
from __future__ import annotations

from typing import Any

__all__ = ["ALE_PREFIX", "GYMNASIUM_V5", "is_alias", "resolve"]

ALE_PREFIX = "ALE/"

#: Native Atari options giving Gymnasium's ``ALE/<Game>-v5`` behaviour.
GYMNASIUM_V5: dict[str, Any] = {
    "frame_skip": 4,
    "repeat_action_probability": 0.25,
    "full_action_space": False,
    "max_pool": False,
    "gray_scale": False,
    "img_height": 0,  # the game's own screen
    "img_width": 0,
    "channels_last": True,
    "stack_num": 1,
    "noop_max": 0,
    "use_fire_reset": False,
    "episodic_life": False,
    "reward_clip": False,
}

#: ale-py's episode limit for the v5 ids, in emulator frames.
MAX_FRAMES_V5 = 108_000


def is_alias(env_id: Any) -> bool:
    """Whether ``env_id`` is a Gymnasium ``ALE/...`` id.

    Example:
        >>> from torchfrag.envs.aliases import is_alias
        >>> is_alias("ALE/Breakout-v5"), is_alias("Breakout-v5")
        (True, False)
    """
    return isinstance(env_id, str) and env_id.startswith(ALE_PREFIX)


def resolve(env_id: str, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The native id and options behind ``env_id`` (unchanged for a native id).

    Raises:
        ValueError: ``env_id`` is an ``ALE/`` id of a game the pool lacks, or
            a Gymnasium argument has a value the pool cannot give.

    Example:
        >>> from torchfrag.envs.aliases import resolve
        >>> resolve("CartPole-v1", {})
        ('CartPole-v1', {})
    """
    if not is_alias(env_id):
        return env_id, options
    from torchfrag.envs.spec import list_envs

    native = env_id[len(ALE_PREFIX):]
    if native not in list_envs():
        games = sorted(f"{ALE_PREFIX}{i}" for i in list_envs() if i.endswith("-v5"))
        hint = f" (e.g. {', '.join(games[:3])})" if games else " (Atari is not built)"
        raise ValueError(f"unknown env id {env_id!r}: no Atari game {native!r}; the"
                         f" {len(games)} ALE/<Game>-v5 ids are those of list_envs(){hint}")
    out = dict(GYMNASIUM_V5)
    user = dict(options)
    if "frameskip" in user:
        skip = user.pop("frameskip")
        if "frame_skip" in user:
            raise ValueError(f"{env_id}: give frameskip (Gymnasium's name) or frame_skip, not both")
        if isinstance(skip, bool) or not isinstance(skip, int):
            raise ValueError(f"{env_id}: frameskip must be an int >= 1 (a stochastic (low, high)"
                             f" frameskip is not supported), got {skip!r}")
        user["frame_skip"] = skip
    obs_type = user.pop("obs_type", "rgb")
    if obs_type == "grayscale":
        out["gray_scale"] = True
    elif obs_type != "rgb":
        raise ValueError(f"{env_id}: obs_type must be 'rgb' or 'grayscale' (no RAM observations),"
                         f" got {obs_type!r}")
    frames = user.pop("max_num_frames_per_episode", MAX_FRAMES_V5)
    out.update(user)
    if "max_episode_steps" not in user:
        skip = out["frame_skip"]
        steps_limit = -(-int(frames) // int(skip)) if isinstance(skip, int) and skip > 0 else 0
        out["max_episode_steps"] = steps_limit if frames and frames > 0 else 0
    return native, out
