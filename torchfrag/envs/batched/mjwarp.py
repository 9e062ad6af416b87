"""Gymnasium's MuJoCo v5 locomotion tasks on MuJoCo Warp: every world steps on the env's device.

:class:`HalfCheetahWarp`, :class:`HopperWarp` and :class:`AntWarp` are
:class:`~torchfrag.envs.batched.BatchedEnv`\\ s whose physics runs in MuJoCo
Warp kernels on the env's device (a CUDA device, or the CPU for development:
one code path, the device is a parameter). Observation, reward terms,
termination (healthy ranges), reset noise, options and same-step auto-reset
follow Gymnasium's ``*-v5`` and the C++ pool's envs of the same id.

Optional: needs ``pip install torchfrag[gpu]`` (``mujoco-warp`` and ``warp-lang``),
imported only when an env is built. Warp kernels compile on first use
(minutes on the CPU, cached afterwards in Warp's kernel cache).

Accuracy: MuJoCo Warp computes in float32 (Gymnasium's MuJoCo in float64),
so trajectories agree with Gymnasium's to float32 accuracy over a few steps
and then drift apart. Measured on the CPU (MuJoCo and MuJoCo Warp 4.0.0) from
the same synced starts with a fixed open-loop policy ``a_j = sin(0.3 t + j)``
(:data:`MEASURED`; ``tests/test_torch_envs.py`` and ``tests/test_mjwarp.py``
check the first steps and short open-loop stretches on every push):

* HalfCheetah-v5: observations within 1e-5 for 7 steps, 1e-2 by step 30;
  over a full 1000-step episode from four starts the mean return was -301.75
  on Warp and -301.79 on Gymnasium (largest per-env gap 0.24, relative 1.4e-4).
* Hopper-v5: observations within 5e-6 over whole episodes; eight starts all
  fell at step 17 on both sides, mean return 10.382219 on both (largest
  per-env gap 5.7e-6).
* Ant-v5 does **not** follow Gymnasium's past its first foot contact: with
  Gymnasium's default pyramidal friction cone (condim 3), MuJoCo Warp's
  contact response differs from MuJoCo's (the torso's angular velocity
  differs by 0.43 rad/s right after the first contact, in the raw simulators,
  whatever the solver or contact margin; with the elliptic cone or
  frictionless contacts they agree to 2e-5). Before that contact the
  observations agree to 3e-6. Over whole episodes (eight starts, up to 1000
  steps) the open-loop Ant fell after 20-108 steps on Warp (mean return
  -57.2) and after 21-1000 steps on Gymnasium (mean -183.9, of which one
  1000-step episode at -1004.4; median -68.3 against -27.8 on Warp): the two
  simulators give different episodes, not a float32 drift. With the elliptic
  cone on both sides the joints agree to 2e-4 over the first 19 steps, and 4
  of the 8 whole episodes have the same length and return (to 0.01) on both
  sides, the other 4 parting later through contacts (mean -44.7 on Warp,
  -50.6 on Gymnasium): the float32 drift one expects.

Example:
    >>> from torchfrag.envs.batched.mjwarp import WARP_ENVS, warp_available
    >>> isinstance(warp_available(), bool), sorted(WARP_ENVS)
    (True, ['Ant-v5', 'HalfCheetah-v5', 'Hopper-v5'])
"""
from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
from typing import Any, ClassVar

import torch

from torchfrag.envs.batched.base import BatchedEnv

logger = logging.getLogger(__name__)

__all__ = ["MujocoWarpEnv", "HalfCheetahWarp", "HopperWarp", "AntWarp", "WARP_ENVS",
           "warp_available", "MEASURED"]

