"""TorchRL ``GymEnv`` keyword arguments that :class:`~torchfrag.envs.PoolEnv` takes.

``PoolEnv(id, **kwargs)`` is meant as a literal rename of
``GymEnv(id, **kwargs)``. The arguments with a meaning for the pool
(``from_pixels``, ``pixels_only``, ``frame_skip``,
``categorical_action_encoding``, ``device``, ``batch_size``, ``num_envs``,
``allow_done_after_reset``, ``spec_locked``) are parameters of ``PoolEnv``
itself; this module takes the rest out of the keyword arguments: those that
change nothing here are accepted, the others are refused by name with what to
write instead.

Example:
    >>> from torchfrag.envs.gymenv_args import take_gymenv_kwargs
    >>> opts = {"disable_env_checker": True, "render_mode": "rgb_array", "noop_max": 0}
    >>> take_gymenv_kwargs("Pong-v5", opts)
    >>> opts
    {'noop_max': 0}
"""
from __future__ import annotations

from typing import Any

__all__ = ["GYMENV_ACCEPTED", "take_gymenv_kwargs", "check_batch_size"]

#: GymEnv arguments accepted at these values only (what they mean is what the pool does).
GYMENV_ACCEPTED: dict[str, tuple[Any, ...]] = {
    "disable_env_checker": (True, False, None),  # the pool has no env checker to run
    "num_workers": (1, None),
    "convert_actions_to_numpy": (True,),
    "backend": (None, "gymnasium"),
    "native_autoreset": (False,),
    "missing_obs_value": (None,),
    "render_mode": (None, "rgb_array"),  # frames come from env.render() either way
}

_REPLACEMENT = {
    "num_workers": "use num_envs=N (one pool, N envs on num_threads C++ threads) instead of "
                   "worker processes",
    "convert_actions_to_numpy": "actions are always handed to the pool as arrays",
    "backend": "the pool is its own backend (Gymnasium's semantics); there is no legacy gym",
    "native_autoreset": "the pool auto-resets finished envs in the step that finished them; "
                        "TorchRL sees an explicit reset served from that",
    "missing_obs_value": "observations are never missing (same-step auto-reset)",
    "render_mode": "use render_mode='rgb_array' or leave it out; frames are env.render(i)",
    "disable_env_checker": "give True, False or None",
}


def take_gymenv_kwargs(env_id: str, options: dict[str, Any]) -> None:
    """Removes GymEnv-only arguments from ``options``, refusing unsupported values.

    Raises:
        ValueError: An argument has a value the pool cannot give; the message
            names it and says what to write instead.

    Example:
        >>> from torchfrag.envs.gymenv_args import take_gymenv_kwargs
        >>> take_gymenv_kwargs("CartPole-v1", {"num_workers": 4})
        Traceback (most recent call last):
        ...
        ValueError: PoolEnv('CartPole-v1'): GymEnv's num_workers=4 is not supported: use num_envs=N (one pool, N envs on num_threads C++ threads) instead of worker processes
    """
    for name, allowed in GYMENV_ACCEPTED.items():
        if name not in options:
            continue
        value = options.pop(name)
        if not any(value is a or (type(value) is type(a) and value == a) for a in allowed):
            raise ValueError(f"PoolEnv({env_id!r}): GymEnv's {name}={value!r} is not supported:"
                             f" {_REPLACEMENT[name]}")


def check_batch_size(env_id: str, batch_size: Any, num_envs: int | None) -> None:
    """GymEnv's ``batch_size``: only the env's own (``[]``, or ``[num_envs]`` when batched).

    Example:
        >>> from torchfrag.envs.gymenv_args import check_batch_size
        >>> check_batch_size("CartPole-v1", [4], 4)
    """
    if batch_size is None:
        return
    try:
        got = tuple(int(b) for b in batch_size)
    except TypeError:
        got = (batch_size,)
    want = () if num_envs is None else (int(num_envs),)
    if got != want:
        raise ValueError(f"PoolEnv({env_id!r}): batch_size={list(got)} does not match the env's"
                         f" {list(want)}; the batch size follows num_envs (num_envs=N gives"
                         " [N], no num_envs gives [])")
