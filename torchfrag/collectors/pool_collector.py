"""A batched asynchronous TorchRL collector over the native env pool.

:class:`PoolCollector` drives an :class:`~torchfrag.envs.EnvPool` in async mode:
``num_envs`` envs are in flight, every :meth:`~torchfrag.envs.EnvPool.recv`
hands back the first ``batch_size`` to finish, the policy runs on that batch
while the pool's threads keep stepping the others, and the actions go straight
back with :meth:`~torchfrag.envs.EnvPool.send`. Each transition is written once,
into per-env time slots, so every yielded batch has TorchRL's layout:
``[num_envs, T]`` with ``T = frames_per_batch / num_envs``, row ``i`` the next
``T`` steps of env ``i``, terminal observations under ``"next"`` and
``("collector", "traj_ids")``.

With ``deterministic=True`` the envs are split into fixed groups of
``batch_size`` that take turns (one group steps while the policy runs on the
next), so with a seeded policy collection is bit-reproducible run to run.
"""
from __future__ import annotations

import inspect
import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict, TensorDictBase
from tensordict.nn import TensorDictModule, TensorDictModuleBase
from torch import nn
from torchrl.collectors import BaseCollector, Collector
from torchrl.collectors.utils import split_trajectories
from torchrl.data import Composite
from torchrl.envs import EnvBase
from torchrl.envs.utils import ExplorationType, set_exploration_type

from torchfrag.envs._torchrl_compat import new_tensordict
from torchfrag.envs.gymenv_args import take_gymenv_kwargs
from torchfrag.envs.pool import EnvPool
from torchfrag.envs.torchrl_env import (
    PoolEnv,
    action_spec_from,
    observation_spec_from,
    remap_infos,
    resolve_info_keys,
)

logger = logging.getLogger(__name__)

__all__ = ["PoolCollector"]

_NEXT_KEYS = ("observation", "reward", "done", "terminated", "truncated")

#: Keyword arguments of TorchRL's ``Collector`` (read from the installed
#: TorchRL, so new ones are recognised rather than taken for env options).
TORCHRL_COLLECTOR_ARGS = frozenset(inspect.signature(Collector.__init__).parameters) - {
    "self", "create_env_fn", "policy", "kwargs", "frames_per_batch", "total_frames"}

# TorchRL collector arguments the pool path implements itself (handled in
# __init__) or for which it has nothing to do (any value).
_POOL_PATH_ANY = frozenset({"device", "storing_device", "policy_device", "replay_buffer",
                            "exploration_type", "split_trajs", "postproc", "trust_policy",
                            "use_buffers", "no_cuda_sync", "post_collect_hook"})
# PoolEnv options that change its conventions (not env options of the pool).
_POOL_ENV_CONVENTIONS = ("categorical_action_encoding", "from_pixels", "pixels_only",
                         "frame_skip")
# Arguments the pool path supports at these values only (TorchRL's defaults);
# other values are served by TorchRL's own Collector over a PoolEnv.
_POOL_PATH_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "reset_when_done": (True,), "track_traj_ids": (True,), "return_same_td": (False,),
    "env_device": (None, "cpu", torch.device("cpu")), "compile_policy": (None, False),
    "cudagraph_policy": (None, False), "extend_buffer": (True,), "max_frames_per_traj": (None,),
    "init_random_frames": (None, 0), "reset_at_each_iter": (False,), "interruptor": (None,),
    "set_truncated": (False,), "create_env_kwargs": (None, {}), "policy_factory": (None,),
    "backend": (None, "direct"), "num_collectors": (None, 1), "sync": (None, True),
}


