"""The Python face of the C++ env pool: :func:`make` and :class:`EnvPool`."""
from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from torchfrag._native import C
from torchfrag.envs import mujoco_timer
from torchfrag.envs.aliases import resolve as resolve_alias
from torchfrag.envs.spec import EnvSpec

logger = logging.getLogger(__name__)

EnvError = C.EnvError
PoolClosedError = C.PoolClosedError

AUTORESET_MODES = ("next_step", "same_step")
_MAX_SEED = 2**64
# Env ids travel as int32; far below that, buffers for one row per env would
# exhaust memory long before a pool could be used.
MAX_ENVS = 2**22
#: Most worker threads one pool may start (a guard against typos such as ``num_threads=100000``,
#: which would fail deep in thread creation).
MAX_THREADS = 4096


def normalize_options(env_id: str, options: dict[str, Any]) -> dict[str, Any]:
    """Accepts Gymnasium's ``<name>_range=(low, high)`` for options declared as
    ``<name>_min``/``<name>_max`` (e.g. MuJoCo's ``healthy_z_range``).

    Example:
        >>> normalize_options("Hopper-v5", {"healthy_z_range": (0.7, float("inf"))})
        {'healthy_z_min': 0.7, 'healthy_z_max': inf}
    """
    ranges = [k for k in options if k.endswith("_range")]
    if not ranges:
        return options
    declared = {o["name"] for o in C.env_spec(env_id, {})["options"]}
    out = dict(options)
    for key in ranges:
        base = key[: -len("_range")]
        if key in declared or not {f"{base}_min", f"{base}_max"} <= declared:
            continue
        value = out.pop(key)
        try:
            low, high = value
        except (TypeError, ValueError):
            raise ValueError(f"option '{key}' expects a (low, high) pair, got {value!r}") from None
        out[f"{base}_min"], out[f"{base}_max"] = float(low), float(high)
    return out


def per_env_seeds(seed: int | Sequence[int] | None, num_envs: int) -> list[int]:
    """Turns a pool seed (or one seed per env) into the seeds the envs use.

    Env ``i`` of a pool seeded with ``seed`` draws from ``hash(seed, i)``, so
    its trajectory depends neither on ``num_threads`` nor on the order async
    results arrive in. ``None`` draws a seed from the OS.
    """
    if seed is None:
        seed = int.from_bytes(os.urandom(8), "little")
    if _is_int(seed):
        seed = check_seed(seed)
        return [C.env_seed(seed, i) for i in range(num_envs)]
    # A str is a sequence too ("12" would become seeds [1, 2]): refused with floats.
    if isinstance(seed, (str, bytes)) or not isinstance(seed, (Sequence, np.ndarray)):
        raise TypeError("seed must be an int in [0, 2**64), a sequence of such ints (one per env)"
                        f" or None, got {type(seed).__name__} {seed!r}")
    seeds = list(seed)
    for s in seeds:
        if not _is_int(s):
            raise TypeError(f"seeds must be ints in [0, 2**64), got {type(s).__name__} {s!r} in"
                            f" {seed!r}")
        if not 0 <= int(s) < _MAX_SEED:
            raise ValueError(f"seeds must be in [0, 2**64), got {s}")
    if len(seeds) != num_envs:
        raise ValueError(f"got {len(seeds)} seeds for {num_envs} envs")
    return [int(s) for s in seeds]


def check_seed(seed: Any) -> int:
    """A pool seed as an ``int``; anything else (a bool, a float, a str, out of range) is refused.

    Example:
        >>> check_seed(1.5)
        Traceback (most recent call last):
        ...
        TypeError: seed must be an int in [0, 2**64), got float 1.5
    """
    if not _is_int(seed):
        raise TypeError(f"seed must be an int in [0, 2**64), got {type(seed).__name__} {seed!r}")
    if not 0 <= int(seed) < _MAX_SEED:
        raise ValueError(f"seed must be in [0, 2**64), got {seed}")
    return int(seed)


