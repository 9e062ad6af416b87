"""Frames of pool envs (``render()``), drawn as Gymnasium draws them.

The C++ pool exposes, per env and only when asked (``Pool.render_data``), what
a frame is made from:

- Atari: ALE's RGB screen (``getScreenRGB``, ``[210, 160, 3]`` for most
  games), which is the frame itself, as ale-py's ``AtariEnv.render()``.
- Classic control: the env's state (plus Pendulum's last torque).
- MuJoCo: ``qpos`` then ``qvel``.
- DeepMind Control Suite: ``qpos``, ``qvel`` and the model fields tasks write
  at reset, drawn by :mod:`torchfrag.envs.dmc_rendering` as dm_control's
  ``physics.render`` draws them (camera 0, 240 x 320 by default, as TorchRL's
  ``DMControlEnv``; ``width``, ``height`` and ``camera_id`` change them).
- LunarLander: the lander's and legs' positions and angles, then the
  terrain's heights.
- BipedalWalker: the episode number, the hull's and legs' positions and
  angles, where the lidar rays hit the ground, the terrain's points, the clouds and each terrain body's vertices.
- MiniGrid: the agent's position and direction, the grid's size, the carried
  object's encoding and the grid's encoding (what minigrid's ``get_frame``
  reads).

For the rest (not Atari, not DMC) a :class:`FrameRenderer` keeps one reference env of the same
id, built on the first frame, puts the state into it and calls its own
``render()``: the very drawing code of Gymnasium (pygame for classic control,
MuJoCo's offscreen OpenGL renderer with Gymnasium's camera for MuJoCo, the
``minigrid`` package's tiles for MiniGrid), so nothing is drawn twice in two
codebases. Classic-control, Atari and MiniGrid frames equal the reference's
after the same reset and actions, and so do BipedalWalker frames when the
frames are asked for as Gymnasium's are (its lidar animation advances one ray
per ``render()`` call of the episode). LunarLander frames equal Gymnasium's except
for the engines' flame particles, which the pool does not simulate (Gymnasium
makes them bodies of its world, aged by each ``render()`` call, so what it
shows depends on how often it was asked for frames; tests/test_box2d.py
measures the difference). MuJoCo frames equal Gymnasium's
for the same state (``set_state``: qpos, qvel, ``mj_forward``); after a step
Gymnasium draws the body positions its data still holds from inside
``mj_step`` (with the Euler integrator, those of the last substep's start), so
stepped frames differ slightly (tests/test_render.py measures it). Nothing of
this runs, or is imported, unless a frame is asked for.

Headless machines: classic control needs ``pygame`` (the ``render`` extra);
pygame is told to use its ``dummy`` video driver when there is no display.
MuJoCo needs an OpenGL backend: with no display and no ``MUJOCO_GL`` set, EGL
(``libEGL``, e.g. Debian's ``libegl-mesa0``) is chosen; ``MUJOCO_GL=osmesa``
selects OSMesa (``libosmesa6``) instead.
"""
from __future__ import annotations

import importlib.util
import logging
import math
import os
import warnings
from typing import Any

import numpy as np

from torchfrag.envs.mujoco_timer import keep_timer_off

logger = logging.getLogger(__name__)

__all__ = ["RENDER_MODES", "FrameRenderer", "RenderError", "check_render_mode", "render_fps",
           "renderable"]

#: Render modes the pool implements.
RENDER_MODES = ("rgb_array",)

# Classic-control ids, and the pool options that change their picture, with the
# Gymnasium attribute each sets.
_CLASSIC: dict[str, dict[str, str]] = {
    "CartPole-v1": {"length": "length"},
    "Acrobot-v1": {"link_length_1": "LINK_LENGTH_1"},
    "MountainCar-v0": {},
    "MountainCarContinuous-v0": {},
    "Pendulum-v1": {},
}

# Keyword arguments of Gymnasium's MuJoCo envs that only concern rendering: the
# Gymnasium adapters accept them next to the env options.
MUJOCO_RENDER_KWARGS = frozenset({"width", "height", "camera_id", "camera_name",
                                  "default_camera_config", "max_geom", "visual_options"})

