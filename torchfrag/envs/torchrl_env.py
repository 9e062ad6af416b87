"""The env pool as a TorchRL environment: :class:`PoolEnv`.

:class:`PoolEnv` wraps a same-step auto-resetting :class:`~torchfrag.envs.EnvPool`
in TorchRL's :class:`~torchrl.envs.EnvBase`, so it works wherever a TorchRL env
does (``env.rollout``, :class:`~torchrl.envs.TransformedEnv`, TorchRL's
collectors) while stepping every env with one C++ call per step.

How auto-reset maps onto TorchRL. The pool resets a finished env in the very
call that finished it and hands back both observations: the terminal one (kept
under ``"next"``, so no extra zero-reward transition appears at episode
boundaries) and the new episode's first one, which :class:`PoolEnv` caches.
A later partial reset (``"_reset"``) of such an env is served from that cache
without calling the pool again; resetting an env that is not waiting for a
reset, or one that was reseeded, resets it for real.

Example:
    >>> from torchfrag.envs import PoolEnv
    >>> env = PoolEnv("CartPole-v1", num_envs=4, seed=0)
    >>> td = env.rollout(10, break_when_any_done=False)
    >>> td.batch_size
    torch.Size([4, 10])
    >>> td["next", "reward"].shape
    torch.Size([4, 10, 1])
    >>> env.close()
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from gymnasium import spaces
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Bounded, Categorical, Composite, MultiCategorical, OneHot, Unbounded
from torchrl.data.utils import numpy_to_torch_dtype_dict
from torchrl.envs import EnvBase

from torchfrag.envs import dmc_observations
from torchfrag.envs._torchrl_compat import make_compatible_policy, new_tensordict, step_mdp
from torchfrag.envs.aliases import is_alias
from torchfrag.envs.gymenv_args import check_batch_size, take_gymenv_kwargs
from torchfrag.envs.lives import AleLives
from torchfrag.envs.pixels import PixelFrames
from torchfrag.envs.pool import EnvPool, check_seed
from torchfrag.envs.spec import EnvSpec, spec

logger = logging.getLogger(__name__)

__all__ = ["PoolEnv", "observation_spec_from", "action_spec_from"]


#: TensorDict keys TorchRL (or its common transforms) own; an env info with
#: one of these names is exposed as ``"info_<name>"`` (e.g. Atari's
#: ``"reward"`` and ``"terminated"`` infos).
RESERVED_KEYS = frozenset({
    "observation", "action", "reward", "done", "terminated", "truncated", "next", "_reset",
    "_step", "collector", "is_init", "step_count", "episode_reward", "final_obs", "env_id",
})


def info_key(name: str) -> str:
    """TensorDict key of the env info ``name``: ``name``, or ``"info_<name>"`` if reserved.

    Example:
        >>> from torchfrag.envs.torchrl_env import info_key
        >>> info_key("lives"), info_key("reward")
        ('lives', 'info_reward')
    """
    return f"info_{name}" if name in RESERVED_KEYS else name


def resolve_info_keys(spec: EnvSpec, info_keys: Sequence[str] | None) -> dict[str, str]:
    """Maps TensorDict keys to pool info names for the requested infos.

    ``info_keys`` holds pool info names (``"elapsed_step"``, ``"lives"``,
    ``"reward"``...) or their TensorDict keys; ``None`` selects all of them.
    """
    available = {info_key(n): n for n in ("elapsed_step", *spec.infos)}
    if info_keys is None:
        return dict(available)
    if isinstance(info_keys, str):  # iterating it would look up 's', 't', ...
        raise TypeError(f"info_keys must be a sequence of info names, got the string "
                        f"{info_keys!r}; write [{info_keys!r}]")
    out: dict[str, str] = {}
    for name in info_keys:
        key = name if name in available else info_key(name)
        if key not in available:
            raise ValueError(f"unknown info key {name!r} for {spec.id}; available: "
                             f"{sorted(available.values())}")
        out[key] = available[key]
    return out


def remap_infos(info: dict, names: dict[str, str]) -> dict:
    """Returns ``info`` with env infos under their TensorDict keys (see :func:`info_key`)."""
    out = dict(info)
    for key, name in names.items():
        if key != name:
            out[key] = info[name]
    return out


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    try:
        return numpy_to_torch_dtype_dict[np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"no torch dtype for numpy dtype {dtype}") from None


def _integer_bounds(bound: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Float bounds as ``dtype`` integers, infinities as the type's extremes.

    Done in the integer type: int64's maximum has no float64 value, so clipping
    in float64 would wrap it round to the minimum.
    """
    info = np.iinfo(dtype)
    out = np.where(bound > 0, info.max, info.min).astype(dtype)
    finite = np.isfinite(bound)
    out[finite] = np.clip(bound[finite], info.min, info.max).astype(dtype)
    return out


def _array_spec(shape: tuple[int, ...], dtype: np.dtype, low: np.ndarray | None,
                high: np.ndarray | None, device: torch.device | None):
    # Not TorchRL's GymEnv conversion (``torchrl.envs.libs.gym._gym_to_torchrl_spec_transform``):
    # it is private, takes Gymnasium spaces (the pool's infos are not spaces) and would turn
    # an int32 info with an infinite bound into garbage bounds. The rules are GymEnv's.
    tdtype = _torch_dtype(dtype)
    if tdtype == torch.bool:
        return Categorical(2, shape=shape, dtype=torch.bool, device=device)
    if low is not None and high is not None:
        low = np.broadcast_to(np.asarray(low, dtype=np.float64), shape)
        high = np.broadcast_to(np.asarray(high, dtype=np.float64), shape)
        # GymEnv's rule: Unbounded only when no bound at all is finite, so
        # CartPole keeps its finite per-dimension bounds (the others are +-inf).
        if np.any(np.isfinite(low)) or np.any(np.isfinite(high)):
            if not tdtype.is_floating_point:  # +-inf has no integer value: the type's range
                low = _integer_bounds(low, np.dtype(dtype))
                high = _integer_bounds(high, np.dtype(dtype))
            lo = torch.as_tensor(low.copy(), dtype=tdtype)
            hi = torch.as_tensor(high.copy(), dtype=tdtype)
            return Bounded(low=lo, high=hi, shape=shape, dtype=tdtype, device=device)
    return Unbounded(shape=shape, dtype=tdtype, device=device)