def _is_int(value: Any) -> bool:
    """An integer that is not a bool (``True`` is no seed or size)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def as_action_array(actions: Any) -> Any:
    """A torch tensor as NumPy (detached, on the CPU; bfloat16 as float32); others unchanged."""
    # An ndarray first: the module test below is a measurable part of a ~20 us sync step
    # of 8 light envs.
    if type(actions) is np.ndarray:
        return actions
    if type(actions).__module__.startswith("torch") and hasattr(actions, "detach"):
        import torch

        t = actions.detach().cpu()
        if t.dtype == torch.bfloat16:  # NumPy has no bfloat16
            t = t.float()
        return t.numpy()
    return actions


class EnvPool:
    """A batch of native envs stepped by a C++ thread pool, GIL released.

    Sync use: :meth:`reset` then :meth:`step` with one action per env; rows
    come back in request order. Async use: :meth:`async_reset` or
    :meth:`send`, then :meth:`recv`, which returns the first ``batch_size``
    envs to finish, tagged by ``info["env_id"]``.

    Returned arrays are views of buffers the pool owns and reuses: a sync
    result stays valid until the second following sync call, an async batch
    until the next :meth:`recv`. Copy what you keep longer.

    Auto-reset: with ``"next_step"`` (Gymnasium's default), the step after a
    finished episode ignores the action, resets the env and returns the first
    observation with reward 0. With ``"same_step"`` the env is reset in the
    same call: ``obs`` is the new episode's first observation and
    ``info["final_obs"]`` holds the step's own observation (for every row; it
    differs from ``obs`` exactly where the episode ended); likewise
    ``info["final_<name>"]`` holds each env info of the step itself.

    Async results come back in the order envs *finish*: a slow env does not
    hold up the envs that finished before it.

    Threads: a pool serves one :meth:`reset`/:meth:`step`/:meth:`send`/
    :meth:`seed` call at a time; such a call made while another thread's call
    runs raises ``RuntimeError("the pool is in use by another thread ...")``
    at once (it never waits and never steps an env twice). :meth:`recv` may
    run on another thread than :meth:`send`, one :meth:`recv` at a time.
    :meth:`close` may come from any thread: it waits for the calls in
    progress, which then end with :class:`PoolClosedError`.

    Signals: blocking waits (a sync step waiting for its workers,
    :meth:`recv`) run Python's signal handlers every 20 ms, so Ctrl-C raises
    ``KeyboardInterrupt``. An interrupted :meth:`recv` leaves the pool as it
    was; an interrupted :meth:`step`/:meth:`reset` closes the pool (its envs
    were still stepping) and later calls say so.

    Fork: in a child made by ``fork`` (``os.fork``, ``multiprocessing``'s
    fork start method) the parent's pools are unusable (every call raises
    :class:`PoolClosedError`), :meth:`close` does nothing, and destroying
    them touches nothing: make new pools in the child.

    Args:
        env_id: A registered id, see :func:`torchfrag.envs.list_envs`, or
            Gymnasium's ``ALE/<Game>-v5`` (:mod:`torchfrag.envs.aliases`).
        num_envs: Number of envs.
        batch_size: Rows per :meth:`recv` (async); defaults to ``num_envs``.
        num_threads: Worker threads; defaults to ``min(num_envs, cores)``.
        seed: Pool seed, or one seed per env, or ``None`` for a random seed.
        autoreset: ``"next_step"`` or ``"same_step"``.
        wait_policy: How worker threads and the calling thread wait for work
            and results: ``"adaptive"`` (default) spins up to ``spin_us``
            (50 us) before sleeping and stops spinning where spins keep
            failing; ``"spin"`` always spins up to ``spin_us`` (2000 us) first,
            for the lowest latency on a dedicated machine at the cost of CPU
            between calls; ``"block"`` sleeps at once (least CPU). Every wait
            ends asleep, so an idle pool uses no CPU.
        spin_us: The spin window in microseconds, in ``[0, 10000]``;
            ``None`` for the policy's default.
        **options: Env options (see ``spec(env_id).options``); physical
            parameters marked ``per_env`` accept one value per env.

    Example:
        >>> import numpy as np
        >>> from torchfrag.envs import make
        >>> pool = make("CartPole-v1", num_envs=4, seed=0)
        >>> obs, info = pool.reset()
        >>> obs.shape
        (4, 4)
        >>> obs, reward, terminated, truncated, info = pool.step(np.zeros(4, dtype=np.int64))
        >>> reward.tolist()
        [1.0, 1.0, 1.0, 1.0]
        >>> pool.close()
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int = 1,
        batch_size: int | None = None,
        num_threads: int | None = None,
        seed: int | Sequence[int] | None = 0,
        autoreset: str = "next_step",
        wait_policy: str = "adaptive",
        spin_us: float | None = None,
        **options: Any,
    ) -> None:
        if not isinstance(wait_policy, str):
            raise TypeError(f"wait_policy must be a str, got {type(wait_policy).__name__}")
        if spin_us is not None and (isinstance(spin_us, bool)
                                    or not isinstance(spin_us, (int, float, np.integer,
                                                                np.floating))):
            raise TypeError(f"spin_us must be a number of microseconds or None, got"
                            f" {type(spin_us).__name__}")
        if spin_us is not None and spin_us < 0:  # negative is the native side's "default"
            raise ValueError(f"spin_us must be a number in [0, 10000] (microseconds), got {spin_us}")
        for name, value in (("num_envs", num_envs), ("batch_size", batch_size),
                            ("num_threads", num_threads)):
            if value is not None and (isinstance(value, bool) or not isinstance(
                    value, (int, np.integer))):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if num_envs <= 0:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs}")
        if num_envs > MAX_ENVS:
            raise ValueError(f"num_envs must be at most {MAX_ENVS}, got {num_envs}")
        if batch_size is not None and not 1 <= batch_size <= num_envs:
            raise ValueError(f"batch_size must be in [1, num_envs={num_envs}], got {batch_size}")
        if num_threads is not None and not 1 <= num_threads <= MAX_THREADS:
            raise ValueError(f"num_threads must be in [1, {MAX_THREADS}], got {num_threads}")
        if autoreset not in AUTORESET_MODES:
            raise ValueError(f"autoreset must be one of {AUTORESET_MODES}, got {autoreset!r}")
        #: The id asked for (``ALE/Pong-v5``); ``env_id`` is the native one behind it.
        self.requested_id = env_id
        env_id, options = resolve_alias(env_id, options)
        options = normalize_options(env_id, options)
        self.env_id = env_id
        self.autoreset = autoreset
        self.options = dict(options)
        self._pool = C.Pool(env_id, int(num_envs), int(batch_size or 0), int(num_threads or 0),
                            per_env_seeds(seed, num_envs), autoreset, options,
                            wait_policy, -1.0 if spin_us is None else float(spin_us))
        self.spec = EnvSpec.from_native(C.env_spec(env_id, options))
        mujoco_timer.clear_for_pool(env_id, self.spec.options)
        self._renderer: Any = None  # a FrameRenderer, made by the first render()
        logger.debug("made %s x%d (batch %d, %d threads)", env_id, self.num_envs,
                     self.batch_size, self.num_threads)

    # -- sizes and spaces ---------------------------------------------------------
    @property
    def num_envs(self) -> int:
        """Number of envs in the pool."""
        return self._pool.num_envs

    @property
    def wait_policy(self) -> str:
        """How the pool's threads wait: ``"adaptive"``, ``"spin"`` or ``"block"``."""
        return self._pool.wait_policy

    @property
    def spin_us(self) -> float:
        """The spin window in microseconds (the policy's default when none was given)."""
        return self._pool.spin_us

    @property
    def batch_size(self) -> int:
        """Rows returned by each :meth:`recv`."""
        return self._pool.batch_size

    @property
    def num_threads(self) -> int:
        """Worker threads stepping envs."""
        return self._pool.num_threads

    @property
    def observation_space(self):
        """Space of one env's observation."""
        return self.spec.observation_space

    @property
    def action_space(self):
        """Space of one env's action."""
        return self.spec.action_space

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._pool.closed

    @property
    def in_flight(self) -> int:
        """Envs sent and not yet returned by :meth:`recv`."""
        return self._pool.in_flight

    def random_actions(self, count: int | None = None,
                       rng: np.random.Generator | None = None) -> np.ndarray:
        """A batch of uniformly random valid actions (``count`` rows, default ``num_envs``).

        Example:
            >>> from torchfrag.envs import make
            >>> make("Pendulum-v1", num_envs=3).random_actions().shape
            (3, 1)
        """
        n = self.num_envs if count is None else int(count)
        rng = np.random.default_rng() if rng is None else rng
        space = self.action_space
        if hasattr(space, "n"):
            return rng.integers(0, space.n, size=n, dtype=np.int64)
        return rng.uniform(space.low, space.high, size=(n, *space.shape)).astype(np.float32)

    # -- sync ---------------------------------------------------------------------
    def reset(self, env_ids: Sequence[int] | np.ndarray | None = None,
              seed: int | Sequence[int] | None = None) -> tuple[np.ndarray, dict]:
        """Resets envs (all by default) and returns ``(obs, info)``.

        Args:
            env_ids: Envs to reset; rows follow this order.
            seed: Reseed before resetting: a pool seed (env ``i`` gets
                ``hash(seed, i)``, as at construction) or one seed per reset env.
        """
        if seed is not None:
            self.seed(seed, env_ids)
        return self._pool.reset(env_ids)

    def step(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Steps envs (all by default): ``(obs, reward, terminated, truncated, info)``.

        ``info`` holds ``env_id``, ``elapsed_step``, the env's own infos and,
        with ``autoreset="same_step"``, ``final_obs``.
        """
        return self._pool.step(as_action_array(actions), env_ids)

    def seed(self, seed: int | Sequence[int],
             env_ids: Sequence[int] | np.ndarray | None = None) -> None:
        """Reseeds envs; the new seeds take effect at their next reset."""
        ids = np.arange(self.num_envs) if env_ids is None else np.asarray(env_ids)
        if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
            raise TypeError(f"env_ids must be a 1-D sequence of integers, got {env_ids!r}")
        bad = ids[(ids < 0) | (ids >= self.num_envs)]
        if bad.size:
            raise ValueError(f"env id {int(bad[0])} is out of range [0, {self.num_envs}) "
                             f"(env_ids={ids.tolist()})")
        if _is_int(seed):
            pool_seeds = per_env_seeds(int(seed), self.num_envs)
            seeds = [pool_seeds[int(i)] for i in ids]
        else:
            seeds = per_env_seeds(seed, len(ids))
        self._pool.seed(ids, seeds)

    # -- async --------------------------------------------------------------------
    def send(self, actions: Any, env_ids: Sequence[int] | np.ndarray | None = None) -> None:
        """Starts stepping envs (all by default) without waiting."""
        self._pool.send(as_action_array(actions), env_ids)

    def async_reset(self, env_ids: Sequence[int] | np.ndarray | None = None,
                    seed: int | Sequence[int] | None = None) -> None:
        """Starts resetting envs (all by default); results arrive via :meth:`recv`."""
        if seed is not None:
            self.seed(seed, env_ids)
        self._pool.async_reset(env_ids)

    def recv(self, timeout: float | None = None
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        """Waits for the next ``batch_size`` results.

        Raises:
            TimeoutError: Nothing arrived within ``timeout`` seconds.
            RuntimeError: Fewer than ``batch_size`` envs are in flight (the
                call would wait forever).
            EnvError: An env raised in a worker thread.
        """
        return self._pool.recv(timeout)

    # -- rendering ----------------------------------------------------------------
    def render(self, env_index: int = 0, final: bool = False) -> np.ndarray:
        """An RGB frame (``[H, W, 3]`` uint8) of env ``env_index`` as it is now.

        The frame is Gymnasium's ``render()`` of the same state: ALE's raw
        screen for Atari, Gymnasium's own drawing for classic control,
        LunarLander and BipedalWalker (needs ``pygame``; LunarLander without
        the engines' flame particles) and MuJoCo (MuJoCo's offscreen OpenGL renderer with
        Gymnasium's camera; headless: EGL or OSMesa), the ``minigrid``
        package's for MiniGrid, see
        :mod:`torchfrag.envs.rendering`. Costs nothing until called. The env
        must have been reset and must not be in flight.

        ``final=True``: the frame of the terminal state of the env's last
        finished episode, which :meth:`keep_final_frames` must have asked for
        (with ``autoreset="same_step"`` that state is gone once the step that
        ended the episode returns).

        Example:
            >>> from torchfrag.envs import make
            >>> pool = make("Breakout-v5", num_envs=2, noop_max=0)
            >>> _ = pool.reset()
            >>> pool.render(1).shape
            (210, 160, 3)
        """
        if isinstance(env_index, bool) or not isinstance(env_index, (int, np.integer)):
            raise TypeError(f"env_index must be an int in [0, {self.num_envs}), got"
                            f" {type(env_index).__name__} {env_index!r}")
        data = self._pool.render_data(int(env_index), bool(final))
        if self._renderer is None:
            self.configure_render()
        return self._renderer.frame(data, int(env_index))

    def keep_final_frames(self, env_index: int = 0, keep: bool = True) -> None:
        """Keep what the terminal states of env ``env_index`` render, for ``render(i, final=True)``.

        Costs one capture of the render data (the screen, or the state) per
        finished episode of that env, nothing for the others.

        Example:
            >>> import numpy as np
            >>> from torchfrag.envs import make
            >>> pool = make("CartPole-v1", autoreset="same_step")
            >>> pool.keep_final_frames(0)
            >>> _ = pool.reset()
            >>> while not pool.step(np.ones(1, dtype=np.int64))[2][0]: pass
            >>> pool.render(0, final=True).shape
            (400, 600, 3)
        """
        from torchfrag.envs.rendering import RenderError, renderable

        if isinstance(env_index, bool) or not isinstance(env_index, (int, np.integer)):
            raise TypeError(f"env_index must be an int in [0, {self.num_envs}), got"
                            f" {type(env_index).__name__} {env_index!r}")
        if keep:
            try:
                renderable(self.env_id)
            except RenderError as e:
                raise ValueError(str(e)) from None
        self._pool.keep_final_render(int(env_index), bool(keep))

    def configure_render(self, **render_kwargs: Any) -> None:
        """Sets rendering arguments: MuJoCo's ``width``, ``height``, ``camera_id``,
        ``camera_name``, ``default_camera_config`` (Gymnasium's names and defaults)."""
        from torchfrag.envs.rendering import FrameRenderer

        renderer = FrameRenderer(self.env_id, self.options, render_kwargs)
        if self._renderer is not None:
            self._renderer.close()
        self._renderer = renderer

    # -- lifetime -----------------------------------------------------------------
    def close(self) -> None:
        """Stops the worker threads and frees the envs. Idempotent."""
        renderer = getattr(self, "_renderer", None)
        if renderer is not None:
            self._renderer = None
            renderer.close()
        self._pool.close()

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"EnvPool({self.env_id!r}, num_envs={self.num_envs}, batch_size={self.batch_size},"
                f" num_threads={self.num_threads}, autoreset={self.autoreset!r})")


def make(
    env_id: str,
    num_envs: int = 1,
    batch_size: int | None = None,
    num_threads: int | None = None,
    seed: int | Sequence[int] | None = 0,
    autoreset: str = "next_step",
    **options: Any,
) -> EnvPool:
    """Builds an :class:`EnvPool` of ``num_envs`` copies of ``env_id``.

    See :class:`EnvPool` for the arguments.

    Example:
        >>> from torchfrag.envs import make
        >>> with make("Pendulum-v1", num_envs=2, g=[9.81, 3.7]) as pool:
        ...     obs, info = pool.reset()
        >>> obs.shape
        (2, 3)
    """
    return EnvPool(env_id, num_envs=num_envs, batch_size=batch_size, num_threads=num_threads,
                   seed=seed, autoreset=autoreset, **options)