# The rendering keywords of the DeepMind Control Suite ids (dm_control's physics.render).
_DMC_RENDER_KWARGS = frozenset({"width", "height", "camera_id"})

# ale-py's AtariEnv.metadata["render_fps"].
_ATARI_FPS = 30
# LunarLander ids (their picture does not depend on the options), and the
# constants of Gymnasium's lunar_lander.py that place its terrain.
_LUNAR = ("LunarLander-v3", "LunarLanderContinuous-v3")
_LUNAR_VIEWPORT = (600, 400)
_LUNAR_SCALE = 30.0
# BipedalWalker ids, and the constants of Gymnasium's bipedal_walker.py its
# frames use: SCALE, LIDAR_RANGE, VIEWPORT_W / SCALE / 5 (the scroll's offset).
_WALKER = ("BipedalWalker-v3", "BipedalWalkerHardcore-v3")
_WALKER_SCALE = 30.0
_WALKER_LIDAR_RANGE = 160 / _WALKER_SCALE
_WALKER_SCROLL_OFFSET = 600 / _WALKER_SCALE / 5
_WALKER_TERRAIN = 200  # TERRAIN_LENGTH points
_WALKER_CLOUDS = 10
# minigrid's MiniGridEnv.metadata["render_fps"] (3.2; tests/test_minigrid.py checks it).
_MINIGRID_FPS = 10
# What the "no frames" errors name.
_SUPPORTED = ("render() supports classic control, Atari, MuJoCo, DeepMind Control Suite, MiniGrid,"
              " LunarLander and BipedalWalker envs")


class RenderError(RuntimeError):
    """A frame cannot be drawn on this machine (a missing package or OpenGL backend)."""


def check_render_mode(env_id: str, render_mode: str | None) -> None:
    """Refuses render modes the pool does not implement, naming what is allowed.

    Example:
        >>> check_render_mode("CartPole-v1", "rgb_array")
        >>> check_render_mode("CartPole-v1", "human")
        Traceback (most recent call last):
        ...
        ValueError: CartPole-v1: render_mode='human' is not supported: ...
    """
    if render_mode is None or render_mode in RENDER_MODES:
        return
    why = (" 'human' opens a window, which the pool does not do: use"
           " render_mode='rgb_array' and show the frames yourself (or record a video)"
           if render_mode == "human" else "")
    raise ValueError(f"{env_id}: render_mode={render_mode!r} is not supported:{why} allowed:"
                     f" {RENDER_MODES + (None,)}")


def _family(env_id: str) -> str:
    from torchfrag.envs.dmc_observations import is_dmc
    from torchfrag.envs.spec import spec

    if env_id in _CLASSIC:
        return "classic"
    if is_dmc(env_id):
        return "dmc"
    if env_id.startswith("MiniGrid-"):
        return "minigrid"
    if env_id in _LUNAR:
        return "lunar"
    if env_id in _WALKER:
        return "walker"
    options = spec(env_id).options  # each family declares its own
    if "xml_file" in options:
        return "mujoco"
    if "noop_max" in options:
        return "atari"
    return "none"


def renderable(env_id: str) -> None:
    """Raises :class:`RenderError` if frames of ``env_id`` cannot be drawn here.

    Checks the family and the Python packages; an OpenGL backend for MuJoCo is
    only known to work once a frame was drawn.
    """
    family = _family(env_id)
    if family == "none":
        raise RenderError(f"{env_id} has no frames to render ({_SUPPORTED})")
    if family in ("classic", "lunar", "walker") and importlib.util.find_spec("pygame") is None:
        raise RenderError(f"{env_id}: rendering {family} envs needs pygame: pip install"
                          " 'torchfrag[render]'")
    if family in ("mujoco", "dmc") and importlib.util.find_spec("mujoco") is None:
        raise RenderError(f"{env_id}: rendering MuJoCo envs needs the mujoco package")
    if family == "minigrid" and importlib.util.find_spec("minigrid") is None:
        raise RenderError(f"{env_id}: rendering MiniGrid envs needs the minigrid package:"
                          " pip install minigrid")