class _Slots:
    """Per-env time slots for one batch plus an overflow area.

    ``main[k]`` is ``[num_envs, T, ...]`` and becomes the yielded batch; steps
    an env takes beyond ``T`` before the slowest env catches up go to
    ``over[k]`` (grown on demand) and open the next batch.
    """

    def __init__(self, num_envs: int, steps: int) -> None:
        self.n = num_envs
        self.t = steps
        self.spec: dict[Any, tuple[tuple[int, ...], torch.dtype]] = {}
        self.main: dict[Any, torch.Tensor] = {}
        self.over: dict[Any, torch.Tensor] = {}
        self.np_main: dict[Any, np.ndarray | None] = {}
        self.np_over: dict[Any, np.ndarray | None] = {}
        self.flat_main: dict[Any, np.ndarray | None] = {}
        self.over_cap = max(2, steps // 8)

    def add(self, key: Any, shape: tuple[int, ...], dtype: torch.dtype, zero: bool = False) -> None:
        self.spec[key] = (tuple(shape), dtype)
        alloc = torch.zeros if zero else torch.empty
        self.main[key] = alloc((self.n, self.t, *shape), dtype=dtype)
        self.over[key] = alloc((self.n, self.over_cap, *shape), dtype=dtype)
        self._views(key)

    def _views(self, key: Any) -> None:
        for src, dst in ((self.main, self.np_main), (self.over, self.np_over)):
            try:
                dst[key] = src[key].numpy()
            except (TypeError, RuntimeError):  # e.g. bfloat16: no NumPy view
                dst[key] = None
        arr = self.np_main[key]
        # [num_envs * T, ...] view: one flat fancy index per write.
        self.flat_main[key] = None if arr is None else arr.reshape(self.n * self.t, *arr.shape[2:])

    def _grow(self, need: int) -> None:
        cap = self.over_cap
        while cap < need:
            cap *= 2
        for key, (shape, dtype) in self.spec.items():
            old = self.over[key]
            new = torch.zeros((self.n, cap, *shape), dtype=dtype)
            new[:, : self.over_cap] = old
            self.over[key] = new
            self._views(key)
        self.over_cap = cap

    def write(self, key: Any, ids: np.ndarray, pos: np.ndarray, value: Any, pmax: int,
              flat: np.ndarray | None = None) -> None:
        """Writes ``value[j]`` to slot ``pos[j]`` of env ``ids[j]``.

        ``flat`` (``ids * T + pos``, valid when ``pmax < T``) saves recomputing
        the index for every entry of a step.
        """
        if pmax < self.t:
            arr = self.flat_main[key]
            if arr is not None and isinstance(value, np.ndarray):
                arr[ids * self.t + pos if flat is None else flat] = value
            else:
                self.main[key][torch.from_numpy(ids), torch.from_numpy(pos)] = _as_tensor(value)
            return
        if pmax - self.t >= self.over_cap:
            self._grow(pmax - self.t + 1)
        in_main = pos < self.t
        value = value if isinstance(value, np.ndarray) else _as_tensor(value)
        for sel, store, np_store, offset in (
            (in_main, self.main, self.np_main, 0),
            (~in_main, self.over, self.np_over, self.t),
        ):
            if not sel.any():
                continue
            i, p = ids[sel], pos[sel] - offset
            arr = np_store[key]
            v = value[sel] if isinstance(value, np.ndarray) else value[torch.from_numpy(sel)]
            if arr is not None and isinstance(v, np.ndarray):
                arr[i, p] = v
            else:
                store[key][torch.from_numpy(i), torch.from_numpy(p)] = _as_tensor(v)

    def rotate(self, counts: np.ndarray) -> dict[Any, torch.Tensor]:
        """Hands out the full batch and opens the next with the overflow."""
        out = self.main
        k = int(counts.max()) - self.t + 1  # overflow slots in use (incl. in-flight roots)
        k = max(0, min(k, self.over_cap))
        self.main = {}
        for key, (shape, dtype) in self.spec.items():
            zero = key in ("done", "terminated", "truncated")
            new = (torch.zeros if zero else torch.empty)((self.n, self.t, *shape), dtype=dtype)
            if k:
                m = min(k, self.t)
                new[:, :m] = self.over[key][:, :m]
                if k > self.t:
                    self.over[key][:, : k - self.t] = self.over[key][:, self.t:k].clone()
            self.main[key] = new
            self._views(key)
        return out


def _as_tensor(value: Any) -> torch.Tensor:
    return torch.from_numpy(value) if isinstance(value, np.ndarray) else value


def _observation_dtype(env_id: str, requested: torch.dtype | str | None,
                       options: dict[str, Any]) -> torch.dtype | None:
    """The observation dtype of a collector over ``env_id``; ``None``: the env's own.

    ``"auto"`` (the default) is float32 for float64 observations (MuJoCo), as
    TorchRL's scripts get them through ``DoubleToFloat``, so a float32 policy
    runs on them; other dtypes stay.
    """
    from torchfrag.envs import spec as env_spec

    if requested is None:
        return None
    if requested == "auto":
        obs = env_spec(env_id, **options).observation_space
        return torch.float32 if getattr(obs, "dtype", None) == np.float64 else None
    if isinstance(requested, str):
        dtype = getattr(torch, requested, None)
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"PoolCollector: observation_dtype {requested!r} is not a torch dtype"
                             " name (e.g. 'float32'), 'auto' or None")
        return dtype
    if not isinstance(requested, torch.dtype):
        raise TypeError(f"PoolCollector: observation_dtype must be a torch dtype, 'auto' or None,"
                        f" got {requested!r}")
    return requested


class _RandomPolicy:
    """Uniform random actions for a batch (the ``policy=None`` default).

    Kept instead of TorchRL's ``RandomPolicy``: that one writes into a
    TensorDict built per call, while :meth:`sample` hands the pool a bare
    tensor (the collector's random mode runs at ~0.5M frames/s, where a
    TensorDict per batch is a measurable share: 16 envs' actions take ~4us
    here, ~14us through ``RandomPolicy``; ``benchmarks/library_parts.py``).
    """

    def __init__(self, action_spec_unbatched: Any) -> None:
        self.spec = action_spec_unbatched
        self.n = int(self.spec.n) if hasattr(self.spec, "n") else 0

    def sample(self, m: int) -> torch.Tensor:
        if self.n:
            return torch.randint(0, self.n, (m,), dtype=torch.int64)
        return self.spec.rand((m,))

    def __call__(self, td: TensorDictBase) -> TensorDictBase:
        td.set("action", self.sample(td.batch_size[0]))
        return td


