"""HalfCheetah-v5 on MuJoCo Warp: a MuJoCo task whose worlds all step on the env's device.

Optional: needs ``pip install torchfrag[gpu]`` (``mujoco-warp`` and ``warp-lang``),
imported only when the env is built. Warp runs on CUDA devices and, for
development, on the CPU (its kernels compile on first use: minutes on the CPU,
cached afterwards in Warp's kernel cache).

Observation, reward, termination, reset noise and options follow Gymnasium's
``HalfCheetah-v5``. MuJoCo Warp computes in float32 (Gymnasium's MuJoCo in
float64), so trajectories agree with Gymnasium's to float32 accuracy over a
few steps and then drift apart (measured on the CPU: observations within
1e-5 for 7 steps, 1e-2 by step 30). Returns agree closely: a fixed open-loop
policy (``a_j = sin(0.3 t + j)``) over a full 1000-step episode from the same
four synced starts returned -301.75 on Warp and -301.79 on Gymnasium (mean;
largest per-env gap 0.24, relative 1.4e-4).

Example:
    >>> from torchfrag.envs.batched.mjwarp import warp_available
    >>> isinstance(warp_available(), bool)
    True
"""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from typing import Any

import torch

from torchfrag.envs.batched.base import BatchedEnv

logger = logging.getLogger(__name__)

__all__ = ["HalfCheetahWarp", "warp_available"]


def warp_available() -> bool:
    """Whether ``mujoco_warp`` and ``warp`` can be imported (the ``[gpu]`` extra)."""
    return all(importlib.util.find_spec(m) is not None for m in ("warp", "mujoco_warp"))


def _import_warp() -> tuple[Any, Any]:
    try:
        import mujoco_warp as mjw
        import warp as wp
    except ImportError as e:
        raise ImportError("MuJoCo Warp envs need the optional extra: pip install 'torchfrag[gpu]' "
                          f"(mujoco-warp and warp-lang); import failed: {e}") from e
    wp.config.quiet = True
    wp.init()
    return wp, mjw


class HalfCheetahWarp(BatchedEnv):
    """Gymnasium's HalfCheetah-v5 with all worlds on one device through MuJoCo Warp.

    Options as the C++ ``HalfCheetah-v5``: ``forward_reward_weight``,
    ``ctrl_cost_weight`` and ``reset_noise_scale`` per env,
    ``exclude_current_positions_from_observation``, ``frame_skip``,
    ``max_episode_steps`` (``xml_file`` only at its default).
    """

    env_id = "HalfCheetah-v5"
    state_dim = 18  # nq + nv
    compilable = False  # the step calls Warp kernels, which torch.compile cannot trace

    def __init__(self, num_envs: int = 1, **kwargs: Any) -> None:
        self._wp, self._mjw = _import_warp()
        import gymnasium
        import mujoco

        super().__init__(num_envs, **kwargs)
        if self.settings["xml_file"] != "half_cheetah.xml":
            raise ValueError(f"xml_file={self.settings['xml_file']!r}: HalfCheetahWarp loads only "
                             "Gymnasium's half_cheetah.xml")
        if not self.settings["exclude_current_positions_from_observation"]:
            raise ValueError("exclude_current_positions_from_observation=False is not supported by "
                             "HalfCheetahWarp (its observation spec is the 17-entry one)")
        if self.settings["frame_skip"] < 1:
            raise ValueError(f"frame_skip must be >= 1, got {self.settings['frame_skip']}")
        xml = os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco", "assets",
                           "half_cheetah.xml")
        self._mjm = mujoco.MjModel.from_xml_path(xml)
        self.nq, self.nv = int(self._mjm.nq), int(self._mjm.nv)
        assert self.nq + self.nv == self.state_dim
        self.reset_draws = self.nq + 2 * self.nv
        mjd = mujoco.MjData(self._mjm)
        self._init_qpos = torch.as_tensor(self._mjm.qpos0.copy(), device=self.device)
        self._init_qvel = torch.zeros(self.nv, dtype=torch.float64, device=self.device)
        self.sim_dt = float(self._mjm.opt.timestep) * int(self.settings["frame_skip"])
        with self._scope():
            self._m = self._mjw.put_model(self._mjm)
            self._d = self._mjw.put_data(self._mjm, mjd, nworld=self.num_envs)
        self._views()

    def _warp_device(self) -> str:
        return "cpu" if self.device.type == "cpu" else f"cuda:{self.device.index or 0}"

    def _scope(self) -> contextlib.ExitStack:
        # Warp kernels run on the env's device, and on CUDA in torch's current
        # stream, so they are ordered with the torch operations around them.
        wp = self._wp
        stack = contextlib.ExitStack()
        stack.enter_context(wp.ScopedDevice(self._warp_device()))
        if self.device.type == "cuda":
            stack.enter_context(wp.ScopedStream(wp.stream_from_torch(self.device)))
        return stack

    def _views(self) -> None:
        to_torch = self._wp.to_torch
        self._qpos = to_torch(self._d.qpos)
        self._qvel = to_torch(self._d.qvel)
        self._ctrl = to_torch(self._d.ctrl)

    def to(self, device: torch.device | str) -> HalfCheetahWarp:
        dev = torch.device(device)
        if dev.type != self.device.type or (dev.index or 0) != (self.device.index or 0):
            raise ValueError(f"HalfCheetahWarp lives on {self.device}; build it on {device} instead")
        return self

    def compile_kernel(self, backend: str = "inductor", **kwargs: Any) -> None:
        raise ValueError("HalfCheetahWarp steps through Warp kernels; torch.compile does not apply")

    def sample_reset(self, u: torch.Tensor) -> torch.Tensor:
        nq, nv = self.nq, self.nv
        scale = self.params["reset_noise_scale"].to(u.device).unsqueeze(-1)
        qpos = self._init_qpos + (-scale + 2 * scale * u[:, :nq])
        # Standard normals by Box-Muller from pairs of uniforms.
        u1, u2 = u[:, nq:nq + nv], u[:, nq + nv:nq + 2 * nv]
        normal = torch.sqrt(-2.0 * torch.log1p(-u1)) * torch.cos(2 * torch.pi * u2)
        qvel = self._init_qvel + scale * normal
        return torch.cat((qpos, qvel), -1)

    def dynamics(self, state, action, elapsed, episode):
        wp, mjw = self._wp, self._mjw
        nq = self.nq
        with self._scope():
            # A new episode starts from cleared data (mj_resetData), as Gymnasium's reset.
            mjw.reset_data(self._m, self._d, reset=wp.from_torch(elapsed == 0))
            self._qpos.copy_(state[:, :nq])
            self._qvel.copy_(state[:, nq:])
            self._ctrl.copy_(action)
            for _ in range(int(self.settings["frame_skip"])):
                mjw.step(self._m, self._d)
        new_state = torch.cat((self._qpos, self._qvel), -1).to(torch.float64)
        x_velocity = (new_state[:, 0] - state[:, 0].to(torch.float64)) / self.sim_dt
        forward = self.params["forward_reward_weight"] * x_velocity
        ctrl_cost = self.params["ctrl_cost_weight"] * action.to(torch.float64).square().sum(-1)
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return new_state, forward - ctrl_cost, terminated

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        start = 1 if self.settings["exclude_current_positions_from_observation"] else 0
        return state[:, start:].to(torch.float64)