def render_fps(env_id: str, options: dict[str, Any] | None = None) -> int:
    """Frames per second of ``env_id``'s pictures, Gymnasium's ``metadata["render_fps"]``.

    Example:
        >>> render_fps("CartPole-v1"), render_fps("Pong-v5"), render_fps("HalfCheetah-v5")
        (50, 30, 20)
        >>> render_fps("MiniGrid-Empty-5x5-v0")
        10
    """
    family = _family(env_id)
    if family == "atari":
        return _ATARI_FPS
    if family == "dmc":
        from torchfrag.envs.dmc_rendering import render_fps as dmc_fps

        return dmc_fps(env_id)
    if family == "minigrid":
        return _MINIGRID_FPS
    if family in ("classic", "lunar", "walker"):
        return int(_gymnasium_class(env_id).metadata["render_fps"])
    if family == "mujoco":
        # Gymnasium's MuJoCo envs: round(1 / dt), dt = timestep * frame_skip.
        return int(np.round(1.0 / _mujoco_dt(env_id, options or {})))
    raise ValueError(f"{env_id} has no frames to render ({_SUPPORTED})")


def _gymnasium_class(env_id: str) -> type:
    """Gymnasium's env class registered under ``env_id``."""
    import gymnasium
    from gymnasium.envs.registration import load_env_creator

    entry = gymnasium.spec(env_id).entry_point
    with keep_timer_off():  # loading a MuJoCo env's module imports mujoco
        return entry if callable(entry) else load_env_creator(entry)


def _mujoco_dt(env_id: str, options: dict[str, Any]) -> float:
    with keep_timer_off():
        import mujoco

    from torchfrag.envs.spec import spec

    opts = {name: o.default for name, o in spec(env_id).options.items()}
    opts.update(options)
    path = _mujoco_model_path(str(opts["xml_file"]))
    return float(mujoco.MjModel.from_xml_path(path).opt.timestep) * int(opts["frame_skip"])


def _mujoco_model_path(xml_file: str) -> str:
    """Gymnasium's own path resolution for ``xml_file``."""
    with keep_timer_off():
        from gymnasium.envs.mujoco.mujoco_env import expand_model_path

    return expand_model_path(xml_file)


def _headless() -> bool:
    return not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY")


def _gl_backend() -> None:
    """EGL for MuJoCo on a machine without a display, unless ``MUJOCO_GL`` says otherwise."""
    if not os.environ.get("MUJOCO_GL") and _headless():
        os.environ["MUJOCO_GL"] = "egl"


def _no_gl(env_id: str, e: Exception) -> RenderError:
    """The error for a MuJoCo frame that could not be drawn: what to install or set."""
    return RenderError(
        f"{env_id}: MuJoCo could not render with MUJOCO_GL={os.environ.get('MUJOCO_GL')!r} "
        f"({type(e).__name__}: {e}); on a headless machine install libEGL (Debian: "
        "libegl-mesa0) and set MUJOCO_GL=egl, or install OSMesa (libosmesa6) and set "
        "MUJOCO_GL=osmesa")