class PoolCollector(BaseCollector):
    """Batched async TorchRL collector over a native env pool.

    The pool keeps ``num_envs`` envs stepping on its threads; each
    :meth:`~torchfrag.envs.EnvPool.recv` returns the ``batch_size`` envs that
    finished first, the policy runs on them while the others keep stepping,
    and their actions are sent straight back. Every transition is copied once,
    into the yielded batch.

    Batches are ``TensorDict`` of shape ``[num_envs, T]``
    (``T = ceil(frames_per_batch / num_envs)``), with ``observation``,
    ``action``, policy outputs, ``done``/``terminated``/``truncated`` (root),
    ``("collector", "traj_ids")`` and ``next`` (terminal observations kept,
    reward ``[.., 1]`` float32, done flags ``[.., 1]``). Row ``i`` continues
    where row ``i`` of the previous batch stopped.

    Staleness: in the default mode, envs still in flight when a batch is
    handed out were sent actions from the policy of that moment, so the first
    step of some envs in the next batch may come from the weights before
    :meth:`update_policy_weights_`. ``deterministic=True`` has none.

    What it collects from, as TorchRL's collectors take it:

    - an env id: the fast path above over a new pool;
    - a plain :class:`~torchfrag.envs.PoolEnv`: the same fast path over a new
      pool built from that env's arguments (id, ``num_envs``, seed, options,
      info keys; the env itself is not stepped);
    - an env id with ``PoolEnv`` convention options (``categorical_action_encoding=False``,
      ``from_pixels=True``, ``frame_skip``): that ``PoolEnv``, run as below;
    - anything else TorchRL's ``Collector`` takes (a ``TransformedEnv`` over a
      ``PoolEnv`` such as ``DoubleToFloat``/``VecNorm``/``RewardSum``, a
      ``PoolEnv`` subclass overriding ``_step``/``_reset``, any ``EnvBase``, or
      a ``create_env_fn``): TorchRL's own ``Collector`` runs it, with the
      same batches (``[num_envs, T]``) and the same arguments. So does an env id
      with a TorchRL argument the fast path lacks (``reset_at_each_iter=True``,
      ``max_frames_per_traj``, ``init_random_frames``, ...), over a ``PoolEnv``.

    TorchRL's collector arguments (``split_trajs``, ``postproc``, ``device``,
    ``reset_at_each_iter``... every keyword of ``torchrl.collectors.Collector``)
    mean what they mean there; other keywords are env options.

    Args:
        create_env_fn: An env id (:func:`torchfrag.envs.list_envs`), an env or
            a function returning one (see above).
        policy: A ``TensorDictModule`` (reads ``"observation"`` and the info
            keys, writes ``"action"`` and anything else, stored per step), a
            plain ``nn.Module``/callable mapping the observation tensor to
            actions, or ``None`` for uniformly random actions.
        frames_per_batch: Frames per yielded batch (rounded up to a multiple
            of ``num_envs``).
        total_frames: Stop after this many frames; ``-1`` runs forever.
        num_envs: Envs in the pool (the batch's first dimension).
        batch_size: Envs per policy call; defaults to ``num_envs // 2``.
        num_threads: Pool worker threads.
        seed: Pool seed (env ``i`` uses ``hash(seed, i)``).
        deterministic: Fixed groups of ``batch_size`` envs take turns, so
            collection with a seeded policy is reproducible bit for bit.
            ``num_envs`` must be a multiple of ``batch_size``.
        policy_device: Device the policy runs on; the batch is moved there once
            per call. Defaults to the policy's parameters' device (CPU).
        storing_device: Device of the yielded batches (moved once per batch).
        info_keys: Infos stored as extra observation entries (default none);
            ``"elapsed_step"`` or env infos such as ``"state"``.
        replay_buffer: If given, batches are written into it and the iterator
            yields ``None`` (TorchRL's convention).
        exploration_type: Interaction type the policy runs under (as TorchRL's
            collectors: ``RANDOM`` samples from probabilistic actors).
        observation_dtype: Observation dtype with an env id. ``"auto"``:
            float32 where the env's are float64 (MuJoCo), what TorchRL's
            scripts get from ``DoubleToFloat`` and what a float32 policy
            needs; other dtypes kept. ``None``: the env's own; or a torch dtype.
        **options: TorchRL collector arguments, and env options (as for
            :func:`torchfrag.envs.make`).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from tensordict.nn import TensorDictModule
        >>> from torchfrag.collectors import PoolCollector
        >>> policy = TensorDictModule(
        ...     nn.Sequential(nn.Linear(4, 2), nn.Identity()), ["observation"], ["logits"])
        >>> from tensordict.nn import TensorDictSequential
        >>> argmax = TensorDictModule(lambda x: x.argmax(-1), ["logits"], ["action"])
        >>> collector = PoolCollector("CartPole-v1", TensorDictSequential(policy, argmax),
        ...                           num_envs=8, batch_size=4, frames_per_batch=64,
        ...                           total_frames=128)
        >>> for batch in collector:
        ...     print(batch["next", "observation"].shape, batch["logits"].shape)
        torch.Size([8, 8, 4]) torch.Size([8, 8, 2])
        torch.Size([8, 8, 4]) torch.Size([8, 8, 2])
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fn: str | EnvBase | Callable[[], EnvBase],
        policy: TensorDictModuleBase | nn.Module | Callable[..., Any] | None = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        num_envs: int = 8,
        batch_size: int | None = None,
        num_threads: int | None = None,
        seed: int | Sequence[int] | None = 0,
        deterministic: bool = False,
        policy_device: torch.device | str | None = None,
        storing_device: torch.device | str | None = None,
        info_keys: Sequence[str] = (),
        replay_buffer: Any = None,
        exploration_type: ExplorationType = ExplorationType.RANDOM,
        observation_dtype: torch.dtype | str | None = "auto",
        **options: Any,
    ) -> None:
        super().__init__()
        if frames_per_batch <= 0:
            raise ValueError(f"frames_per_batch must be positive, got {frames_per_batch}")
        if total_frames is None:
            total_frames = -1
        torchrl_kwargs = {k: options.pop(k) for k in list(options) if k in TORCHRL_COLLECTOR_ARGS}
        device = torchrl_kwargs.pop("device", None)
        if device is not None:
            policy_device = policy_device if policy_device is not None else device
            storing_device = storing_device if storing_device is not None else device
        self.split_trajs = bool(torchrl_kwargs.pop("split_trajs", None))
        self.postproc = torchrl_kwargs.pop("postproc", None)
        if "post_collect_hook" in torchrl_kwargs:
            self.post_collect_hook = torchrl_kwargs.pop("post_collect_hook")
        for k in ("trust_policy", "use_buffers", "no_cuda_sync"):
            torchrl_kwargs.pop(k, None)
        generic_only = {k: v for k, v in torchrl_kwargs.items()
                        if k not in _POOL_PATH_DEFAULTS or not any(
                            v is d or (type(v) is type(d) and v == d)
                            for d in _POOL_PATH_DEFAULTS[k])}
        # PoolEnv's convention options (observation_dtype=torch.float32 for MuJoCo, ...):
        # with an env id they select a PoolEnv run by TorchRL's Collector.
        env_conventions = {k: options.pop(k) for k in _POOL_ENV_CONVENTIONS if k in options}
        if isinstance(create_env_fn, str):
            obs_dtype = _observation_dtype(create_env_fn, observation_dtype, options)
        elif observation_dtype != "auto":
            raise ValueError("PoolCollector: observation_dtype applies to an env id only; give"
                             " the env you pass its own (PoolEnv(..., observation_dtype=...) or"
                             " a DoubleToFloat transform)")
        else:
            obs_dtype = None
        if isinstance(create_env_fn, str) and env_conventions:
            generic_only = {**generic_only, **env_conventions}
        self._delegate: Collector | None = None
        if not isinstance(create_env_fn, (str, EnvBase)) and not callable(create_env_fn):
            raise TypeError(f"PoolCollector: create_env_fn must be an env id, an env or a function"
                            f" returning one, got {type(create_env_fn).__name__}")
        env_id = create_env_fn
        if isinstance(create_env_fn, PoolEnv) and create_env_fn._fast_paths_ok \
                and create_env_fn.pool_conventions and not generic_only:
            # A plain PoolEnv: the same env, collected by a new async pool.
            env = create_env_fn
            env_id = env.env_id
            num_envs = env.num_envs
            kw = dict(env._init_kwargs)
            seed, num_threads = kw.pop("seed"), kw.pop("num_threads")
            for k in ("device", "info_keys", "categorical_action_encoding", "from_pixels",
                      "observation_dtype", "pixels_only", "frame_skip", "allow_done_after_reset",
                      "spec_locked"):
                kw.pop(k)
            kw.update(kw.pop("env_options") or {})
            take_gymenv_kwargs(env_id, kw)  # GymEnv's no-op arguments are no env options
            info_keys = env.info_keys
            options = {**kw, **options}
            if storing_device is None and env.device.type != "cpu":
                storing_device = env.device
        elif not isinstance(create_env_fn, str) or generic_only:
            if isinstance(create_env_fn, str):
                # An env id keeps the collector's index actions unless told otherwise.
                env_conventions.setdefault("categorical_action_encoding", True)
                create_env_fn = PoolEnv(create_env_fn, num_envs, num_threads=num_threads,
                                        seed=seed, info_keys=list(info_keys),
                                        observation_dtype=obs_dtype, **env_conventions,
                                        env_options=options)
            elif options or env_conventions:
                options = {**options, **env_conventions}
                raise ValueError(f"PoolCollector: env options {sorted(options)} apply to an env id"
                                 " only; pass them to the env you give, or use TorchRL"
                                 f" collector arguments (one of {sorted(TORCHRL_COLLECTOR_ARGS)})")
            if deterministic:
                raise ValueError("PoolCollector: deterministic=True needs the pool path (an env id"
                                 " or a plain PoolEnv without TorchRL-only collector arguments)")
            self._init_delegate(create_env_fn, policy, frames_per_batch, total_frames,
                                policy_device, storing_device, replay_buffer, exploration_type,
                                torchrl_kwargs)
            return
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) \
                or num_envs <= 0:
            raise ValueError(f"PoolCollector: num_envs must be a positive integer, got {num_envs!r}")
        if batch_size is None:
            batch_size = max(1, num_envs // 2)
        if deterministic and num_envs % batch_size:
            raise ValueError(f"deterministic=True needs num_envs ({num_envs}) to be a multiple of"
                             f" batch_size ({batch_size})")
        self.env_id = env_id
        self.num_envs = int(num_envs)
        self.batch_size = int(batch_size)
        self.deterministic = bool(deterministic)
        self.steps_per_batch = math.ceil(frames_per_batch / num_envs)
        self.requested_frames_per_batch = int(frames_per_batch)
        self.frames_per_batch = self.steps_per_batch * self.num_envs
        if self.frames_per_batch != frames_per_batch:
            logger.warning("frames_per_batch=%d is not a multiple of num_envs=%d; using %d",
                           frames_per_batch, num_envs, self.frames_per_batch)
        self.total_frames = int(total_frames)
        self.trust_policy = True
        self.compiled_policy = False
        self.cudagraphed_policy = False
        self.replay_buffer = replay_buffer
        self.exploration_type = exploration_type
        self.storing_device = torch.device(storing_device) if storing_device else None

        self._pool = EnvPool(env_id, num_envs=num_envs, batch_size=self.batch_size,
                             num_threads=num_threads, seed=seed, autoreset="same_step",
                             **options)
        spec = self._pool.spec
        self._info_names = resolve_info_keys(spec, info_keys)
        self._renamed = any(k != v for k, v in self._info_names.items())
        # Infos stored under "next" are the terminal step's (same-step auto-reset
        # puts the new episode's values under the plain names).
        self._final_src = {k: v if v == "elapsed_step" else f"final_{v}"
                           for k, v in self._info_names.items()}
        #: TensorDict keys of the stored infos.
        self.info_keys = list(self._info_names)
        self.observation_spec: Composite = observation_spec_from(
            spec, self.num_envs, list(self._info_names.values()), observation_dtype=obs_dtype)
        # NumPy dtype the policy sees observations in (None: the env's own).
        self._obs_cast = (None if obs_dtype is None else
                          torch.empty(0, dtype=obs_dtype).numpy().dtype)
        if self._obs_cast == spec.observation_space.dtype:
            self._obs_cast = None
        self.action_spec = action_spec_from(spec, self.num_envs)
        self.action_spec_unbatched = action_spec_from(spec, 1)[0]

        self._user_policy = policy
        self.policy = self._wrap_policy(policy)
        self._direct = policy is not None and not isinstance(policy, TensorDictModuleBase)
        if policy_device is None:
            params = list(policy.parameters()) if isinstance(policy, nn.Module) else []
            policy_device = params[0].device if params else torch.device("cpu")
        self.policy_device = torch.device(policy_device)
        self.policy_version = 0

        self._frames = 0
        self._iter = -1
        self._closed = False
        self._slots: _Slots | None = None
        self._seed_pending: tuple[int, np.ndarray] | None = None

    def _init_delegate(self, env: Any, policy: Any, frames_per_batch: int, total_frames: int,
                       policy_device: Any, storing_device: Any, replay_buffer: Any,
                       exploration_type: ExplorationType, torchrl_kwargs: dict) -> None:
        """Hands collection to TorchRL's own ``Collector`` (envs the pool path cannot drive)."""
        self._delegate = Collector(
            env, policy, frames_per_batch=frames_per_batch, total_frames=total_frames,
            policy_device=policy_device, storing_device=storing_device,
            replay_buffer=replay_buffer, exploration_type=exploration_type,
            split_trajs=self.split_trajs, postproc=self.postproc, **torchrl_kwargs)
        d = self._delegate
        self.env_id = getattr(getattr(d.env, "base_env", d.env), "env_id", None)
        self.num_envs = int(d.env.batch_size.numel())
        self.batch_size = self.num_envs
        self.deterministic = False
        self.frames_per_batch = d.frames_per_batch
        self.requested_frames_per_batch = d.requested_frames_per_batch
        self.total_frames = d.total_frames
        self.replay_buffer = replay_buffer
        self.exploration_type = exploration_type
        self.policy = d.policy
        self._user_policy = policy
        self.policy_device = d.policy_device
        self.storing_device = d.storing_device
        self._pool = None
        self._closed = False
        self.policy_version = 0

    @property
    def env(self) -> EnvBase | None:
        """The TorchRL env collected from, when TorchRL's ``Collector`` runs it (else ``None``)."""
        return None if self._delegate is None else self._delegate.env

    # -- policy -----------------------------------------------------------------------
    def _wrap_policy(self, policy: Any) -> Callable[[TensorDictBase], TensorDictBase]:
        if policy is None:
            return _RandomPolicy(self.action_spec_unbatched)
        if isinstance(policy, TensorDictModuleBase):
            return policy
        if isinstance(policy, nn.Module):
            return TensorDictModule(policy, in_keys=["observation"], out_keys=["action"])
        if callable(policy):
            return TensorDictModule(policy, in_keys=["observation"], out_keys=["action"])
        raise TypeError(f"policy must be a TensorDictModule, an nn.Module, a callable or None,"
                        f" got {type(policy).__name__}")

    def update_policy_weights_(self, policy_or_weights: Any = None, *, weights: Any = None,
                               policy: Any = None, **kwargs: Any) -> None:
        """Loads new weights into the collector's policy.

        The policy runs in this process, so a policy trained in place needs no
        call; pass a module, a ``state_dict`` or a ``TensorDict`` of weights
        (as from ``TensorDict.from_module``) to copy other weights in. The next
        policy call uses them.

        Example:
            >>> import torch
            >>> from torch import nn
            >>> from torchfrag.collectors import PoolCollector
            >>> net = nn.Linear(4, 2)
            >>> c = PoolCollector("CartPole-v1", lambda o: net(o).argmax(-1),
            ...                   frames_per_batch=8, num_envs=2)
            >>> c.update_policy_weights_()  # nothing to do: same process
            >>> c.shutdown()
        """
        if self._delegate is not None:
            self._delegate.update_policy_weights_(policy_or_weights, weights=weights,
                                                  policy=policy, **kwargs)
            self.policy_version += 1
            return
        src = policy_or_weights if policy_or_weights is not None else (
            weights if weights is not None else policy)
        if src is not None:
            target = self._user_policy
            if not isinstance(target, nn.Module):
                raise TypeError("update_policy_weights_ with weights needs an nn.Module policy")
            if isinstance(src, nn.Module):
                target.load_state_dict(src.state_dict())
            elif isinstance(src, TensorDictBase):
                TensorDict.from_module(target).data.update_(src)
            elif isinstance(src, dict):
                target.load_state_dict(src)
            else:
                raise TypeError(f"cannot load weights from {type(src).__name__}")
        self.policy_version += 1

    # -- the loop ---------------------------------------------------------------------
    def _setup_slots(self) -> _Slots:
        slots = _Slots(self.num_envs, self.steps_per_batch)
        obs_spec = self.observation_spec
        for k in ("observation", *self.info_keys):
            leaf = obs_spec[k]
            slots.add(k, tuple(leaf.shape[1:]), leaf.dtype)
            slots.add(("next", k), tuple(leaf.shape[1:]), leaf.dtype)
        for k in ("done", "terminated", "truncated"):
            slots.add(k, (1,), torch.bool, zero=True)
            slots.add(("next", k), (1,), torch.bool)
        slots.add(("next", "reward"), (1,), torch.float32)
        slots.add("action", tuple(self.action_spec.shape[1:]), self.action_spec.dtype)
        slots.add(("collector", "traj_ids"), (), torch.int64)
        return slots

    def _policy_input(self, obs: np.ndarray, info: dict) -> TensorDictBase:
        if self._obs_cast is not None:
            obs = obs.astype(self._obs_cast)
        data = {"observation": torch.from_numpy(obs)}
        for k in self.info_keys:
            data[k] = torch.from_numpy(np.asarray(info[k]))
        td = new_tensordict(data, torch.Size([len(obs)]))
        if self.policy_device.type != "cpu":
            td = td.to(self.policy_device, non_blocking=True)
        return td

    def _act(self, ids: np.ndarray, obs: np.ndarray, info: dict) -> np.ndarray:
        """Runs the policy on one batch, stores the root entries, returns actions.

        ``obs``/``info`` rows belong to ``ids``; they may be views of the
        pool's buffers (copied here into the batch).
        """
        if self._seed_pending is not None:
            self._apply_pending_seed(ids)
        pos = self._count[ids]
        pmax = int(pos.max())
        out = None
        policy = self.policy
        if isinstance(policy, _RandomPolicy):
            action = policy.sample(len(ids))
        elif self._direct:
            # Plain module or callable on the observation tensor: no TensorDict
            # round trip (TensorDictModule adds ~100us per call).
            x = torch.from_numpy(obs if self._obs_cast is None else obs.astype(self._obs_cast))
            if self.policy_device.type != "cpu":
                x = x.to(self.policy_device, non_blocking=True)
            with torch.no_grad(), set_exploration_type(self.exploration_type):
                action = self._user_policy(x)
        else:
            td = self._policy_input(obs, info)
            with torch.no_grad(), set_exploration_type(self.exploration_type):
                out = policy(td)
            if out is None:
                out = td
            action = out.get("action", None)
            if action is None:
                raise KeyError("the policy did not write an 'action' entry")
            if action.device.type != "cpu":
                out = out.to("cpu")
                action = out.get("action")
        if not isinstance(action, torch.Tensor):
            raise TypeError(f"the policy returned {type(action).__name__}, expected a tensor")
        if action.device.type != "cpu":
            action = action.cpu()
        action_np = action.detach().numpy()
        if action_np.dtype != self._action_np_dtype or action_np.shape != self._action_shape(
                len(ids)):
            action_np = self._check_action(action_np, len(ids))
        slots = self._slots
        flat = ids * slots.t + pos if pmax < slots.t else None
        slots.write("observation", ids, pos, obs, pmax, flat)
        for k in self.info_keys:
            val = info[k]
            if k == "elapsed_step":
                val = np.where(self._just_reset[ids], 0, val)
            slots.write(k, ids, pos, val, pmax, flat)
        slots.write("action", ids, pos, action_np, pmax, flat)
        slots.write(("collector", "traj_ids"), ids, pos, self._traj[ids], pmax, flat)
        if out is not None:
            for key, val in out.items(include_nested=True, leaves_only=True):
                if key in self._root_keys:
                    continue
                if key not in slots.spec:
                    slots.add(key, tuple(val.shape[1:]), val.dtype)
                val = val.detach()
                if slots.np_main[key] is not None:
                    val = val.numpy()
                slots.write(key, ids, pos, val, pmax, flat)
        return action_np

    def _action_shape(self, m: int) -> tuple[int, ...]:
        return (m, *self.action_spec.shape[1:])

    @property
    def _action_np_dtype(self) -> np.dtype:
        return np.dtype(np.int64) if self.action_spec.dtype == torch.int64 else np.dtype(
            np.float32)

    def _check_action(self, action: np.ndarray, m: int) -> np.ndarray:
        want = self._action_shape(m)
        if action.shape != want:
            if not (action.size == int(np.prod(want)) and action.ndim == len(want) + 1):
                raise ValueError(f"PoolCollector({self.env_id!r}): the policy returned actions of"
                                 f" shape {list(action.shape)}, expected {list(want)}")
            action = action.reshape(want)
        # Checked for every shape: a cast would silently turn 1.9 into action 1.
        if self.action_spec.dtype == torch.int64 and action.dtype.kind not in "iu":
            raise TypeError(f"PoolCollector({self.env_id!r}): discrete actions must be integers,"
                            f" got dtype {action.dtype}")
        return action.astype(self._action_np_dtype, copy=False)

    def _record_next(self, ids: np.ndarray, obs: np.ndarray, rew: np.ndarray, term: np.ndarray,
                     trunc: np.ndarray, info: dict, rows: np.ndarray | None) -> int:
        """Stores the transition each env of a received batch just finished.

        Returns the highest step count among ``ids`` afterwards.
        """
        if rows is not None:
            final = info["final_obs"][rows]
        else:
            final = info["final_obs"]
        done = term | trunc
        pos = self._count[ids]
        pmax = int(pos.max())
        slots = self._slots
        flat = ids * slots.t + pos if pmax < slots.t else None
        slots.write(("next", "observation"), ids, pos, final, pmax, flat)
        slots.write(("next", "reward"), ids, pos, rew[:, None], pmax, flat)
        slots.write(("next", "terminated"), ids, pos, term[:, None], pmax, flat)
        slots.write(("next", "truncated"), ids, pos, trunc[:, None], pmax, flat)
        slots.write(("next", "done"), ids, pos, done[:, None], pmax, flat)
        for k, src in self._final_src.items():
            val = info[src] if rows is None else info[src][rows]
            slots.write(("next", k), ids, pos, val, pmax, flat)
        self._count[ids] += 1
        self._just_reset[ids] = done
        if np.count_nonzero(done):
            finished = np.sort(ids[done])
            self._traj[finished] = np.arange(self._next_traj, self._next_traj + len(finished))
            self._next_traj += len(finished)
        return pmax + 1

    def _start(self) -> None:
        n = self.num_envs
        self._slots = self._setup_slots()
        self._root_keys = set(self._slots.spec)
        self._count = np.zeros(n, dtype=np.int64)
        self._traj = np.arange(n, dtype=np.int64)
        self._next_traj = n
        self._just_reset = np.ones(n, dtype=bool)

    def _batch_ready(self) -> bool:
        return bool(self._count.min() >= self.steps_per_batch)

    def _emit(self) -> TensorDictBase:
        t = self.steps_per_batch
        data = self._slots.rotate(self._count)
        self._count -= t
        n = self.num_envs
        nested: dict[str, dict[str, torch.Tensor]] = {}
        flat: dict[str, torch.Tensor] = {}
        for key, val in data.items():
            if isinstance(key, tuple):
                node = nested
                for part in key[:-2]:
                    node = node.setdefault(part, {})  # type: ignore[assignment]
                node.setdefault(key[-2], {})[key[-1]] = val
            else:
                flat[key] = val
        for name, sub in nested.items():
            flat[name] = new_tensordict(sub, torch.Size([n, t]))
        batch = new_tensordict(flat, torch.Size([n, t]))
        if self.storing_device is not None and self.storing_device.type != "cpu":
            batch = batch.to(self.storing_device, non_blocking=True)
        batch.refine_names(..., "time")
        return batch

    def _batches_async(self) -> Iterator[TensorDictBase]:
        pool = self._pool
        pool.async_reset()
        t = self.steps_per_batch
        n_fresh = self.num_envs  # envs whose reset result has not arrived yet
        while True:
            obs, rew, term, trunc, info = pool.recv()
            if self._renamed:
                info = remap_infos(info, self._info_names)
            ids = info["env_id"].astype(np.int64)
            if n_fresh:
                fresh = self._fresh[ids]
                keep = ~fresh
                n_fresh -= int(np.count_nonzero(fresh))
                self._fresh[ids] = False
                top = 0
                if keep.any():
                    top = self._record_next(ids[keep], obs[keep], rew[keep], term[keep],
                                            trunc[keep], {k: v[keep] for k, v in info.items()},
                                            None)
            else:
                top = self._record_next(ids, obs, rew, term, trunc, info, None)
            if top >= t:
                while self._batch_ready():
                    yield self._emit()
            pool.send(self._act(ids, obs, info), ids)

    def _batches_deterministic(self) -> Iterator[TensorDictBase]:
        pool, m = self._pool, self.batch_size
        groups = [np.arange(g * m, (g + 1) * m, dtype=np.int64) for g in range(self.num_envs // m)]
        latest: list[tuple[np.ndarray, dict] | None] = [None] * len(groups)

        def receive(g: int, record: bool) -> None:
            obs, rew, term, trunc, info = pool.recv()
            if self._renamed:
                info = remap_infos(info, self._info_names)
            ids = info["env_id"].astype(np.int64)
            order = np.argsort(ids, kind="stable")
            ids = ids[order]
            if not np.array_equal(ids, groups[g]):
                raise RuntimeError("deterministic PoolCollector received an unexpected batch")
            if record:
                self._record_next(ids, obs[order], rew[order], term[order], trunc[order], info,
                                  order)
            # Keep copies: the pool reuses this buffer on the next recv.
            latest[g] = (obs[order], {k: info[k][order] for k in self.info_keys})

        def act(g: int) -> np.ndarray:
            obs, info = latest[g]
            return self._act(groups[g], obs, info)

        for g, ids in enumerate(groups):
            pool.async_reset(ids)
            receive(g, record=False)
        ng = len(groups)
        g = 0
        pending = act(0)
        pool.send(pending, groups[0])
        t = self.steps_per_batch
        while True:
            h = (g + 1) % ng
            # Does receiving group g complete the batch? Then hand it out before
            # the policy runs again, so the next batch is fully on-policy.
            completes = (self._count[groups[g]].min() + 1 >= t) and all(
                self._count[groups[x]].min() >= t for x in range(ng) if x != g)
            if ng > 1 and not completes:
                actions_h = act(h)
                receive(g, record=True)
            else:
                receive(g, record=True)
                while self._batch_ready():
                    yield self._emit()
                actions_h = act(h)
            pool.send(actions_h, groups[h])
            g = h

    def iterator(self) -> Iterator[TensorDictBase]:
        """Yields batches until ``total_frames`` are collected (forever if ``-1``)."""
        if self._closed:
            raise RuntimeError("PoolCollector was shut down")
        if self._delegate is not None:
            yield from self._delegate.iterator()
            return
        if self._slots is not None:
            raise RuntimeError("PoolCollector can be iterated only once")
        self._start()
        self._fresh = np.ones(self.num_envs, dtype=bool)
        gen = self._batches_deterministic() if self.deterministic else self._batches_async()
        for batch in gen:
            self._iter += 1
            self._frames += batch.numel()
            if self.split_trajs:
                batch = split_trajectories(batch)
            if self.postproc is not None:
                batch = self.postproc(batch)
            if self.post_collect_hook is not None:
                self.post_collect_hook(batch)
            if self.replay_buffer is not None:
                self.replay_buffer.extend(batch)
                yield None
            else:
                yield batch
            if 0 <= self.total_frames <= self._frames:
                return

    # -- lifetime and bookkeeping -----------------------------------------------------
    def shutdown(self, timeout: float | None = None, close_env: bool = True,
                 raise_on_error: bool = True) -> None:
        """Stops the pool's threads and frees the envs. Idempotent."""
        self._closed = True
        if self._delegate is not None:
            self._delegate.shutdown(timeout=timeout, close_env=close_env,
                                    raise_on_error=raise_on_error)
        elif close_env:
            self._pool.close()

    def set_seed(self, seed: int, static_seed: bool = False) -> int:
        """Reseeds every env (effective from each env's next reset); returns ``seed``.

        Envs in flight are reseeded when they next come back, before their
        next step is sent.
        """
        if self._delegate is not None:
            return self._delegate.set_seed(seed, static_seed)
        if self._pool.in_flight == 0:
            self._pool.seed(int(seed))
        else:
            self._seed_pending = (int(seed), np.ones(self.num_envs, dtype=bool))
        return seed

    def _apply_pending_seed(self, ids: np.ndarray) -> None:
        seed, todo = self._seed_pending
        sel = ids[todo[ids]]
        if sel.size:
            self._pool.seed(seed, sel)
            todo[sel] = False
        if not todo.any():
            self._seed_pending = None

    def state_dict(self) -> OrderedDict:
        """Policy weights (if any) and the frame count."""
        if self._delegate is not None:
            return self._delegate.state_dict()
        out: OrderedDict = OrderedDict(frames=self._frames, iter=self._iter)
        if isinstance(self._user_policy, nn.Module):
            out["policy_state_dict"] = self._user_policy.state_dict()
        return out

    def load_state_dict(self, state_dict: OrderedDict) -> None:
        """Restores what :meth:`state_dict` saved."""
        if self._delegate is not None:
            self._delegate.load_state_dict(state_dict)
            return
        if "policy_state_dict" in state_dict and isinstance(self._user_policy, nn.Module):
            self._user_policy.load_state_dict(state_dict["policy_state_dict"])
        self._frames = int(state_dict.get("frames", self._frames))
        self._iter = int(state_dict.get("iter", self._iter))

    @property
    def pool(self) -> EnvPool:
        """The underlying async :class:`~torchfrag.envs.EnvPool` (pool path only)."""
        if self._pool is None:
            raise AttributeError("this PoolCollector runs TorchRL's Collector over"
                                 f" {type(self.env).__name__}; it has no async pool (see .env)")
        return self._pool

    def __repr__(self) -> str:
        if self._delegate is not None:
            return f"PoolCollector(TorchRL Collector over {self._delegate.env!r})"
        return (f"PoolCollector({self.env_id!r}, num_envs={self.num_envs},"
                f" batch_size={self.batch_size}, frames_per_batch={self.frames_per_batch},"
                f" total_frames={self.total_frames}, deterministic={self.deterministic})")