#: Fixed open-loop policy returns, Warp (CPU) vs Gymnasium, from the same synced starts:
#: ``a_j = sin(0.3 t + j)`` over one episode (up to 1000 steps), per task.
MEASURED: dict[str, dict[str, Any]] = {
    "HalfCheetah-v5": {"envs": 4, "warp_mean": -301.75, "gymnasium_mean": -301.79,
                       "max_abs_gap": 0.24},
    "Hopper-v5": {"envs": 8, "warp_mean": 10.382219, "gymnasium_mean": 10.382219,
                  "max_abs_gap": 5.7e-6, "episode_lengths": "17 on both sides"},
    "Ant-v5": {"envs": 8, "warp_mean": -57.19, "gymnasium_mean": -183.86,
               "episode_lengths_warp": [47, 21, 63, 21, 42, 20, 21, 108],
               "episode_lengths_gymnasium": [46, 67, 21, 42, 84, 84, 83, 1000],
               "note": "pyramidal friction cone: MuJoCo Warp's contact response differs",
               "elliptic_cone": {"warp_mean": -44.74, "gymnasium_mean": -50.64,
                                 "same_episode": "4 of 8 (length and return to 0.01)"}},
}


def warp_available() -> bool:
    """Whether ``mujoco_warp`` and ``warp`` can be imported (the ``[gpu]`` extra)."""
    return all(importlib.util.find_spec(m) is not None for m in ("warp", "mujoco_warp"))


def _import_warp() -> tuple[Any, Any]:
    from torchfrag.envs.mujoco_timer import keep_timer_off

    try:
        with keep_timer_off():  # mujoco_warp imports mujoco, whose timer would slow the CPU pool
            import mujoco_warp as mjw
            import warp as wp
    except ImportError as e:
        raise ImportError("MuJoCo Warp envs need the optional extra: pip install 'torchfrag[gpu]' "
                          f"(mujoco-warp and warp-lang); import failed: {e}") from e
    wp.config.quiet = True
    wp.init()
    return wp, mjw


def _normal(u1: torch.Tensor, u2: torch.Tensor) -> torch.Tensor:
    """Standard normals from pairs of uniforms in [0, 1) (Box-Muller)."""
    return torch.sqrt(-2.0 * torch.log1p(-u1)) * torch.cos(2 * torch.pi * u2)