class FrameRenderer:
    """Turns the pool's render data of one env into an RGB frame ``[H, W, 3]`` uint8.

    Args:
        env_id: The pool's env id.
        options: The pool's env options (those that change the picture are
            applied; per-env values pick the env's own).
        render_kwargs: MuJoCo only: Gymnasium's rendering arguments
            (``width``, ``height``, ``camera_id``, ``camera_name``,
            ``default_camera_config``, ...).

    Example:
        >>> from torchfrag.envs import make
        >>> pool = make("Pong-v5", noop_max=0)
        >>> _ = pool.reset()
        >>> pool.render(0).shape
        (210, 160, 3)
    """

    def __init__(self, env_id: str, options: dict[str, Any] | None = None,
                 render_kwargs: dict[str, Any] | None = None) -> None:
        self.env_id = env_id
        self.options = dict(options or {})
        self.render_kwargs = dict(render_kwargs or {})
        self.family = _family(env_id)
        if self.render_kwargs:
            if self.family not in ("mujoco", "dmc"):
                raise ValueError(f"{env_id}: rendering arguments {sorted(self.render_kwargs)} only"
                                 " apply to MuJoCo and DeepMind Control Suite envs")
            allowed = _DMC_RENDER_KWARGS if self.family == "dmc" else MUJOCO_RENDER_KWARGS
            unknown = set(self.render_kwargs) - allowed
            if unknown:
                raise ValueError(f"{env_id}: unknown rendering arguments {sorted(unknown)};"
                                 f" allowed: {sorted(allowed)}")
        self._proxy: Any = None  # the reference env that draws (all but Atari and DMC)
        # BipedalWalker: the terrain the proxy holds, and per env (episode, frames
        # drawn in it), which Gymnasium's lidar animation follows.
        self._walker_terrain: bytes | None = None
        self._walker_frames: dict[int, tuple[int, int]] = {}

    def frame(self, data: np.ndarray, env_index: int = 0) -> np.ndarray:
        """The frame drawn from ``data`` (``Pool.render_data(env_index)``)."""
        if data.dtype == np.uint8:  # a screen already (Atari)
            return data
        if self.family == "classic":
            return self._classic(data, env_index)
        if self.family == "mujoco":
            return self._mujoco(data)
        if self.family == "dmc":
            return self._dmc(data)
        if self.family == "minigrid":
            return self._minigrid(data)
        if self.family == "lunar":
            return self._lunar(data)
        if self.family == "walker":
            return self._walker(data, env_index)
        raise ValueError(f"{self.env_id} has no frames to render")

    def close(self) -> None:
        """Frees the drawing env (its pygame surface or OpenGL context)."""
        if self._proxy is not None:
            try:
                self._proxy.close()
            finally:
                self._proxy = None

    def _make_pygame_env(self) -> Any:
        """Gymnasium's env of this id, drawing with pygame off-screen."""
        try:
            import pygame  # noqa: F401
        except ImportError as e:
            raise RenderError(f"{self.env_id}: rendering {self.family} envs needs pygame:"
                              " pip install 'torchfrag[render]'") from e
        if _headless():
            # pygame.display.init() (which Gymnasium calls) fails without a display
            # unless SDL is told to draw nowhere; frames are drawn off-screen anyway.
            os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
        return _gymnasium_class(self.env_id)(render_mode="rgb_array")

    # -- classic control ----------------------------------------------------------
    def _classic(self, state: np.ndarray, env_index: int) -> np.ndarray:
        if self._proxy is None:
            self._proxy = self._make_pygame_env()
        env = self._proxy
        for option, attr in _CLASSIC[self.env_id].items():
            if option in self.options:
                value = np.asarray(self.options[option], dtype=np.float64)
                setattr(env, attr, float(value if value.ndim == 0 else value[env_index]))
        # The state in the dtype Gymnasium holds it in at this point: the picture's
        # arithmetic follows it (the flags are documented in classic_control.h).
        if self.env_id == "Pendulum-v1":
            env.state = np.array(state[:2], dtype=np.float64)
            # Gymnasium's last_u is the clipped float32 torque, None right after a reset.
            env.last_u = None if np.isnan(state[2]) else np.float32(state[2])
        elif self.env_id == "Acrobot-v1":  # float32 right after a reset
            env.state = np.array(state[:4], dtype=np.float32 if state[4] else np.float64)
        elif self.env_id == "MountainCarContinuous-v0":  # float32 after the first step
            env.state = np.array(state[:2], dtype=np.float32 if state[2] else np.float64)
        else:
            env.state = np.array(state, dtype=np.float64)
        return env.render()

    # -- MuJoCo -------------------------------------------------------------------
    def _mujoco(self, qpos_qvel: np.ndarray) -> np.ndarray:
        if self._proxy is None:
            self._proxy = self._make_mujoco()
        env = self._proxy
        nq = env.model.nq
        # set_state: qpos, qvel, then mj_forward, as the pool's env did at reset.
        env.set_state(qpos_qvel[:nq].copy(), qpos_qvel[nq:].copy())
        try:
            return env.render()
        except Exception as e:  # no usable OpenGL: say what to install or set
            raise _no_gl(self.env_id, e) from e

    def _dmc(self, state: np.ndarray) -> np.ndarray:
        if self._proxy is None:
            from torchfrag.envs.dmc_rendering import DmcDrawer

            _gl_backend()
            self._proxy = DmcDrawer(self.env_id, **self.render_kwargs)
        try:
            return self._proxy.frame(state)
        except ValueError:
            raise
        except Exception as e:  # no usable OpenGL
            raise _no_gl(self.env_id, e) from e

    def _make_mujoco(self) -> Any:
        try:
            with keep_timer_off():
                import mujoco  # noqa: F401
        except ImportError as e:
            raise RenderError(f"{self.env_id}: rendering MuJoCo envs needs the mujoco"
                              " package") from e
        _gl_backend()
        kwargs = {k: self.options[k] for k in ("xml_file", "frame_skip") if k in self.options}
        kwargs.update(self.render_kwargs)
        return _gymnasium_class(self.env_id)(render_mode="rgb_array", **kwargs)

    # -- LunarLander ---------------------------------------------------------------
    def _lunar(self, data: np.ndarray) -> np.ndarray:
        if self._proxy is None:
            self._proxy = self._make_pygame_env()
            self._proxy.reset(seed=0)  # creates the bodies whose transforms are set below
        env = self._proxy
        # Body transforms (float32 in Box2D, so the doubles carry them exactly);
        # the proxy never steps, so it has no particles to draw.
        for k, body in enumerate([env.lander, *env.legs]):
            x, y, angle = (float(v) for v in data[3 * k:3 * k + 3])
            body.position = (x, y)
            body.angle = angle
        # The terrain as Gymnasium's reset builds it from smooth_y.
        smooth_y = [float(v) for v in data[9:]]
        chunks = len(smooth_y)
        width, height = _LUNAR_VIEWPORT[0] / _LUNAR_SCALE, _LUNAR_VIEWPORT[1] / _LUNAR_SCALE
        chunk_x = [width / (chunks - 1) * i for i in range(chunks)]
        env.sky_polys = [[(chunk_x[i], smooth_y[i]), (chunk_x[i + 1], smooth_y[i + 1]),
                          (chunk_x[i + 1], height), (chunk_x[i], height)]
                         for i in range(chunks - 1)]
        return env.render()

    # -- BipedalWalker -------------------------------------------------------------
    def _walker(self, data: np.ndarray, env_index: int) -> np.ndarray:
        if self._proxy is None:
            self._proxy = self._make_pygame_env()
            self._proxy.reset(seed=0)  # creates the hull, legs and lidar callbacks
        env = self._proxy
        episode = int(data[0])
        for k, body in enumerate([env.hull, *env.legs]):
            x, y, angle = (float(v) for v in data[1 + 3 * k:4 + 3 * k])
            body.position = (x, y)
            body.angle = angle
        hits = data[16:46].reshape(10, 3)
        at = 46
        terrain_x = [float(v) for v in data[at:at + _WALKER_TERRAIN]]
        terrain_y = [float(v) for v in data[at + _WALKER_TERRAIN:at + 2 * _WALKER_TERRAIN]]
        at += 2 * _WALKER_TERRAIN
        clouds = data[at:at + 10 * _WALKER_CLOUDS].reshape(_WALKER_CLOUDS, 5, 2)
        at += 10 * _WALKER_CLOUDS
        self._walker_set_terrain(env, data[at:], terrain_x, terrain_y, clouds)
        # What Gymnasium's step sets from the hull's position: scroll and lidar rays.
        pos = env.hull.position
        env.scroll = pos.x - _WALKER_SCROLL_OFFSET
        for i, lidar in enumerate(env.lidar):
            lidar.p1 = pos
            # The ray's end, or where its callback last saw the ground.
            lidar.p2 = ((float(hits[i, 1]), float(hits[i, 2])) if hits[i, 0] else
                        (pos[0] + math.sin(1.5 * i / 10.0) * _WALKER_LIDAR_RANGE,
                         pos[1] - math.cos(1.5 * i / 10.0) * _WALKER_LIDAR_RANGE))
        # Gymnasium's lidar_render: 0 at reset, advanced by each render() call.
        last_episode, drawn = self._walker_frames.get(env_index, (episode, 0))
        env.lidar_render = drawn if last_episode == episode else 0
        frame = env.render()
        self._walker_frames[env_index] = (episode, env.lidar_render)
        return frame

    def _walker_set_terrain(self, env: Any, bodies: np.ndarray, terrain_x: list[float],
                            terrain_y: list[float], clouds: np.ndarray) -> None:
        """Rebuilds the proxy's terrain bodies, polygons and clouds (when they changed)."""
        key = bodies.tobytes() + clouds.tobytes() + np.asarray(terrain_y).tobytes()
        if key == self._walker_terrain:
            return
        from Box2D.b2 import edgeShape, fixtureDef, polygonShape

        for body in env.terrain:
            env.world.DestroyBody(body)
        env.terrain = []
        shapes = []
        at = 0
        while at < len(bodies):
            n = int(bodies[at])
            shapes.append([(float(bodies[at + 1 + 2 * k]), float(bodies[at + 2 + 2 * k]))
                           for k in range(n)])
            at += 1 + 2 * n
        edges = sum(len(v) == 2 for v in shapes)
        for p, vertices in enumerate(shapes):
            if len(vertices) == 2:  # edges come first, in reverse creation order
                body = env.world.CreateStaticBody(fixtures=fixtureDef(shape=edgeShape(
                    vertices=vertices)))
                i = edges - 1 - p
                body.color1 = body.color2 = (76, 255 if i % 2 == 0 else 204, 76)
            else:  # stumps, stairs and pits
                body = env.world.CreateStaticBody(fixtures=fixtureDef(shape=polygonShape(
                    vertices=vertices)))
                body.color1, body.color2 = (255, 255, 255), (153, 153, 153)
            env.terrain.append(body)
        env.drawlist = env.terrain + env.legs + [env.hull]
        env.terrain_poly = [([(terrain_x[i], terrain_y[i]), (terrain_x[i + 1], terrain_y[i + 1]),
                              (terrain_x[i + 1], 0), (terrain_x[i], 0)], (102, 153, 76))
                            for i in range(len(terrain_x) - 1)]
        env.cloud_poly = [([(float(x), float(y)) for x, y in cloud],
                           float(cloud[:, 0].min()), float(cloud[:, 0].max())) for cloud in clouds]
        self._walker_terrain = key

    # -- MiniGrid -----------------------------------------------------------------
    def _minigrid(self, data: np.ndarray) -> np.ndarray:
        if self._proxy is None:
            self._proxy = self._make_minigrid()
        from minigrid.core.grid import Grid
        from minigrid.core.world_object import WorldObj

        env = self._proxy
        codes = data.astype(np.int64)
        x, y, direction, width, height = (int(v) for v in codes[:5])
        # The pool's cells are row by row (y, x); minigrid's encoding is [x, y].
        cells = codes[8:].reshape(height, width, 3).transpose(1, 0, 2)
        env.grid, _ = Grid.decode(cells.astype(np.uint8))
        env.agent_pos = (x, y)
        env.agent_dir = direction
        env.carrying = WorldObj.decode(*(int(v) for v in codes[5:8]))  # None if empty
        return env.render()

    def _make_minigrid(self) -> Any:
        try:
            import minigrid
        except ImportError as e:
            raise RenderError(f"{self.env_id}: rendering MiniGrid envs needs the minigrid"
                              " package: pip install minigrid") from e
        import gymnasium

        gymnasium.register_envs(minigrid)
        with warnings.catch_warnings():  # MultiRoom-N4-S5-v0's deprecation notice
            warnings.simplefilter("ignore", DeprecationWarning)
            return gymnasium.make(self.env_id, render_mode="rgb_array").unwrapped
