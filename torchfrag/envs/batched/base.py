"""The TorchRL face shared by the torch-native batched envs: :class:`BatchedEnv`.

A :class:`BatchedEnv` keeps the state of all its envs in one tensor on its
device and steps them with a handful of elementwise tensor operations: no
host round trip, no Python loop over envs, so thousands of envs step next to
the policy on an accelerator. The face mirrors :class:`~torchfrag.envs.PoolEnv`
(batch ``[num_envs]``, reward and done flags ``[num_envs, 1]``, same-step
auto-reset, fast :meth:`~BatchedEnv.step_and_maybe_reset`), and the options,
specs and episode limits are the C++ pool's (:func:`torchfrag.envs.spec`).

Auto-reset: a step that finishes an env resets it in the same call. The
transition's ``"next"`` holds the terminal observation; the new episode's
first observation is what :meth:`~BatchedEnv.step_and_maybe_reset` carries
over, and what a later partial reset (``"_reset"``) of that env returns.

Randoms come from :mod:`torchfrag.envs.batched.rng` (a hash of the env's seed
and episode counter), so a seed gives the same episodes on every device.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import Any, Callable, ClassVar

import numpy as np
import torch
from gymnasium import spaces
from tensordict import TensorDict, TensorDictBase
from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

from torchfrag.envs._torchrl_compat import new_tensordict, step_mdp
from torchfrag.envs.batched.rng import counter_uniform, env_seeds
from torchfrag.envs.spec import EnvSpec, spec
from torchfrag.envs.torchrl_env import action_spec_from, observation_spec_from

logger = logging.getLogger(__name__)

__all__ = ["BatchedEnv", "Kernel"]

#: ``(state, elapsed, episode, action) -> (next_obs, reward, terminated, truncated,
#: carry_obs, carry_state, carry_elapsed, carry_episode)``.
Kernel = Callable[..., tuple[torch.Tensor, ...]]


class BatchedEnv(EnvBase):
    """Base class of the torch-native batched envs (see the module docstring).

    Subclasses set :attr:`env_id` and :attr:`state_dim`, and implement
    :meth:`sample_reset`, :meth:`dynamics` and :meth:`observe` as batched
    tensor code; options arrive as :attr:`params` (per-env float64 ``[B]``
    tensors for physical parameters) and :attr:`settings` (scalars).

    Args:
        num_envs: Number of envs (the batch size).
        seed: One seed (env ``i`` gets a seed hashed from ``(seed, i)``) or one
            int per env.
        device: Where the state and every returned tensor live.
        dtype: Internal state dtype (float64, as Gymnasium; float32 trades
            step-for-step agreement for speed on accelerators without fast float64).
        check_actions: Check that discrete actions are in range (one host
            synchronisation per step; turn off in fused loops).
        **options: The C++ env's options (:func:`torchfrag.envs.spec`
            ``(env_id).options``); physical parameters accept one value per env.
    """

    env_id: ClassVar[str] = ""
    state_dim: ClassVar[int] = 0
    #: Uniform draws per reset.
    reset_draws: ClassVar[int] = 0
    #: Whether torch.compile can trace the step (pure tensor code).
    compilable: ClassVar[bool] = True

    def __init__(self, num_envs: int = 1, *, seed: int | Sequence[int] | None = 0,
                 device: torch.device | str | None = None, dtype: torch.dtype = torch.float64,
                 check_actions: bool = True, **options: Any) -> None:
        if isinstance(num_envs, bool) or not isinstance(num_envs, (int, np.integer)) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive int, got {num_envs!r}")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be torch.float32 or torch.float64, got {dtype}")
        device = torch.device(device) if device is not None else torch.device("cpu")
        n = int(num_envs)
        super().__init__(device=device, batch_size=torch.Size([n]))
        self.num_envs = n
        self.dtype = dtype
        self.check_actions = bool(check_actions)
        self.pool_spec: EnvSpec = spec(self.env_id)
        self.params, self.settings = self._parse_options(options)
        limit = int(self.settings["max_episode_steps"])
        if limit < 0:
            raise ValueError(f"max_episode_steps must be >= 0 (0: no limit), got {limit}")
        # 0 means no limit: compare against a bound no episode reaches.
        self.max_episode_steps = limit if limit > 0 else (1 << 62)
        self.validate_options()
        self._discrete = isinstance(self.pool_spec.action_space, spaces.Discrete)
        self._make_specs()
        dev = self.device
        self._seeds = self._seed_tensor(seed)
        self._state = torch.zeros((n, self.state_dim), dtype=dtype, device=dev)
        self._elapsed = torch.zeros(n, dtype=torch.int64, device=dev)
        # Episode counter per env: reset draws hash (seed, episode); -1 until the first reset.
        self._episode = torch.full((n,), -1, dtype=torch.int64, device=dev)
        # Envs the last step auto-reset, whose next partial reset is served as is.
        self._pending = torch.zeros(n, dtype=torch.bool, device=dev)
        self._carry_obs: torch.Tensor | None = None
        self._kernel: Kernel = self.advance
        #: Steps run through a compiled kernel (see :meth:`compile_kernel`).
        self.compiled_steps = 0
        self._compiled = False
        self.is_closed = False

    # -- options ---------------------------------------------------------------------
    def _parse_options(self, options: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        known = self.pool_spec.options
        n, dev = self.num_envs, self.device
        params: dict[str, torch.Tensor] = {}
        settings: dict[str, Any] = {}
        for name in options:
            if name not in known:
                raise ValueError(f"unknown option {name!r} for {self.env_id}; allowed: {sorted(known)}")
        for name, info in known.items():
            value = options.get(name, info.default)
            if info.type == "float" and info.per_env:
                if isinstance(value, (str, bytes)):
                    raise ValueError(f"option {name}={value!r}: expected a float or {n} floats")
                arr = np.asarray(value, dtype=np.float64)
                if arr.ndim == 1 and arr.shape[0] != n:
                    raise ValueError(f"option {name}: got {arr.shape[0]} values, need per-env values "
                                     f"for {n} envs (or one value)")
                if arr.ndim > 1:
                    raise ValueError(f"option {name}: expected a float or {n} floats, got shape "
                                     f"{arr.shape}")
                # An option whose default is infinite (a range with no upper bound,
                # e.g. Hopper's healthy_z_max) takes infinities; none takes NaN.
                unbounded = not math.isfinite(float(info.default))
                if np.any(np.isnan(arr)) or (not unbounded and not np.all(np.isfinite(arr))):
                    raise ValueError(f"option {name}={value!r}: values must be "
                                     f"{'numbers (not NaN)' if unbounded else 'finite'}")
                params[name] = torch.as_tensor(np.broadcast_to(arr, (n,)).copy(), device=dev)
                continue
            if isinstance(value, (list, tuple, np.ndarray, torch.Tensor)):
                raise ValueError(f"option {name}={value!r}: {name!r} is not a per-env option")
            if info.type == "float":
                value = float(value)
            elif info.type == "int":
                value = int(value)
            elif info.type == "bool":
                if not isinstance(value, (bool, np.bool_)):
                    raise ValueError(f"option {name}={value!r}: expected a bool")
                value = bool(value)
            else:
                value = str(value)
            settings[name] = value
        return params, settings

    def validate_options(self) -> None:
        """Checks option values; subclasses raise ``ValueError`` naming the option."""

    def _require_positive(self, *names: str) -> None:
        for name in names:
            bad = self.params[name] <= 0
            if bool(bad.any()):
                raise ValueError(f"option {name} must be positive, got "
                                 f"{self.params[name][bad].tolist()} for envs "
                                 f"{bad.nonzero().flatten().tolist()}")

    def _choice(self, name: str, allowed: Sequence[str]) -> str:
        value = self.settings[name]
        if value not in allowed:
            raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
        return value

    def _seed_tensor(self, seed: int | Sequence[int] | None) -> torch.Tensor:
        if seed is None:
            seed = int.from_bytes(np.random.default_rng().bytes(7), "little")
        if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
            return env_seeds(int(seed), self.num_envs, self.device)
        seeds = [int(s) for s in seed]
        if len(seeds) != self.num_envs:
            raise ValueError(f"seed: got {len(seeds)} per-env seeds for {self.num_envs} envs")
        return torch.tensor([s - (1 << 64) if s >= 1 << 63 else s for s in
                             (s & ((1 << 64) - 1) for s in seeds)], dtype=torch.int64,
                            device=self.device)

    # -- specs -----------------------------------------------------------------------
    def _make_specs(self) -> None:
        n, dev = self.num_envs, self.device
        self.observation_spec = observation_spec_from(self.pool_spec, n, [], dev)
        self.action_spec = action_spec_from(self.pool_spec, n, dev)
        self.reward_spec = Unbounded(shape=(n, 1), dtype=torch.float32, device=dev)
        self.done_spec = Composite(
            done=Categorical(2, shape=(n, 1), dtype=torch.bool, device=dev),
            terminated=Categorical(2, shape=(n, 1), dtype=torch.bool, device=dev),
            truncated=Categorical(2, shape=(n, 1), dtype=torch.bool, device=dev),
            shape=(n,), device=dev,
        )

    # -- the env's maths: subclasses -----------------------------------------------------
    def sample_reset(self, u: torch.Tensor) -> torch.Tensor:
        """Initial states ``[B, state_dim]`` from ``[B, reset_draws]`` float64 uniforms."""
        raise NotImplementedError

    def dynamics(self, state: torch.Tensor, action: torch.Tensor, elapsed: torch.Tensor,
                 episode: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step of every env: ``(new_state, reward float64 [B], terminated bool [B])``."""
        raise NotImplementedError

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        """Float32 observations ``[B, obs_dim]`` of ``state``."""
        raise NotImplementedError

    def uniform(self, episode: torch.Tensor, step: int | torch.Tensor, k: int) -> torch.Tensor:
        """``[B, k]`` float64 uniforms of the envs' streams at ``(episode, step)``."""
        return counter_uniform(self._seeds, episode, step, k)

    # -- the pure kernel ---------------------------------------------------------------
    def advance(self, state: torch.Tensor, elapsed: torch.Tensor, episode: torch.Tensor,
                action: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Steps every env and resets the finished ones, as a pure tensor function.

        Returns ``(next_obs, reward, terminated, truncated, carry_obs,
        carry_state, carry_elapsed, carry_episode)``: the step's results, then
        the state the next step starts from (finished envs already reset).
        """
        new_state, reward, terminated = self.dynamics(state, action, elapsed, episode)
        new_state = new_state.to(state.dtype)
        elapsed = elapsed + 1
        truncated = elapsed >= self.max_episode_steps
        done = terminated | truncated
        next_obs = self.observe(new_state)
        episode = episode + done.to(torch.int64)
        fresh = self.sample_reset(self.uniform(episode, 0, self.reset_draws)).to(state.dtype)
        carry_state = torch.where(done.unsqueeze(-1), fresh, new_state)
        carry_elapsed = torch.where(done, torch.zeros_like(elapsed), elapsed)
        carry_obs = torch.where(done.unsqueeze(-1), self.observe(carry_state), next_obs)
        return (next_obs, reward, terminated, truncated, carry_obs, carry_state, carry_elapsed,
                episode)

    def compile_kernel(self, backend: str = "inductor", **kwargs: Any) -> None:
        """Runs :meth:`advance` through ``torch.compile`` from now on (same results up to float rounding)."""
        self._kernel = torch.compile(self.advance, backend=backend, **kwargs)
        self._compiled = True

    def uncompile_kernel(self) -> None:
        """Back to the eager :meth:`advance`."""
        self._kernel = self.advance
        self._compiled = False

    # -- state access (tests, syncing references) ------------------------------------------
    @property
    def state(self) -> torch.Tensor:
        """The internal state ``[num_envs, state_dim]`` (a copy)."""
        return self._state.clone()

    @property
    def elapsed(self) -> torch.Tensor:
        """Steps taken in the current episode, ``[num_envs]`` int64 (a copy)."""
        return self._elapsed.clone()

    # -- EnvBase ---------------------------------------------------------------------------
    def _action(self, action: torch.Tensor | None) -> torch.Tensor:
        if action is None:
            raise KeyError(f"{type(self).__name__}.step: the input tensordict has no 'action' entry")
        if not isinstance(action, torch.Tensor):
            raise TypeError(f"{type(self).__name__}.step: 'action' must be a tensor, got "
                            f"{type(action).__name__}")
        n = self.num_envs
        action = action.to(self.device)
        if self._discrete:
            if action.dtype.is_floating_point or action.dtype.is_complex or action.dtype == torch.bool:
                raise TypeError(f"{self.env_id}: discrete actions must be integers, got {action.dtype}")
            if action.numel() != n:
                raise ValueError(f"{self.env_id}: expected {n} actions, got shape "
                                 f"{tuple(action.shape)}")
            action = action.reshape(n).to(torch.int64)
            if self.check_actions:
                k = int(self.pool_spec.action_space.n)
                bad = (action < 0) | (action >= k)
                if bool(bad.any()):
                    raise ValueError(f"{self.env_id}: actions must be in [0, {k}), got "
                                     f"{action[bad].tolist()} for envs {bad.nonzero().flatten().tolist()}")
            return action
        shape = (n, *self.pool_spec.action_space.shape)
        if action.numel() != math.prod(shape):
            raise ValueError(f"{self.env_id}: expected actions of shape {shape}, got "
                             f"{tuple(action.shape)}")
        return action.reshape(shape).to(torch.float32)

    def _step(self, tensordict: TensorDictBase) -> TensorDictBase:
        action = self._action(tensordict.get("action", None))
        out = self._kernel(self._state, self._elapsed, self._episode, action)
        next_obs, reward, term, trunc, carry_obs, self._state, self._elapsed, self._episode = out
        if self._compiled:
            self.compiled_steps += 1
        done = term | trunc
        self._pending = done
        self._carry_obs = carry_obs
        return new_tensordict({
            "observation": next_obs,
            "reward": reward.to(torch.float32).unsqueeze(-1),
            "done": done.unsqueeze(-1),
            "terminated": term.unsqueeze(-1),
            "truncated": trunc.unsqueeze(-1),
        }, batch_size=self.batch_size, device=self.device)

    def _reset(self, tensordict: TensorDictBase | None = None, **kwargs: Any) -> TensorDictBase:
        n = self.num_envs
        mask = None
        if tensordict is not None:
            reset = tensordict.get("_reset", None)
            if reset is not None:
                mask = reset.reshape(n).to(self.device)
        if mask is None:
            real = torch.ones(n, dtype=torch.bool, device=self.device)
        else:
            # Envs the last step auto-reset are already in their new episode.
            real = mask & ~self._pending
        episode = self._episode + real.to(torch.int64)
        fresh = self.sample_reset(self.uniform(episode, 0, self.reset_draws)).to(self.dtype)
        self._state = torch.where(real.unsqueeze(-1), fresh, self._state)
        self._elapsed = torch.where(real, torch.zeros_like(self._elapsed), self._elapsed)
        self._episode = episode
        self._pending = torch.zeros(n, dtype=torch.bool, device=self.device) if mask is None \
            else self._pending & ~mask
        z = torch.zeros((n, 1), dtype=torch.bool, device=self.device)
        return new_tensordict({
            "observation": self.observe(self._state), "done": z, "terminated": z.clone(),
            "truncated": z.clone()}, batch_size=self.batch_size, device=self.device)

    def _set_seed(self, seed: int | None) -> None:
        self._seeds = self._seed_tensor(seed)
        # New seeds apply from the next reset, which draws episode 0 of the new streams.
        self._episode = torch.full_like(self._episode, -1)
        self._pending = torch.zeros_like(self._pending)

    def _step_and_maybe_reset(self, tensordict: TensorDictBase
                              ) -> tuple[TensorDictBase, TensorDictBase]:
        """Steps all envs; finished envs start over in the carry (no host synchronisation).

        Returns ``(tensordict, tensordict_)`` as :meth:`EnvBase.step_and_maybe_reset`.
        """
        if tensordict.device != self.device:
            tensordict = tensordict.to(self.device)
        tensordict = self.step(tensordict)
        tensordict_ = step_mdp(self, tensordict)
        tensordict_.set("observation", self._carry_obs)
        z = torch.zeros((self.num_envs, 1), dtype=torch.bool, device=self.device)
        for k in ("done", "terminated", "truncated"):
            tensordict_.set(k, z)
        self._pending = torch.zeros_like(self._pending)
        return tensordict, tensordict_

    def to(self, device: torch.device | str) -> BatchedEnv:
        """Moves the env (specs, state, seeds and parameters) to ``device``; it steps there from now on."""
        super().to(device)
        dev = self.device
        if self._state.device != dev:
            for name in ("_state", "_elapsed", "_episode", "_pending", "_seeds", "_carry_obs"):
                value = self.__dict__.get(name)
                if value is not None:
                    self.__dict__[name] = value.to(dev)
            self.params = {k: v.to(dev) for k, v in self.params.items()}
        return self

    def rand_action(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        """Writes a uniformly random ``"action"`` for every env into ``tensordict``."""
        if tensordict is None:
            tensordict = TensorDict(batch_size=self.batch_size, device=self.device)
        tensordict.set("action", self.action_spec.rand())
        return tensordict

    def close(self, *, raise_if_closed: bool = True) -> None:
        """Marks the env closed (it holds no outside resources)."""
        super().close(raise_if_closed=raise_if_closed)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.env_id!r}, num_envs={self.num_envs}, "
                f"device={self.device}, dtype={self.dtype})")