class MujocoWarpEnv(BatchedEnv):
    """Base class: one of Gymnasium's MuJoCo v5 tasks with all worlds on one device.

    The state row of an env is ``[qpos, qvel, extra]`` in float64 (``extra``:
    what a task needs beyond the joints, e.g. Ant's contact forces); every
    step copies it into the Warp data, runs ``frame_skip`` MuJoCo steps and
    reads it back. Subclasses set the class attributes and implement
    :meth:`task` and :meth:`observe`.

    Args:
        num_envs: Number of worlds.
        **kwargs: :class:`~torchfrag.envs.batched.BatchedEnv`'s arguments and the
            C++ env's options (``xml_file`` only at its default, and only the
            options that keep the observation spec's shape).
    """

    compilable = False  # the step calls Warp kernels, which torch.compile cannot trace
    #: Gymnasium's model file (in ``gymnasium/envs/mujoco/assets``).
    xml_file: ClassVar[str] = ""
    #: Entries of the state row after ``qpos`` and ``qvel``.
    extra_dim: ClassVar[int] = 0
    #: Reset velocity noise: ``scale * N(0, 1)`` (True) or ``U(-scale, scale)`` (False).
    normal_qvel_noise: ClassVar[bool] = True
    #: Constraint rows allocated per world (None: MuJoCo Warp's default guess).
    njmax: ClassVar[int | None] = None
    #: Contacts allocated per world (None: MuJoCo Warp's default guess).
    nconmax: ClassVar[int | None] = None

    def __init__(self, num_envs: int = 1, **kwargs: Any) -> None:
        self._wp, self._mjw = _import_warp()
        import gymnasium
        import mujoco

        super().__init__(num_envs, **kwargs)
        name = type(self).__name__
        if self.settings["xml_file"] != self.xml_file:
            raise ValueError(f"xml_file={self.settings['xml_file']!r}: {name} loads only "
                             f"Gymnasium's {self.xml_file}")
        if not self.settings["exclude_current_positions_from_observation"]:
            raise ValueError("exclude_current_positions_from_observation=False is not supported by "
                             f"{name} (its observation spec is the default one)")
        if self.settings["frame_skip"] < 1:
            raise ValueError(f"frame_skip must be >= 1, got {self.settings['frame_skip']}")
        xml = os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco", "assets",
                           self.xml_file)
        self._mjm = mujoco.MjModel.from_xml_path(xml)
        self.nq, self.nv = int(self._mjm.nq), int(self._mjm.nv)
        if self.nq + self.nv + self.extra_dim != self.state_dim:
            raise AssertionError(f"{name}: state_dim {self.state_dim} != nq {self.nq} + nv "
                                 f"{self.nv} + extra {self.extra_dim}")
        self.reset_draws = self.nq + (2 if self.normal_qvel_noise else 1) * self.nv
        self.setup_model(self._mjm)
        mjd = mujoco.MjData(self._mjm)
        self._init_qpos = torch.as_tensor(self._mjm.qpos0.copy(), device=self.device)
        self._init_qvel = torch.zeros(self.nv, dtype=torch.float64, device=self.device)
        self.sim_dt = float(self._mjm.opt.timestep) * int(self.settings["frame_skip"])
        with self._scope():
            self._m = self._mjw.put_model(self._mjm)
            self._d = self._mjw.put_data(self._mjm, mjd, nworld=self.num_envs,
                                         nconmax=self.nconmax, njmax=self.njmax)
        to_torch = self._wp.to_torch
        self._qpos = to_torch(self._d.qpos)
        self._qvel = to_torch(self._d.qvel)
        self._ctrl = to_torch(self._d.ctrl)

    def setup_model(self, mjm: Any) -> None:
        """Checks options against the loaded model (``mujoco.MjModel``); raises ``ValueError``."""

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

    def to(self, device: torch.device | str) -> MujocoWarpEnv:
        dev = torch.device(device)
        if dev.type != self.device.type or (dev.index or 0) != (self.device.index or 0):
            raise ValueError(f"{type(self).__name__} lives on {self.device}; build it on {device} "
                             "instead")
        return self

    def compile_kernel(self, backend: str = "inductor", **kwargs: Any) -> None:
        raise ValueError(f"{type(self).__name__} steps through Warp kernels; torch.compile does "
                         "not apply")

    def param(self, name: str) -> torch.Tensor:
        """Per-env option ``name`` as a float64 ``[B]`` tensor."""
        return self.params[name]

    def sample_reset(self, u: torch.Tensor) -> torch.Tensor:
        nq, nv = self.nq, self.nv
        scale = self.param("reset_noise_scale").to(u.device).unsqueeze(-1)
        qpos = self._init_qpos + (-scale + 2 * scale * u[:, :nq])
        if self.normal_qvel_noise:
            noise = scale * _normal(u[:, nq:nq + nv], u[:, nq + nv:nq + 2 * nv])
        else:
            noise = -scale + 2 * scale * u[:, nq:nq + nv]
        qvel = self._init_qvel + noise
        return torch.cat((qpos, qvel, self.reset_extra(qpos, qvel)), -1)

    def reset_extra(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        """The ``extra`` entries of a freshly reset state (``[B, extra_dim]``)."""
        return qpos.new_zeros((qpos.shape[0], self.extra_dim))

    def after_substeps(self) -> None:
        """Runs after the ``frame_skip`` MuJoCo steps, inside the Warp device scope."""

    def dynamics(self, state, action, elapsed, episode):
        wp, mjw = self._wp, self._mjw
        nq, nv = self.nq, self.nv
        with self._scope():
            # A new episode starts from cleared data (mj_resetData), as Gymnasium's reset.
            mjw.reset_data(self._m, self._d, reset=wp.from_torch(elapsed == 0))
            self._qpos.copy_(state[:, :nq])
            self._qvel.copy_(state[:, nq:nq + nv])
            self._ctrl.copy_(action)
            for _ in range(int(self.settings["frame_skip"])):
                mjw.step(self._m, self._d)
            self.after_substeps()
        qpos = self._qpos.to(torch.float64)
        qvel = self._qvel.to(torch.float64)
        return self.task(state.to(torch.float64), qpos, qvel, action.to(torch.float64))

    def task(self, state: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor,
             action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(new_state, reward, terminated)`` from the state before and the joints after the step."""
        raise NotImplementedError

    def x_velocity(self, state: torch.Tensor, qpos: torch.Tensor) -> torch.Tensor:
        """``(qpos[0] after - qpos[0] before) / dt``."""
        return (qpos[:, 0] - state[:, 0]) / self.sim_dt


class HalfCheetahWarp(MujocoWarpEnv):
    """Gymnasium's HalfCheetah-v5 on MuJoCo Warp.

    Options as the C++ ``HalfCheetah-v5``: ``forward_reward_weight``,
    ``ctrl_cost_weight`` and ``reset_noise_scale`` per env, ``frame_skip``,
    ``max_episode_steps`` (``xml_file`` and
    ``exclude_current_positions_from_observation`` only at their defaults).
    """

    env_id = "HalfCheetah-v5"
    xml_file = "half_cheetah.xml"
    state_dim = 18  # nq + nv

    def task(self, state, qpos, qvel, action):
        forward = self.param("forward_reward_weight") * self.x_velocity(state, qpos)
        ctrl_cost = self.param("ctrl_cost_weight") * action.square().sum(-1)
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return torch.cat((qpos, qvel), -1), forward - ctrl_cost, terminated

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        return state[:, 1:].to(torch.float64)


class HopperWarp(MujocoWarpEnv):
    """Gymnasium's Hopper-v5 on MuJoCo Warp.

    Options as the C++ ``Hopper-v5``: ``forward_reward_weight``,
    ``ctrl_cost_weight``, ``healthy_reward``, the healthy ranges
    (``healthy_state_min/max``, ``healthy_z_min/max``,
    ``healthy_angle_min/max``) and ``reset_noise_scale`` per env,
    ``terminate_when_unhealthy``, ``frame_skip``, ``max_episode_steps``.
    Velocities are clipped to [-10, 10] in the observation, as Gymnasium's.
    """

    env_id = "Hopper-v5"
    xml_file = "hopper.xml"
    state_dim = 12  # nq + nv
    normal_qvel_noise = False  # Gymnasium's Hopper draws uniform velocity noise
    njmax = 64

    def is_healthy(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        """Gymnasium's ``is_healthy`` (strict bounds) for every env, ``[B]`` bool."""
        p = self.param
        z, angle = qpos[:, 1], qpos[:, 2]
        rest = torch.cat((qpos[:, 2:], qvel), -1)
        lo, hi = p("healthy_state_min").unsqueeze(-1), p("healthy_state_max").unsqueeze(-1)
        healthy_state = ((lo < rest) & (rest < hi)).all(-1)
        healthy_z = (p("healthy_z_min") < z) & (z < p("healthy_z_max"))
        healthy_angle = (p("healthy_angle_min") < angle) & (angle < p("healthy_angle_max"))
        return healthy_state & healthy_z & healthy_angle

    def task(self, state, qpos, qvel, action):
        healthy = self.is_healthy(qpos, qvel)
        forward = self.param("forward_reward_weight") * self.x_velocity(state, qpos)
        survive = healthy.to(torch.float64) * self.param("healthy_reward")
        ctrl_cost = self.param("ctrl_cost_weight") * action.square().sum(-1)
        terminated = ~healthy if self.settings["terminate_when_unhealthy"] else torch.zeros_like(healthy)
        return torch.cat((qpos, qvel), -1), forward + survive - ctrl_cost, terminated

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        nq = self.nq
        return torch.cat((state[:, 1:nq], state[:, nq:].clamp(-10.0, 10.0)), -1).to(torch.float64)


class AntWarp(MujocoWarpEnv):
    """Gymnasium's Ant-v5 on MuJoCo Warp.

    Options as the C++ ``Ant-v5``: ``forward_reward_weight``,
    ``ctrl_cost_weight``, ``contact_cost_weight``, ``healthy_reward``,
    ``healthy_z_min/max``, ``contact_force_min/max`` and ``reset_noise_scale``
    per env, ``terminate_when_unhealthy``, ``frame_skip``,
    ``max_episode_steps``; ``main_body`` only as the root body (``1`` or
    ``"torso"``); ``include_cfrc_ext_in_observation`` and
    ``exclude_current_positions_from_observation`` only at their defaults.

    Beyond the joints, the state row holds the external contact forces of
    every body (``cfrc_ext``, computed after the step as Gymnasium's
    ``mj_rnePostConstraint``) and the torso's x-y position as MuJoCo last
    computed it (``xpos``), which the next step's forward reward starts from.
    """

    env_id = "Ant-v5"
    xml_file = "ant.xml"
    nbody = 14
    state_dim = 15 + 14 + 6 * nbody + 2  # qpos, qvel, cfrc_ext of every body, torso xy
    extra_dim = 6 * nbody + 2
    njmax = 128

    def setup_model(self, mjm: Any) -> None:
        import mujoco

        if int(mjm.nbody) != self.nbody:
            raise AssertionError(f"ant.xml has {mjm.nbody} bodies, expected {self.nbody}")
        if not self.settings["include_cfrc_ext_in_observation"]:
            raise ValueError("include_cfrc_ext_in_observation=False is not supported by AntWarp "
                             "(its observation spec is the 105-entry one)")
        raw = str(self.settings["main_body"]).strip()
        body = int(raw) if raw.lstrip("-").isdigit() else mujoco.mj_name2id(
            mjm, mujoco.mjtObj.mjOBJ_BODY, raw)
        # The torso's position is the free joint's qpos[0:3], so a reset state's
        # x-y position needs no kinematics pass; other bodies would.
        if body != 1:
            raise ValueError(f"main_body={self.settings['main_body']!r}: AntWarp supports only the "
                             "root body (1 or 'torso')")
        self._main_body = body

    def after_substeps(self) -> None:
        # cfrc_ext as Gymnasium's step leaves it (mj_rnePostConstraint after mj_step).
        self._mjw.rne_postconstraint(self._m, self._d)

    def reset_extra(self, qpos: torch.Tensor, qvel: torch.Tensor) -> torch.Tensor:
        # mj_resetData clears cfrc_ext; set_state's mj_forward puts the torso at qpos[0:3].
        zeros = qpos.new_zeros((qpos.shape[0], 6 * self.nbody))
        return torch.cat((zeros, qpos[:, :2]), -1)

    def contact_forces(self, cfrc: torch.Tensor) -> torch.Tensor:
        """``cfrc_ext`` rows ``[B, nbody * 6]`` clipped to the per-env contact force range."""
        lo = self.param("contact_force_min").unsqueeze(-1).to(cfrc.dtype)
        hi = self.param("contact_force_max").unsqueeze(-1).to(cfrc.dtype)
        return torch.minimum(torch.maximum(cfrc, lo), hi)

    def task(self, state, qpos, qvel, action):
        to_torch = self._wp.to_torch
        n, nq, nv = self.num_envs, self.nq, self.nv
        cfrc = to_torch(self._d.cfrc_ext).reshape(n, 6 * self.nbody).to(torch.float64)
        xy_after = to_torch(self._d.xpos)[:, self._main_body, :2].to(torch.float64)
        xy_before = state[:, nq + nv + 6 * self.nbody:]
        x_velocity = (xy_after[:, 0] - xy_before[:, 0]) / self.sim_dt
        finite = torch.isfinite(qpos).all(-1) & torch.isfinite(qvel).all(-1)
        z = qpos[:, 2]
        healthy = finite & (self.param("healthy_z_min") <= z) & (z <= self.param("healthy_z_max"))
        forward = x_velocity * self.param("forward_reward_weight")
        survive = healthy.to(torch.float64) * self.param("healthy_reward")
        ctrl_cost = self.param("ctrl_cost_weight") * action.square().sum(-1)
        contact_cost = self.param("contact_cost_weight") * self.contact_forces(cfrc).square().sum(-1)
        reward = forward + survive - ctrl_cost - contact_cost
        terminated = ~healthy if self.settings["terminate_when_unhealthy"] else torch.zeros_like(healthy)
        return torch.cat((qpos, qvel, cfrc, xy_after), -1), reward, terminated

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        nq, nv = self.nq, self.nv
        forces = self.contact_forces(state[:, nq + nv + 6:nq + nv + 6 * self.nbody])
        return torch.cat((state[:, 2:nq], state[:, nq:nq + nv], forces), -1).to(torch.float64)


#: Env id -> MuJoCo Warp class.
WARP_ENVS: dict[str, type[MujocoWarpEnv]] = {
    cls.env_id: cls for cls in (HalfCheetahWarp, HopperWarp, AntWarp)
}