def _categorical_spec(space: spaces.Discrete | spaces.MultiDiscrete, lead: tuple[int, ...],
                      device: torch.device | None) -> Categorical | MultiCategorical | Bounded:
    """TorchRL spec of a categorical observation: integer indices, as GymEnv keeps them with
    ``categorical_action_encoding=True`` (``Bounded`` where the categories do not start at 0)."""
    if isinstance(space, spaces.Discrete):
        if int(space.start) == 0:
            return Categorical(int(space.n), shape=lead, dtype=torch.int64, device=device)
        low, high = np.asarray(space.start), np.asarray(space.start + space.n - 1)
        return _array_spec(lead, np.dtype(np.int64), low, high, device)
    shape = (*lead, *space.shape)
    if (np.asarray(space.start) == 0).all():
        # MultiCategorical wants one category count per element, batch dims included.
        nvec = torch.as_tensor(space.nvec, dtype=torch.int64).expand(shape).clone()
        return MultiCategorical(nvec, shape=shape,
                                dtype=torch.int64, device=device)
    return _array_spec(shape, np.dtype(np.int64), space.start, space.start + space.nvec - 1,
                       device)


def observation_spec_from(spec: EnvSpec, num_envs: int | None, info_keys: Sequence[str],
                          device: torch.device | None = None, *,
                          observation_key: str = "observation",
                          observation_dtype: torch.dtype | None = None) -> Composite:
    """Builds the observation :class:`~torchrl.data.Composite` of a pool.

    Args:
        spec: The pool's :class:`~torchfrag.envs.EnvSpec`.
        num_envs: Leading batch dimension; ``None`` for none (one unbatched env).
        info_keys: Pool info names exposed as extra observation entries, under
            :func:`info_key` names. ``"elapsed_step"`` maps to an int32 entry of
            shape ``[num_envs]``.
        device: Spec device.
        observation_key: Key of the observation (``"pixels"`` for frames).
        observation_dtype: Observation dtype if not the env's own (e.g. float32
            for MuJoCo's float64).

    Example:
        >>> from torchfrag.envs import spec
        >>> from torchfrag.envs.torchrl_env import observation_spec_from
        >>> observation_spec_from(spec("CartPole-v1"), 8, [])["observation"].shape
        torch.Size([8, 4])
    """
    space = spec.observation_space
    lead = () if num_envs is None else (num_envs,)
    if isinstance(space, spaces.Box):
        obs = _array_spec((*lead, *space.shape), space.dtype, space.low, space.high, device)
    elif isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)):
        obs = _categorical_spec(space, lead, device)
    else:
        raise TypeError(f"unsupported observation space {space}")
    if observation_key == "pixels":  # GymEnv's pixel entries are Unbounded uint8
        obs = Unbounded(shape=obs.shape, dtype=obs.dtype, device=device)
    if observation_dtype is not None and observation_dtype != obs.dtype:
        obs = obs.to(observation_dtype)
    entries: dict[str, Any] = {observation_key: obs}
    for name in info_keys:
        if name == "elapsed_step":
            entries[name] = Unbounded(shape=lead, dtype=torch.int32, device=device)
            continue
        info = spec.infos[name]
        entries[info_key(name)] = _array_spec((*lead, *info.shape), info.dtype, info.low,
                                              info.high, device)
    return Composite(entries, shape=lead, device=device)


def action_spec_from(spec: EnvSpec, num_envs: int | None, device: torch.device | None = None,
                     categorical: bool = True):
    """Builds the TorchRL action spec of a pool: ``Categorical`` (or ``OneHot``) or ``Bounded``.

    ``num_envs=None`` gives an unbatched spec; ``categorical=False`` a
    ``OneHot`` spec for discrete actions (GymEnv's default encoding).

    Example:
        >>> from torchfrag.envs import spec
        >>> from torchfrag.envs.torchrl_env import action_spec_from
        >>> action_spec_from(spec("CartPole-v1"), 8).n
        2
    """
    space = spec.action_space
    lead = () if num_envs is None else (num_envs,)
    if isinstance(space, spaces.Discrete):
        if not categorical:
            return OneHot(int(space.n), shape=(*lead, int(space.n)), dtype=torch.int64,
                          device=device)
        return Categorical(int(space.n), shape=lead, dtype=torch.int64, device=device)
    if isinstance(space, spaces.Box):
        shape = (*lead, *space.shape)
        low = torch.as_tensor(np.broadcast_to(space.low, shape).copy(), dtype=torch.float32)
        high = torch.as_tensor(np.broadcast_to(space.high, shape).copy(), dtype=torch.float32)
        return Bounded(low=low, high=high, shape=shape, dtype=torch.float32, device=device)
    raise TypeError(f"unsupported action space {space}")


