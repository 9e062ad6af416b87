"""Frames of the DeepMind Control Suite ids, drawn as dm_control's ``physics.render`` draws them.

The C++ DMC envs hand out (``Pool.render_data``) their ``qpos`` and ``qvel``
followed by the model fields suite tasks write at reset (body positions and
quaternions, geom positions and sizes, site positions and sizes, light
positions: targets, their radii, the swimmer's target light), whole. A
:class:`DmcDrawer` loads the same suite model with the MuJoCo Python bindings
the pool links, writes those fields, runs ``mj_forward`` and draws the scene
with the calls ``physics.render`` makes: ``mjv_updateScene`` with default
options and the camera, ``mjr_render`` into the offscreen buffer of an
``MjrContext`` (font scale 150, 1000 scene geoms), ``mjr_readPixels``. The
OpenGL context is made here from ``MUJOCO_GL`` (EGL when headless) rather
than by ``mujoco.Renderer``, whose backend is fixed when ``mujoco`` is first
imported, possibly before ``MUJOCO_GL`` was set.

Defaults are TorchRL's ``DMControlEnv(from_pixels=True)``: camera 0, 240 x 320
(dm_control's default size); ``camera_id=-1`` is dm_control's own default, the
free camera. MuJoCo needs an OpenGL backend (EGL on a headless machine, see
:mod:`torchfrag.envs.rendering`).

Example:
    >>> from torchfrag.envs.dmc_rendering import model_file, render_fps
    >>> model_file("SwimmerSwimmer6-v1"), render_fps("CheetahRun-v1")
    ('swimmer6.xml', 100)
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["DmcDrawer", "model_file", "render_fps", "DEFAULT_SIZE", "DEFAULT_CAMERA"]

#: dm_control's ``physics.render`` size, ``(height, width)``.
DEFAULT_SIZE = (240, 320)
#: TorchRL's ``DMControlEnv`` camera (``camera_id=0``).
DEFAULT_CAMERA = 0

# Id prefix -> (the suite's model file, the task's time limit in seconds: every
# task lasts 1000 control steps, so the control rate is 1000 / limit).
_MODELS: dict[str, tuple[str, float]] = {
    "Acrobot": ("acrobot.xml", 10.0),
    "BallInCup": ("ball_in_cup.xml", 20.0),
    "Cartpole": ("cartpole.xml", 10.0),
    "Cheetah": ("cheetah.xml", 10.0),
    "Finger": ("finger.xml", 20.0),
    "Fish": ("fish.xml", 40.0),
    "Hopper": ("hopper.xml", 20.0),
    "Humanoid": ("humanoid.xml", 25.0),
    "ManipulatorBringBall": ("manipulator_bring_ball.xml", 10.0),
    "ManipulatorBringPeg": ("manipulator_bring_peg.xml", 10.0),
    "ManipulatorInsertBall": ("manipulator_insert_ball.xml", 10.0),
    "ManipulatorInsertPeg": ("manipulator_insert_peg.xml", 10.0),
    "Pendulum": ("pendulum.xml", 20.0),
    "PointMass": ("point_mass.xml", 20.0),
    "Reacher": ("reacher.xml", 20.0),
    "SwimmerSwimmer6": ("swimmer6.xml", 20.0),
    "SwimmerSwimmer15": ("swimmer15.xml", 20.0),
    "Walker": ("walker.xml", 25.0),
}

# The model fields after qpos and qvel in the render data: (name, values per object, count).
_FIELDS = (("body_pos", 3, "nbody"), ("body_quat", 4, "nbody"), ("geom_pos", 3, "ngeom"),
           ("geom_size", 3, "ngeom"), ("site_pos", 3, "nsite"), ("site_size", 3, "nsite"),
           ("light_pos", 3, "nlight"))


def _entry(env_id: str) -> tuple[str, float]:
    for prefix, entry in _MODELS.items():
        if env_id.startswith(prefix) and env_id.endswith("-v1"):
            return entry
    raise ValueError(f"{env_id!r} is not a DeepMind Control Suite id of the pool")


def model_file(env_id: str) -> str:
    """The suite model file of a DMC id (in dm_control's suite folder, or generated).

    Raises:
        ValueError: not a DMC id.
    """
    return _entry(env_id)[0]


def render_fps(env_id: str) -> int:
    """Frames per second of a DMC id's pictures: one per control step (dm_control has none).

    Example:
        >>> from torchfrag.envs.dmc_rendering import render_fps
        >>> render_fps("FishSwim-v1")
        25
    """
    return int(round(1000 / _entry(env_id)[1]))


def model_path(env_id: str) -> str:
    """Where the pool's C++ env reads the model of ``env_id`` from (the same lookup)."""
    from torchfrag._preload.mujoco import DMC_ASSETS_ENV_VAR
    from torchfrag._dmc_models import GENERATED_ENV_VAR

    name = model_file(env_id)
    for var in (DMC_ASSETS_ENV_VAR, GENERATED_ENV_VAR):
        folder = os.environ.get(var)
        if folder and os.path.isfile(os.path.join(folder, name)):
            return os.path.join(folder, name)
    raise ValueError(f"{env_id}: the suite model {name!r} was not found: install the dmc extra "
                     f"(dm-control) or set {DMC_ASSETS_ENV_VAR}")


class DmcDrawer:
    """Draws frames of one DMC id from the pool's render data.

    Args:
        env_id: A DMC id of the pool.
        height: Frame height (dm_control's default 240).
        width: Frame width (dm_control's default 320).
        camera_id: Camera index or name; ``-1`` is the free camera (dm_control's
            own default), 0 TorchRL's.

    Example:
        >>> from torchfrag.envs import make
        >>> pool = make("CartpoleBalance-v1", num_envs=1)
        >>> _ = pool.reset()
        >>> DmcDrawer("CartpoleBalance-v1", 84, 84).frame(pool._pool.render_data(0)).shape
        (84, 84, 3)
    """

    def __init__(self, env_id: str, height: int = DEFAULT_SIZE[0], width: int = DEFAULT_SIZE[1],
                 camera_id: int | str = DEFAULT_CAMERA) -> None:
        from torchfrag.envs.mujoco_timer import keep_timer_off

        with keep_timer_off():
            import mujoco

        self.env_id = env_id
        self._mujoco = mujoco
        self.model = mujoco.MjModel.from_xml_path(model_path(env_id))
        self.data = mujoco.MjData(self.model)
        for name, value in (("height", height), ("width", width)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise ValueError(f"{env_id}: {name} must be a positive int, got {value!r}")
        if isinstance(camera_id, str):
            camera = mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, camera_id)
            if camera < 0:
                raise ValueError(f"{env_id}: the model has no camera named {camera_id!r}")
            camera_id = camera
        if not -1 <= int(camera_id) < self.model.ncam:
            raise ValueError(f"{env_id}: camera_id must be -1 (free) or in [0, {self.model.ncam}),"
                             f" got {camera_id!r}")
        self.camera_id = int(camera_id)
        self.shape = (int(height), int(width), 3)
        vis = self.model.vis.global_
        if height > vis.offheight or width > vis.offwidth:
            raise ValueError(f"{env_id}: frames of at most {vis.offheight} x {vis.offwidth} "
                             f"(the model's offscreen buffer), asked for {height} x {width}")
        self._gl: Any = None  # OpenGL context and MuJoCo's, made by the first frame

    def _setup(self) -> tuple[Any, ...]:
        mujoco, m = self._mujoco, self.model
        context = _gl_context_class()(m.vis.global_.offwidth, m.vis.global_.offheight)
        context.make_current()
        mjr = mujoco.MjrContext(m, mujoco.mjtFontScale.mjFONTSCALE_150)
        mujoco.mjr_setBuffer(mujoco.mjtFramebuffer.mjFB_OFFSCREEN, mjr)
        camera = mujoco.MjvCamera()
        if self.camera_id == -1:
            mujoco.mjv_defaultFreeCamera(m, camera)
        else:
            camera.type = mujoco.mjtCamera.mjCAMERA_FIXED
            camera.fixedcamid = self.camera_id
        scene = mujoco.MjvScene(m, maxgeom=1000)
        return context, mjr, camera, scene, mujoco.MjvOption(), mujoco.MjvPerturb()

    def frame(self, state: np.ndarray) -> np.ndarray:
        """The frame ``[height, width, 3]`` uint8 of one env's render data."""
        m, d, mujoco = self.model, self.data, self._mujoco
        nq, nv = m.nq, m.nv
        fields = [(name, width, getattr(m, count)) for name, width, count in _FIELDS]
        expected = nq + nv + sum(w * n for _, w, n in fields)
        if state.shape != (expected,):
            raise ValueError(f"{self.env_id}: render data of {expected} values expected, got "
                             f"shape {state.shape}")
        d.qpos[:] = state[:nq]
        d.qvel[:] = state[nq:nq + nv]
        at = nq + nv
        for name, width, n in fields:
            getattr(m, name)[:] = state[at:at + width * n].reshape(n, width)
            at += width * n
        mujoco.mj_forward(m, d)
        if self._gl is None:
            self._gl = self._setup()
        context, mjr, camera, scene, option, perturb = self._gl
        context.make_current()
        mujoco.mjv_updateScene(m, d, option, perturb, camera, mujoco.mjtCatBit.mjCAT_ALL, scene)
        height, width, _ = self.shape
        viewport = mujoco.MjrRect(0, 0, width, height)
        mujoco.mjr_render(viewport, scene, mjr)
        rgb = np.empty(self.shape, dtype=np.uint8)
        mujoco.mjr_readPixels(rgb, None, viewport, mjr)
        return np.flipud(rgb).copy()  # OpenGL's rows run bottom to top

    def close(self) -> None:
        """Frees the OpenGL context."""
        if self._gl is not None:
            context, mjr = self._gl[0], self._gl[1]
            self._gl = None
            # MuJoCo frees the GL objects of whatever context is current: make it this
            # one, or another drawer's framebuffers (same GL names) would go instead.
            context.make_current()
            mjr.free()
            context.free()


def _gl_context_class() -> type:
    """MuJoCo's OpenGL context class for ``MUJOCO_GL`` (EGL without a display, else GLFW)."""
    backend = os.environ.get("MUJOCO_GL", "").lower()
    if not backend:
        headless = not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY")
        backend = "egl" if headless else "glfw"
    if backend == "egl":
        from mujoco.egl import GLContext
    elif backend == "osmesa":
        from mujoco.osmesa import GLContext
    else:
        from mujoco.glfw import GLContext
    return GLContext