class PoolEnv(EnvBase):
    """A :class:`~torchfrag.envs.EnvPool` as a TorchRL environment.

    Two modes, chosen by ``num_envs``:

    - ``PoolEnv(id, num_envs=N)``: batched, batch size ``[N]``, as
      ``GymEnv(id, num_envs=N)``; every env info exposed; one C++ call steps
      all envs.
    - ``PoolEnv(id)`` (``num_envs`` not given): one env, unbatched (batch size
      ``[]``), as ``GymEnv(id)``, with no info entries.

    Discrete actions are ``OneHot`` in both, as GymEnv's default
    (``categorical_action_encoding=False``), so replacing ``GymEnv`` is a
    one-line change; ``categorical_action_encoding=True`` gives ``Categorical``
    indices, what torchfrag's algorithms and the async fast path of
    :class:`~torchfrag.collectors.PoolCollector` use (see
    :attr:`pool_conventions`). Observations keep the env's own dtype (float64
    for MuJoCo, as GymEnv; ask for ``observation_dtype=torch.float32``).

    Each of these options can be set in either mode. In both, bounds are kept
    per dimension (``Bounded`` unless no bound is finite, GymEnv's rule),
    reward is float32 ``[..., 1]`` and ``done``/``terminated``/``truncated``
    bool ``[..., 1]``.

    Finished envs are auto-reset in the step that finished them; the terminal
    observation (and, for info entries, the terminal step's infos) is returned
    under ``"next"`` and the new first observation serves the following
    partial reset (:meth:`step_and_maybe_reset` and ``rollout`` never call the
    pool twice per step).

    Args:
        env_id: A registered id, see :func:`torchfrag.envs.list_envs`.
        num_envs: Number of envs (the batch size); ``None``: one unbatched env
            with GymEnv's defaults (see above).
        num_threads: Worker threads; defaults to ``min(num_envs, cores)``.
        seed: Pool seed (env ``i`` uses ``hash(seed, i)``), one seed per env,
            or ``None`` for a random one.
        device: Where the returned tensors live; results are moved there once
            per step.
        info_keys: Infos returned as extra observation entries (in the root and
            under ``"next"``, where they are the terminal step's). ``None``:
            ``"elapsed_step"`` and every env info. Default: all in the batched
            mode, none in the unbatched one.
        categorical_action_encoding: Discrete actions as indices
            (``Categorical``) rather than one-hot (``OneHot``, the default, as
            GymEnv's). Either form is accepted as input in both cases.
        from_pixels: GymEnv's ``from_pixels``: frames under ``"pixels"``.
            Envs whose observations are images (Atari) name them
            ``"pixels"`` (channel-first ``[C, H, W]`` for the pool's
            ``<Game>-v5``; ``ALE/<Game>-v5`` gives Gymnasium's ``[H, W, C]``
            and always names them ``"pixels"``, as GymEnv does). Other envs
            (MuJoCo, classic control) render a frame per step, uint8
            ``[H, W, 3]`` as ``env.render()`` draws it (see
            :mod:`torchfrag.envs.rendering`; terminal frames under ``"next"``).
        pixels_only: With ``from_pixels`` on a rendered env: only
            ``"pixels"`` (``True``) or ``"pixels"`` and ``"observation"`` (or the
            named entries below). Default: ``True`` (GymEnv's) except for the
            DeepMind Control Suite ids, whose default is ``False`` as with
            TorchRL's ``DMControlEnv(from_pixels=True)``, which keeps the state
            beside the pixels (``named_observations=True`` then gives its keys
            exactly: ``"pixels"``, ``"position"``, ``"velocity"``, ...).
        render_kwargs: Rendering arguments of ``"pixels"`` and :meth:`render`
            (TorchRL's ``DMControlEnv`` argument): ``height``, ``width``,
            ``camera_id`` for DMC ids (default 240 x 320, camera 0, as
            DMControlEnv), Gymnasium's MuJoCo keywords for MuJoCo ids.
        camera_id: DMControlEnv's shortcut for ``render_kwargs["camera_id"]``.
        named_observations: DeepMind Control Suite ids only: one entry per key
            of dm_control's observation dict instead of the flat
            ``"observation"`` (``"position"``, ``"velocity"``, ...), as
            TorchRL's ``DMControlEnv`` gives them: float64 (or
            ``observation_dtype``), dm_control's shapes with scalars as
            ``[1]``. Steps take TorchRL's generic path (no fused rollout).
        frame_skip: GymEnv's ``frame_skip``. Atari: the env's frame skip (ALE
            frames per step, GymEnv passes it to ALE). Other envs: the action
            is repeated ``frame_skip`` times (stopping at the end of an
            episode), rewards summed, the last observation kept, as GymEnv's
            wrapper does. MuJoCo's own ``frame_skip`` (physics steps per env
            step) is ``env_options={"frame_skip": k}``.
        batch_size: GymEnv's ``batch_size``: only the env's own is accepted
            (``[]``, or ``[num_envs]``).
        allow_done_after_reset: As for any TorchRL env.
        spec_locked: As for any TorchRL env.
        observation_dtype: Cast observations to this dtype (e.g.
            ``torch.float32``; what TorchRL's ``DoubleToFloat`` does, without
            the transform).
        env_options: Env options whose names ``PoolEnv`` takes for GymEnv's
            meaning (``frame_skip``).
        **options: Env options, as for :func:`torchfrag.envs.make`, and
            GymEnv's other keyword arguments: ``disable_env_checker``,
            ``render_mode="rgb_array"``, ``num_workers=1``, ``backend="gymnasium"``
            are accepted; other values are refused by name with what to write
            instead (:mod:`torchfrag.envs.gymenv_args`).

    Example:
        >>> import torch
        >>> from torchfrag.envs import PoolEnv
        >>> env = PoolEnv("Pendulum-v1", num_envs=2, seed=1)
        >>> td = env.reset()
        >>> td["observation"].shape
        torch.Size([2, 3])
        >>> td["action"] = torch.zeros(2, 1)
        >>> td = env.step(td)
        >>> td["next", "reward"].shape
        torch.Size([2, 1])
        >>> env.close()
        >>> PoolEnv("CartPole-v1").action_spec.shape  # as GymEnv("CartPole-v1")
        torch.Size([2])
    """

    #: ``frame_skip`` is implemented by :meth:`_pool_step` (TorchRL would otherwise wrap the
    #: env in a ``FrameSkipTransform``).
    _has_frame_skip = True

    def __init__(
        self,
        env_id: str,
        num_envs: int | None = None,
        *,
        num_threads: int | None = None,
        seed: int | Sequence[int] | None = 0,
        device: torch.device | str | None = None,
        info_keys: Sequence[str] | None | str = "default",
        categorical_action_encoding: bool = False,
        from_pixels: bool = False,
        pixels_only: bool | None = None,
        render_kwargs: dict[str, Any] | None = None,
        camera_id: int | str | None = None,
        named_observations: bool = False,
        frame_skip: int = 1,
        batch_size: Sequence[int] | torch.Size | None = None,
        allow_done_after_reset: bool = False,
        spec_locked: bool = True,
        observation_dtype: torch.dtype | str | None = None,
        env_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> None:
        device = torch.device(device) if device is not None else torch.device("cpu")
        batched = num_envs is not None
        self._named = dmc_observations.check_named(env_id, named_observations)
        if pixels_only is None:
            pixels_only = not dmc_observations.is_dmc(env_id)
        init_options = dict(options)  # what pickling passes again
        take_gymenv_kwargs(env_id, options)
        check_batch_size(env_id, batch_size, num_envs)
        if isinstance(frame_skip, bool) or not isinstance(frame_skip, (int, np.integer)) \
                or frame_skip < 1:
            raise ValueError(f"PoolEnv({env_id!r}): frame_skip must be an int >= 1, got"
                             f" {frame_skip!r}")
        if env_options:
            options = {**options, **env_options}
            if "num_threads" in options:  # the pool's own option, as make() takes it among the env's
                given = options.pop("num_threads")
                num_threads = given if num_threads is None else num_threads
        atari = "max_pool" in spec(env_id).options if isinstance(env_id, str) else False
        if atari and frame_skip != 1:
            # GymEnv hands frame_skip to ALE (frameskip=): the env's own frame skip.
            options = {**options, "frame_skip": int(frame_skip)}
            frame_skip = 1
        if batched and (isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer))
                        or num_envs < 1):
            raise ValueError(f"PoolEnv: num_envs must be a positive int or None (one unbatched"
                             f" env), got {num_envs!r}")
        if isinstance(info_keys, str):
            if info_keys != "default":
                # Iterating a string would look up 's', 't', ...: refuse it by name.
                raise TypeError(f"PoolEnv: info_keys must be a sequence of info names, got the "
                                f"string {info_keys!r}; write [{info_keys!r}], None (all) or leave"
                                " it out")
            info_keys = None if batched else []
        if isinstance(observation_dtype, str):
            dtype = getattr(torch, observation_dtype, None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"PoolEnv: observation_dtype {observation_dtype!r} is not a torch"
                                 " dtype name (e.g. 'float32')")
            observation_dtype = dtype
        n = int(num_envs) if batched else 1
        # What pickling rebuilds the env from (in the receiving process: the
        # pool itself, its threads and C++ envs, cannot cross a process).
        self._init_args = (env_id, num_envs)
        self._init_kwargs = dict(
            num_threads=num_threads, seed=seed, device=device,
            info_keys=None if info_keys is None else list(info_keys),
            categorical_action_encoding=categorical_action_encoding, from_pixels=from_pixels,
            pixels_only=pixels_only, render_kwargs=render_kwargs, camera_id=camera_id,
            named_observations=named_observations,
            frame_skip=frame_skip,
            allow_done_after_reset=allow_done_after_reset, spec_locked=spec_locked,
            observation_dtype=observation_dtype, env_options=env_options, **init_options)
        super().__init__(device=device, batch_size=torch.Size([n] if batched else []),
                         allow_done_after_reset=allow_done_after_reset, spec_locked=spec_locked)
        self._pool = EnvPool(env_id, num_envs=n, num_threads=num_threads, seed=seed,
                             autoreset="same_step", **options)
        self.env_id = env_id
        self.num_envs = n
        self.batched = batched
        self.frame_skip = int(frame_skip)
        self.pool_spec: EnvSpec = self._pool.spec
        obs_space = self.pool_spec.observation_space
        image_obs = len(obs_space.shape) == 3
        render_kwargs = dict(render_kwargs or {})
        if camera_id is not None:
            render_kwargs["camera_id"] = camera_id
        if render_kwargs:
            try:
                self._pool.configure_render(**render_kwargs)
            except Exception:
                self._pool.close()
                raise
        # Rendered frames for envs whose observations are not images (GymEnv's from_pixels).
        self._pixels: PixelFrames | None = None
        if from_pixels and not image_obs:
            self._pixels = PixelFrames(self._pool, pixels_only, seed)
        self._discrete = isinstance(self.pool_spec.action_space, spaces.Discrete)
        self._one_hot = self._discrete and not categorical_action_encoding
        # GymEnv names image observations "pixels" (always for the ALE/ ids).
        self._obs_key = "pixels" if image_obs and (from_pixels or is_alias(env_id)) \
            else "observation"
        self._obs_cast = (observation_dtype if observation_dtype is not None
                          and observation_dtype != _torch_dtype(obs_space.dtype) else None)
        self._info_names = resolve_info_keys(self.pool_spec, info_keys)
        # Pool info read for "next": the terminal step's (same-step auto-reset
        # puts the new episode's values under the plain name).
        self._final_names = {k: v if v == "elapsed_step" else f"final_{v}"
                             for k, v in self._info_names.items()}
        #: TensorDict keys of the exposed infos.
        self.info_keys: list[str] = list(self._info_names)
        self._make_specs()
        self.is_closed = False

        self._action_shape = () if self._discrete else tuple(self.pool_spec.action_space.shape)
        # New-episode observations (and infos) of envs the pool auto-reset, kept
        # until TorchRL asks for the reset; `_pending[i]` marks them valid.
        self._pending = np.zeros(n, dtype=bool)
        self._reset_obs = np.zeros((n, *obs_space.shape), dtype=obs_space.dtype)
        self._reset_infos = {
            k: np.zeros((n, *self.pool_spec.infos[v].shape), dtype=self.pool_spec.infos[v].dtype)
            for k, v in self._info_names.items() if k != "elapsed_step"
        }
        # What TorchRL's EndOfLifeTransform reads as env.unwrapped.ale.lives() (Atari only).
        self._ale_lives = AleLives(n, batched) if "lives" in self.pool_spec.infos else None

    @classmethod
    def make(cls, env_id: str, num_envs: int = 1, **kwargs: Any) -> PoolEnv:
        """Same as the constructor, batched; mirrors :func:`torchfrag.envs.make`.

        Example:
            >>> from torchfrag.envs import PoolEnv
            >>> PoolEnv.make("CartPole-v1", 2).batch_size
            torch.Size([2])
        """
        return cls(env_id, num_envs, **kwargs)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles as the constructor call: the copy is a new pool with the same arguments.

        The copy starts un-reset, with the constructor's seed (TorchRL's
        multiprocess collectors reset and seed the envs they receive). A
        subclass whose constructor takes other arguments overrides this.

        Example:
            >>> import pickle
            >>> from torchfrag.envs import PoolEnv
            >>> env = pickle.loads(pickle.dumps(PoolEnv("CartPole-v1", 2)))
            >>> env.batch_size
            torch.Size([2])
        """
        return (_rebuild, (type(self), self._init_args, self._init_kwargs))

    @property
    def _fast_paths_ok(self) -> bool:
        """Whether the fused paths may bypass ``_step``/``_reset`` (not overridden by a subclass)."""
        cls = type(self)
        return (cls._step is PoolEnv._step and cls._reset is PoolEnv._reset
                and self._pixels is None and self.frame_skip == 1 and not self._named)

    @property
    def _pixels_only(self) -> bool:
        """Whether only rendered ``"pixels"`` are returned (no state observation)."""
        return self._pixels is not None and self._pixels.pixels_only

    @property
    def pool_conventions(self) -> bool:
        """Whether this env uses the pool's own conventions (what an async pool collector yields).

        Batched, ``Categorical`` actions (``categorical_action_encoding=True``),
        ``"observation"`` in the env's dtype. ``PoolCollector`` collects such an
        env on its async fast path; a ``OneHot`` one (the default, GymEnv's) is
        run by TorchRL's ``Collector``.
        """
        return (self.batched and not self._one_hot and self._obs_key == "observation"
                and self._obs_cast is None and not self._named)

    # -- specs -----------------------------------------------------------------------
    def _make_specs(self) -> None:
        n, dev = (self.num_envs if self.batched else None), self.device
        lead = (n,) if self.batched else ()
        self.observation_spec = observation_spec_from(
            self.pool_spec, n, list(self._info_names.values()), dev,
            observation_key=self._obs_key, observation_dtype=self._obs_cast)
        if self._named and not self._pixels_only:
            # DMControlEnv's entries: dm_control's keys, scalars as [1].
            flat = self.observation_spec[self._obs_key]
            del self.observation_spec[self._obs_key]
            for key, shape in dmc_observations.observation_keys(self.env_id):
                self.observation_spec[key] = Unbounded(shape=(*lead, *(shape or (1,))),
                                                       dtype=flat.dtype, device=dev)
        if self._pixels is not None:
            if self._pixels.pixels_only:
                del self.observation_spec[self._obs_key]
            self.observation_spec["pixels"] = Unbounded(
                shape=(*lead, *self._pixels.shape), dtype=torch.uint8, device=dev)
        self.action_spec = action_spec_from(self.pool_spec, n, dev,
                                            categorical=not self._one_hot)
        self.reward_spec = Unbounded(shape=(*lead, 1), dtype=torch.float32, device=dev)
        self.done_spec = Composite(
            done=Categorical(2, shape=(*lead, 1), dtype=torch.bool, device=dev),
            terminated=Categorical(2, shape=(*lead, 1), dtype=torch.bool, device=dev),
            truncated=Categorical(2, shape=(*lead, 1), dtype=torch.bool, device=dev),
            shape=lead, device=dev,
        )

    @property
    def unwrapped(self) -> PoolEnv:
        """The env itself (no wrappers), as Gymnasium's ``env.unwrapped``, for ``unwrapped.ale``."""
        return self

    @property
    def ale(self) -> AleLives:
        """Atari only: ``ale.lives()``, each env's lives now, as Gymnasium's ``env.unwrapped.ale``.

        What TorchRL's :class:`~torchrl.envs.EndOfLifeTransform` reads
        (``TransformedEnv(PoolEnv("Breakout-v5", 8), EndOfLifeTransform())``).
        """
        if self._ale_lives is None:
            raise AttributeError(f"PoolEnv({self.env_id!r}) has no 'ale': only Atari envs report"
                                 " lives")
        return self._ale_lives

    @property
    def pool(self) -> EnvPool:
        """The underlying (same-step auto-reset) :class:`~torchfrag.envs.EnvPool`."""
        return self._pool

    # -- actions -------------------------------------------------------------------
    def _action_array(self, action: torch.Tensor | None) -> np.ndarray:
        """The pool's action array (``[num_envs, ...]``, indices for discrete actions)."""
        if action is None:
            raise KeyError("PoolEnv.step: the input tensordict has no 'action' entry")
        if not isinstance(action, torch.Tensor):
            raise TypeError(f"PoolEnv.step: 'action' must be a tensor, got {type(action).__name__}")
        n = self.num_envs
        if not self.batched:
            action = action.unsqueeze(0)
        if self._discrete:
            k = int(self.pool_spec.action_space.n)
            lead = [n] if self.batched else []
            if action.shape == (n, k) and k > 1:  # one-hot, whichever the spec's encoding
                if action.dtype.is_complex or not bool(
                        (((action == 0) | (action == 1)).all(-1) & (action.sum(-1) == 1)).all()):
                    raise ValueError(
                        f"PoolEnv({self.env_id!r}): one-hot actions of shape {[*lead, k]} must"
                        " hold a single 1 per env and zeros elsewhere (or pass indices of shape"
                        f" {lead})")
                action = action.argmax(-1)
            if action.dtype.is_floating_point or action.dtype.is_complex or \
                    action.dtype == torch.bool:
                raise TypeError(
                    f"PoolEnv({self.env_id!r}): discrete actions must be integer indices of"
                    f" shape {lead} (Categorical) or one-hot of shape {[*lead, k]}, got dtype"
                    f" {action.dtype}")
            if action.shape != (n,):
                if action.shape == (n, 1):
                    action = action.reshape(n)
                else:
                    raise ValueError(
                        f"PoolEnv({self.env_id!r}): expected discrete actions of shape {lead}"
                        f" (indices) or {[*lead, k]} (one-hot), got"
                        f" {list(action.shape[0 if self.batched else 1:])}")
        else:
            want = (n, *self._action_shape)
            shown = list(want if self.batched else want[1:])
            if not action.dtype.is_floating_point:
                raise TypeError(
                    f"PoolEnv({self.env_id!r}): continuous actions must be a floating point"
                    f" tensor of shape {shown}, got dtype {action.dtype}")
            if tuple(action.shape) != want:
                raise ValueError(
                    f"PoolEnv({self.env_id!r}): expected continuous actions of shape {shown},"
                    f" got {list(action.shape[0 if self.batched else 1:])}")
        if action.device.type != "cpu":
            action = action.cpu()
        return action.detach().numpy()

    # -- EnvBase API -----------------------------------------------------------------
    def _obs_tensor(self, arr: np.ndarray) -> torch.Tensor:
        """A tensor copy of pool observations (cast if asked)."""
        if self._obs_cast is not None:
            return torch.from_numpy(arr).to(self._obs_cast)
        return torch.from_numpy(arr).clone()

    def _finish(self, data: dict) -> TensorDictBase:
        """The TensorDict of one result: unbatched in that mode, on the env's device.

        Built with the env's device (not ``device=None``): TorchRL's ``EnvBase.step``
        writes it under ``"next"`` of the input, and a device mismatch there costs a
        ``TensorDict.to`` on every step (about a third of a CartPole step).
        """
        if self._pixels_only:
            del data[self._obs_key]
        elif self._named:
            data.update(dmc_observations.split_observation(self.env_id, data.pop(self._obs_key),
                                                           (1,)))
        td = TensorDict(data, batch_size=[self.num_envs], device=self.device)
        return td if self.batched else td[0]

    def _next_td(self, obs: np.ndarray, rew: np.ndarray, term: np.ndarray, trunc: np.ndarray,
                 info: dict) -> tuple[TensorDictBase, np.ndarray]:
        """Builds the step output from one pool result and caches reset data."""
        terminated = torch.from_numpy(term).clone().unsqueeze_(-1)
        truncated = torch.from_numpy(trunc).clone().unsqueeze_(-1)
        data = {
            self._obs_key: self._obs_tensor(info["final_obs"]),
            "reward": torch.from_numpy(rew).to(torch.float32).unsqueeze_(-1),
            "terminated": terminated,
            "truncated": truncated,
            "done": terminated | truncated,
        }
        for k, name in self._final_names.items():
            data[k] = torch.from_numpy(info[name]).clone()
        done = np.logical_or(term, trunc)
        self._pending[:] = False
        if done.any():
            idx = np.flatnonzero(done)
            self._pending[idx] = True
            self._reset_obs[idx] = obs[idx]
            for k, buf in self._reset_infos.items():
                buf[idx] = info[self._info_names[k]][idx]
        if self._ale_lives is not None:
            self._ale_lives.stepped(info, done)
        if self._pixels is not None:
            data["pixels"] = torch.from_numpy(self._pixels.after_step(done))
        return self._finish(data), done

    def _pool_step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                      np.ndarray, dict]:
        """One step of every env; with ``frame_skip`` > 1, GymEnv's action repeat.

        The action is repeated ``frame_skip`` times, rewards summed, each env
        stopping at the end of its episode (later repeats step only the envs
        still running), as GymEnv's wrapper loop does for one env.
        """
        obs, rew, term, trunc, info = self._pool.step(actions)
        if self.frame_skip == 1:
            return obs, rew, term, trunc, info
        # The pool's result arrays are reused by its next call: copy them.
        obs, term, trunc = obs.copy(), term.copy(), trunc.copy()
        rew = rew.astype(np.float64)
        info = {k: v.copy() for k, v in info.items()}
        running = ~(term | trunc)
        for _ in range(self.frame_skip - 1):
            ids = np.flatnonzero(running)
            if not ids.size:
                break
            o, r, te, tr, inf = self._pool.step(actions[ids], ids)
            obs[ids], term[ids], trunc[ids] = o, te, tr
            rew[ids] += r
            for k, v in info.items():
                v[ids] = inf[k]
            running[ids] = ~(te | tr)
        return obs, rew, term, trunc, info

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        actions = self._action_array(tensordict.get("action", None))
        obs, rew, term, trunc, info = self._pool_step(actions)
        td, _ = self._next_td(obs, rew, term, trunc, info)
        return td

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        n = self.num_envs
        mask = None
        if tensordict is not None:
            reset = tensordict.get("_reset", None)
            if reset is not None:
                mask = reset.reshape(n).cpu().numpy()
                if mask.all() and not self._pending.any():
                    # (envs the pool already reset are served from that, even all of them)
                    mask = None
        if mask is None:
            obs, info = self._pool.reset()
            self._pending[:] = False
            if self._ale_lives is not None:
                self._ale_lives.reset(None, info)
            data = {self._obs_key: self._obs_tensor(obs)}
            for k, name in self._info_names.items():
                data[k] = torch.from_numpy(info[name]).clone()
            if self._pixels is not None:
                self._pixels.render_ids(np.arange(n))
                data["pixels"] = torch.from_numpy(self._pixels.reset_frames.copy())
        else:
            ids = np.flatnonzero(mask)
            real = ids[~self._pending[ids]]
            info = None
            if real.size:
                obs, info = self._pool.reset(real)
                self._reset_obs[real] = obs
                for k, buf in self._reset_infos.items():
                    buf[real] = info[self._info_names[k]]
            if self._ale_lives is not None:
                self._ale_lives.reset(real, info, served=ids[self._pending[ids]])
            self._pending[ids] = False
            data = {self._obs_key: self._obs_tensor(self._reset_obs)}
            for k, buf in self._reset_infos.items():
                data[k] = torch.from_numpy(buf.copy())
            if self._pixels is not None:
                self._pixels.render_ids(real)
                data["pixels"] = torch.from_numpy(self._pixels.reset_frames.copy())
            if "elapsed_step" in self.info_keys:
                data["elapsed_step"] = torch.zeros(n, dtype=torch.int32)
        z = torch.zeros((n, 1), dtype=torch.bool)
        data["done"] = z
        data["terminated"] = z.clone()
        data["truncated"] = z.clone()
        return self._finish(data)

    def _set_seed(self, seed: int | None) -> None:
        if seed is None:
            seed = int.from_bytes(np.random.default_rng().bytes(8), "little")
        self._pool.seed(check_seed(seed))  # make()'s error for True, 1.5, "abc"
        # New seeds apply from the next real reset: drop cached auto-resets.
        self._pending[:] = False

    # -- fast path ---------------------------------------------------------------------
    def _step_and_maybe_reset(self, tensordict: TensorDictBase
                              ) -> tuple[TensorDictBase, TensorDictBase]:
        """Steps all envs with one pool call; finished envs start over in the result.

        Returns ``(tensordict, tensordict_)`` as :meth:`EnvBase.step_and_maybe_reset`:
        ``tensordict`` holds the transition (terminal observations under
        ``"next"``), ``tensordict_`` the input of the next step.
        """
        if not self._fast_paths_ok or not self.batched:
            # A subclass's _step/_reset must see every step and reset; one
            # unbatched env gains nothing from the fused path.
            return super()._step_and_maybe_reset(tensordict)
        if tensordict.device != self.device:
            tensordict = tensordict.to(self.device)
        if (tensordict.batch_size != self.batch_size or "_step" in tensordict.keys()
                or "next" in tensordict.keys()):
            # partial steps, preset results or a wrong batch: TorchRL's rules and errors
            tensordict = self.step(tensordict)
        else:
            # What EnvBase.step does for a full step, less its post-processing, which is a
            # no-op here: ``_step`` already returns every done key and rewards shaped as the
            # spec. That saves about a fifth of a one-env CartPole step.
            tensordict.set("next", self._step(tensordict))
        tensordict_ = step_mdp(self, tensordict)
        if self._pending.any():
            idx = torch.from_numpy(np.flatnonzero(self._pending))
            key = self._obs_key
            obs = tensordict_.get(key).clone()
            obs[idx.to(obs.device)] = self._obs_tensor(self._reset_obs[self._pending]).to(
                obs.device)
            tensordict_.set(key, obs)
            for k, buf in self._reset_infos.items():
                val = tensordict_.get(k).clone()
                val[idx.to(val.device)] = torch.from_numpy(buf[self._pending]).to(val.device)
                tensordict_.set(k, val)
            if "elapsed_step" in self.info_keys:
                val = tensordict_.get("elapsed_step").clone()
                val[idx.to(val.device)] = 0
                tensordict_.set("elapsed_step", val)
            zeros = torch.zeros((self.num_envs, 1), dtype=torch.bool, device=self.device)
            for k in ("done", "terminated", "truncated"):
                tensordict_.set(k, zeros.clone())
            if self._ale_lives is not None:
                self._ale_lives.reset(np.empty(0, dtype=np.int64), None, served=idx.numpy())
            self._pending[:] = False
        return tensordict, tensordict_

    def _direct_ok(self) -> bool:
        """Whether :meth:`_direct_step` gives what ``step_and_maybe_reset`` would (see there)."""
        cls = type(self)
        return (self._fast_paths_ok and self.batched and not self.info_keys and self._ale_lives is None
                and self._obs_key == "observation" and self.device.type == "cpu"
                and cls._step_and_maybe_reset is PoolEnv._step_and_maybe_reset
                and cls.step_and_maybe_reset is EnvBase.step_and_maybe_reset)

    def _direct_step(self, action: torch.Tensor) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """``step_and_maybe_reset`` on plain tensors, for a Rollout's direct step.

        Returns the ``"next"`` entries of the transition and the next carry's observation
        (finished envs already reset, as the pool auto-resets them); the next carry's done
        flags are all ``False``, as ``step_and_maybe_reset`` leaves them. Only for
        :meth:`_direct_ok` envs: no info keys, pixels, lives, frame skip or subclass steps.
        """
        obs, rew, term, trunc, info = self._pool.step(self._action_array(action))
        terminated = torch.from_numpy(term).clone().unsqueeze_(-1)
        truncated = torch.from_numpy(trunc).clone().unsqueeze_(-1)
        nxt = {"observation": self._obs_tensor(info["final_obs"]),
               "reward": torch.from_numpy(rew).to(torch.float32).unsqueeze_(-1),
               "done": terminated | truncated, "terminated": terminated, "truncated": truncated}
        self._pending[:] = False  # served at once: the carry below already holds the reset observations
        return nxt, self._obs_tensor(obs)

    # -- random actions and rollouts -----------------------------------------------
    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Writes a uniformly random ``"action"`` for every env into ``tensordict``.

        Same distribution as ``env.action_spec.rand()``, without the generic
        ``Composite`` sampling overhead.
        """
        if tensordict is None:
            tensordict = TensorDict(batch_size=self.batch_size, device=self.device)
        tensordict.set("action", self.action_spec.rand())
        return tensordict

    def rollout(self, max_steps: int, policy: Any = None, callback: Any = None, *,
                auto_reset: bool = True, break_when_any_done: bool | None = None,
                break_when_all_done: bool | None = None, tensordict: TensorDictBase | None = None,
                **kwargs: Any) -> TensorDictBase:
        """TorchRL's :meth:`~torchrl.envs.EnvBase.rollout`, with a fast path.

        With ``break_when_any_done=False`` (and no ``callback``, ``out``,
        ``actions``, ``set_truncated`` or device casting), the rollout is written
        straight into preallocated ``[num_envs, max_steps]`` tensors, one pool
        call and one copy per entry and step; the result is the same
        TensorDict TorchRL's generic loop builds. Other arguments, and subclasses
        that override ``_step`` or ``_reset``, use the generic loop.

        Example:
            >>> from torchfrag.envs import PoolEnv
            >>> env = PoolEnv("CartPole-v1", num_envs=3)
            >>> env.rollout(5, break_when_any_done=False)["next", "done"].shape
            torch.Size([3, 5, 1])
        """
        if isinstance(max_steps, bool) or int(max_steps) != max_steps or max_steps < 1:
            raise ValueError(f"rollout: max_steps must be a positive integer, got {max_steps!r}")
        generic = (
            not self._fast_paths_ok or not self.batched or break_when_any_done is not False or bool(break_when_all_done) or callback is not None
            or max_steps < 1
            or any(kwargs.get(k) not in (None, False) for k in
                   ("actions", "out", "set_truncated", "auto_cast_to_device", "set_state"))
            or kwargs.get("storing_device") not in (None, self.device, str(self.device))
        )
        if generic:
            return super().rollout(max_steps, policy, callback, auto_reset=auto_reset,
                                   break_when_any_done=break_when_any_done,
                                   break_when_all_done=break_when_all_done,
                                   tensordict=tensordict, **kwargs)
        return self._fast_rollout(max_steps, policy, auto_reset, tensordict,
                                  kwargs.get("trust_policy", False))

    def _fast_rollout(self, max_steps: int, policy: Any, auto_reset: bool,
                      tensordict: TensorDictBase | None, trust_policy: bool) -> TensorDictBase:
        if policy is not None:
            policy = make_compatible_policy(policy, self.observation_spec, self, trust_policy)
        if auto_reset:
            root = self.reset(tensordict)
        elif tensordict is None:
            raise RuntimeError("tensordict must be provided when auto_reset is False")
        else:
            root = self.maybe_reset(tensordict)
        n, steps, dev = self.num_envs, int(max_steps), self.device
        # One code path for every device: the step outputs are written into host buffers
        # (NumPy views, plain strided memcpys) and the whole rollout moves to ``dev`` once at
        # the end; only the policy's input goes to ``dev`` per step.
        host = torch.device("cpu")
        obs_key = self._obs_key
        obs_keys = [obs_key, *self.info_keys]
        names, finals = self._info_names, self._final_names
        done_keys = ("done", "terminated", "truncated")

        def alloc(x: torch.Tensor) -> torch.Tensor:
            return torch.empty((n, steps, *x.shape[1:]), dtype=x.dtype, device=host)

        obs_spec = self.observation_spec
        root_out = {k: alloc(obs_spec[k].zero()) for k in obs_keys}
        next_out = {k: alloc(obs_spec[k].zero()) for k in obs_keys}
        for k in done_keys:
            root_out[k] = torch.zeros((n, steps, 1), dtype=torch.bool, device=host)
            next_out[k] = torch.empty((n, steps, 1), dtype=torch.bool, device=host)
        next_out["reward"] = torch.empty((n, steps, 1), dtype=torch.float32, device=host)
        action_spec = self.action_spec
        action_out = alloc(action_spec.zero())
        for k in obs_keys:
            root_out[k][:, 0] = root.get(k)
        for k in done_keys:
            root_out[k][:, 0] = root.get(k)
        extras: dict[Any, list[torch.Tensor]] = {}
        known = set(obs_keys) | set(done_keys) | {"action"}
        # Carried-over root keys (e.g. policy outputs of a previous call) are
        # refreshed by the policy on every step, as in TorchRL's loop.
        carried = root.exclude(*known, "next", "_reset")
        pool, discrete = self._pool, self._discrete
        elapsed_idx = "elapsed_step" in self.info_keys
        done = np.zeros(n, dtype=bool)
        # NumPy views of the output tensors: per-step writes are plain
        # strided memcpys, far cheaper than torch indexing.
        np_next = {k: v.numpy() for k, v in next_out.items()}
        np_root = {k: v.numpy() for k, v in root_out.items()}
        np_action = action_out.numpy()
        rand_n = int(self.pool_spec.action_space.n) if (policy is None and discrete) else 0
        one_hot = self._one_hot
        rows = np.arange(n)
        for t in range(steps):
            if rand_n:
                # Uniform indices (the same distribution as the spec's rand()), one-hot
                # encoded straight into the output below when the spec is OneHot.
                action_np = torch.randint(0, rand_n, (n,), dtype=torch.int64).numpy()
            else:
                if policy is None:
                    action = action_spec.rand()
                else:
                    td_t = new_tensordict({k: v[:, t] for k, v in root_out.items()},
                                          self.batch_size, host).to(dev)
                    if not carried.is_empty():
                        td_t.update(carried)
                    out = policy(td_t)
                    action = out.get("action")
                    for key, val in out.items(include_nested=True, leaves_only=True):
                        if key in known or (isinstance(key, tuple) and key[0] == "next"):
                            continue
                        extras.setdefault(key, []).append(val)
                action_np = self._action_array(action)
            obs, rew, term, trunc, info = pool.step(action_np)
            np.logical_or(term, trunc, out=done)
            if one_hot:
                np_action[:, t] = 0
                np_action[rows, t, action_np] = 1
            else:
                np_action[:, t] = action_np.reshape(np_action.shape[:1] + np_action.shape[2:])
            np_next[obs_key][:, t] = info["final_obs"]
            np_next["reward"][:, t, 0] = rew
            np_next["terminated"][:, t, 0] = term
            np_next["truncated"][:, t, 0] = trunc
            np_next["done"][:, t, 0] = done
            for k in self.info_keys:
                np_next[k][:, t] = info[finals[k]]
            if t + 1 < steps:
                np_root[obs_key][:, t + 1] = obs
                for k in self.info_keys:
                    np_root[k][:, t + 1] = info[names[k]]
                if elapsed_idx and done.any():
                    np_root["elapsed_step"][done, t + 1] = 0
        # Leave the env where TorchRL's loop would: the last step's finished envs
        # wait for a reset, served from the pool's auto-reset.
        self._pending[:] = done
        if self._ale_lives is not None:
            self._ale_lives.stepped(info, done)
        if done.any():
            idx = np.flatnonzero(done)
            self._reset_obs[idx] = obs[idx]
            for k, buf in self._reset_infos.items():
                buf[idx] = info[names[k]][idx]
        data: dict[Any, Any] = dict(root_out)
        data["action"] = action_out
        for key, vals in extras.items():
            data[key] = torch.stack(vals, 1)
        for key in carried.keys(include_nested=True, leaves_only=True):
            if key not in extras:
                data[key] = torch.stack([carried.get(key)] * steps, 1)
        data["next"] = new_tensordict(next_out, torch.Size((n, steps)), host).to(dev)
        result = TensorDict(data, batch_size=(n, steps), device=dev)
        result.refine_names(..., "time")
        return result

    # -- rendering ----------------------------------------------------------------------
    def render(self, env_index: int | None = 0, final: bool = False) -> np.ndarray:
        """An RGB frame (``[H, W, 3]`` uint8) of env ``env_index`` as it is now.

        ``env_index=None`` stacks the frames of all envs (``[num_envs, H, W, 3]``).
        Frames are Gymnasium's ``render()`` of the same state (see
        :meth:`torchfrag.envs.EnvPool.render`); rendering costs nothing until
        called. Finished envs are auto-reset in the step that finished them,
        so a frame taken after a done step shows the new episode's start; the
        terminal state's frame is ``render(i, final=True)`` once
        ``env.pool.keep_final_frames(i)`` was called.
        TorchRL's ``PixelRenderTransform`` calls this method.

        Example:
            >>> from torchfrag.envs import PoolEnv
            >>> env = PoolEnv("Pong-v5", num_envs=2, noop_max=0)
            >>> _ = env.reset()
            >>> env.render(1).shape, env.render(None).shape
            ((210, 160, 3), (2, 210, 160, 3))
            >>> env.close()
        """
        if env_index is None:
            return np.stack([self._pool.render(i, final) for i in range(self.num_envs)])
        return self._pool.render(env_index, final)

    # -- lifetime ----------------------------------------------------------------------
    def close(self, *, raise_if_closed: bool = True) -> None:
        """Closes the pool (idempotent)."""
        pool = self.__dict__.get("_pool")
        if pool is not None:
            pool.close()
        super().close(raise_if_closed=raise_if_closed)

    def __repr__(self) -> str:
        return (f"PoolEnv({self.env_id!r}, num_envs={self.num_envs}, device={self.device},"
                f" info_keys={self.info_keys})")


def _rebuild(cls: type, args: tuple, kwargs: dict) -> PoolEnv:
    """Unpickles a :class:`PoolEnv` (see :meth:`PoolEnv.__reduce__`)."""
    return cls(*args, **kwargs)
