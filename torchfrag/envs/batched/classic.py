"""Gymnasium's five classic-control envs as batched tensor code on any torch device.

Each env repeats the arithmetic of its Gymnasium counterpart (and of the C++
env in ``csrc/envs/classic_control.h``) operation by operation, including the
places where Gymnasium computes in float32 because NumPy 2 keeps float32
scalars float32, so trajectories match Gymnasium's step for step on the CPU
once the reference is synced to :attr:`BatchedEnv.state`.

Example:
    >>> import torch
    >>> from torchfrag.envs.batched import CartPole
    >>> env = CartPole(num_envs=4, seed=0)
    >>> td = env.reset()
    >>> td["action"] = torch.ones(4, dtype=torch.int64)
    >>> td = env.step(td)
    >>> td["next", "reward"].squeeze(-1).tolist()
    [1.0, 1.0, 1.0, 1.0]
"""
from __future__ import annotations

import math

import torch

from torchfrag.envs.batched.base import BatchedEnv

__all__ = ["CartPole", "Acrobot", "MountainCar", "MountainCarContinuous", "Pendulum"]

_PI = math.pi


def _uniform_between(u: torch.Tensor, low: float, high: float) -> torch.Tensor:
    return low + (high - low) * u


class _Classic(BatchedEnv):
    def param(self, name: str, like: torch.Tensor) -> torch.Tensor:
        """Per-env physical parameter ``name`` in the dtype of ``like``."""
        return self.params[name].to(like.dtype)


class CartPole(_Classic):
    """CartPole-v1 (options: ``gravity``, ``masscart``, ``masspole``, ``length``,
    ``force_mag``, ``tau`` per env; ``kinematics_integrator``, ``sutton_barto_reward``,
    ``reset_low``/``reset_high``, ``max_episode_steps``)."""

    env_id = "CartPole-v1"
    state_dim = 4
    reset_draws = 4
    x_threshold = 2.4
    theta_threshold = 12 * 2 * _PI / 360

    def validate_options(self) -> None:
        self._require_positive("masscart", "masspole", "length", "tau")
        self._euler = self._choice("kinematics_integrator", ("euler", "semi-implicit")) == "euler"

    def sample_reset(self, u: torch.Tensor) -> torch.Tensor:
        return _uniform_between(u, self.settings["reset_low"], self.settings["reset_high"])

    def dynamics(self, state, action, elapsed, episode):
        x, x_dot, theta, theta_dot = state.unbind(-1)
        gravity, masscart, masspole = (self.param(k, state) for k in ("gravity", "masscart", "masspole"))
        length, force_mag, tau = (self.param(k, state) for k in ("length", "force_mag", "tau"))
        total_mass = masspole + masscart
        polemass_length = masspole * length
        force = torch.where(action == 1, force_mag, -force_mag)
        costheta = torch.cos(theta)
        sintheta = torch.sin(theta)
        temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass
        thetaacc = (gravity * sintheta - costheta * temp) / (
            length * (4.0 / 3.0 - masspole * (costheta * costheta) / total_mass))
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        if self._euler:
            x = x + tau * x_dot
            x_dot = x_dot + tau * xacc
            theta = theta + tau * theta_dot
            theta_dot = theta_dot + tau * thetaacc
        else:
            x_dot = x_dot + tau * xacc
            x = x + tau * x_dot
            theta_dot = theta_dot + tau * thetaacc
            theta = theta + tau * theta_dot
        new_state = torch.stack((x, x_dot, theta, theta_dot), -1)
        terminated = (x < -self.x_threshold) | (x > self.x_threshold) | \
            (theta < -self.theta_threshold) | (theta > self.theta_threshold)
        if self.settings["sutton_barto_reward"]:
            reward = torch.where(terminated, -1.0, 0.0).to(torch.float64)
        else:
            reward = torch.ones_like(x, dtype=torch.float64)
        return new_state, reward, terminated

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.to(torch.float32)


class Acrobot(_Classic):
    """Acrobot-v1 (options: link lengths, masses, centres of mass, ``link_moi`` and
    ``torque_noise_max`` per env; ``book_or_nips``, reset bounds, ``max_episode_steps``)."""

    env_id = "Acrobot-v1"
    state_dim = 4
    reset_draws = 4
    dt = 0.2
    max_vel_1 = 4 * _PI
    max_vel_2 = 9 * _PI
    #: Wraps of an angle into [-pi, pi] per step (a step moves an angle by far less).
    wrap_rounds = 4

    def validate_options(self) -> None:
        self._book = self._choice("book_or_nips", ("book", "nips")) == "book"

    def sample_reset(self, u: torch.Tensor) -> torch.Tensor:
        # Gymnasium stores the initial state as float32.
        s = _uniform_between(u, self.settings["reset_low"], self.settings["reset_high"])
        return s.to(torch.float32).to(torch.float64)

    def _dsdt(self, s: torch.Tensor, a: torch.Tensor, p: dict[str, torch.Tensor]) -> torch.Tensor:
        m1, m2, l1, lc1, lc2 = p["m1"], p["m2"], p["l1"], p["lc1"], p["lc2"]
        i1 = i2 = p["moi"]
        g = 9.8
        theta1, theta2, dtheta1, dtheta2 = s.unbind(-1)
        cos2 = torch.cos(theta2)
        sin2 = torch.sin(theta2)
        d1 = m1 * (lc1 * lc1) + m2 * ((l1 * l1) + (lc2 * lc2) + 2 * l1 * lc2 * cos2) + i1 + i2
        d2 = m2 * ((lc2 * lc2) + l1 * lc2 * cos2) + i2
        phi2 = m2 * lc2 * g * torch.cos(theta1 + theta2 - _PI / 2.0)
        phi1 = (-m2 * l1 * lc2 * (dtheta2 * dtheta2) * sin2
                - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin2
                + (m1 * lc1 + m2 * l1) * g * torch.cos(theta1 - _PI / 2) + phi2)
        if self._book:
            ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * (dtheta1 * dtheta1) * sin2 - phi2) / (
                m2 * (lc2 * lc2) + i2 - (d2 * d2) / d1)
        else:
            ddtheta2 = (a + d2 / d1 * phi1 - phi2) / (m2 * (lc2 * lc2) + i2 - (d2 * d2) / d1)
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return torch.stack((dtheta1, dtheta2, ddtheta1, ddtheta2), -1)

    def _wrap(self, x: torch.Tensor) -> torch.Tensor:
        # Gymnasium's `while x > M: x -= 2 pi` (and the other side), as repeated
        # exact subtractions, so the rounding is the same.
        diff = 2 * _PI
        for _ in range(self.wrap_rounds):
            x = torch.where(x > _PI, x - diff, x)
        for _ in range(self.wrap_rounds):
            x = torch.where(x < -_PI, x + diff, x)
        return x

    def dynamics(self, state, action, elapsed, episode):
        p = {k: self.param(name, state) for k, name in (
            ("m1", "link_mass_1"), ("m2", "link_mass_2"), ("l1", "link_length_1"),
            ("lc1", "link_com_pos_1"), ("lc2", "link_com_pos_2"), ("moi", "link_moi"))}
        torque = action.to(state.dtype) - 1.0  # AVAIL_TORQUE = [-1, 0, 1]
        noise = self.param("torque_noise_max", state)
        u = self.uniform(episode, elapsed + 1, 1)[:, 0].to(state.dtype)
        torque = torch.where(noise > 0, torque + (-noise + (noise - -noise) * u), torque)
        dt = self.dt
        dt2 = dt / 2.0
        k1 = self._dsdt(state, torque, p)
        k2 = self._dsdt(state + dt2 * k1, torque, p)
        k3 = self._dsdt(state + dt2 * k2, torque, p)
        k4 = self._dsdt(state + dt * k3, torque, p)
        ns = state + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        new_state = torch.stack((
            self._wrap(ns[:, 0]), self._wrap(ns[:, 1]),
            ns[:, 2].clamp(-self.max_vel_1, self.max_vel_1),
            ns[:, 3].clamp(-self.max_vel_2, self.max_vel_2)), -1)
        s0, s1 = new_state[:, 0], new_state[:, 1]
        terminated = -torch.cos(s0) - torch.cos(s1 + s0) > 1.0
        reward = torch.where(terminated, 0.0, -1.0).to(torch.float64)
        return new_state, reward, terminated

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        s0, s1, s2, s3 = state.unbind(-1)
        return torch.stack((torch.cos(s0), torch.sin(s0), torch.cos(s1), torch.sin(s1), s2, s3),
                           -1).to(torch.float32)


class _Car(_Classic):
    """What both mountain cars share: bounds, a uniform start at rest, the state as observation."""

    state_dim = 2
    reset_draws = 1
    min_position = -1.2
    max_position = 0.6
    max_speed = 0.07

    def sample_reset(self, u: torch.Tensor) -> torch.Tensor:
        pos = _uniform_between(u[:, 0], self.settings["reset_low"], self.settings["reset_high"])
        return torch.stack((pos, torch.zeros_like(pos)), -1)

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.to(torch.float32)


class MountainCar(_Car):
    """MountainCar-v0 (options: ``force``, ``gravity``, ``goal_velocity`` per env;
    reset bounds, ``max_episode_steps``)."""

    env_id = "MountainCar-v0"
    goal_position = 0.5

    def dynamics(self, state, action, elapsed, episode):
        position, velocity = state.unbind(-1)
        force, gravity = self.param("force", state), self.param("gravity", state)
        goal_velocity = self.param("goal_velocity", state)
        velocity = velocity + ((action - 1).to(state.dtype) * force
                               + torch.cos(3 * position) * (-gravity))
        velocity = velocity.clamp(-self.max_speed, self.max_speed)
        position = (position + velocity).clamp(self.min_position, self.max_position)
        velocity = torch.where((position == self.min_position) & (velocity < 0),
                               torch.zeros_like(velocity), velocity)
        terminated = (position >= self.goal_position) & (velocity >= goal_velocity)
        reward = torch.full_like(position, -1.0, dtype=torch.float64)
        return torch.stack((position, velocity), -1), reward, terminated

class MountainCarContinuous(_Car):
    """MountainCarContinuous-v0 (options: ``power``, ``goal_velocity`` per env; reset
    bounds, ``max_episode_steps``).

    Gymnasium keeps this env's state as float32 after the first step (the first
    step computes in float64 from the float64 reset state, later ones in float32,
    and a clipped value is a Python float again): the roundings are repeated so
    terminations happen on the same step.
    """

    env_id = "MountainCarContinuous-v0"
    goal_position = 0.45

    def dynamics(self, state, action, elapsed, episode):
        f32, f64 = torch.float32, torch.float64
        state = state.to(f64)
        pos, vel = state.unbind(-1)
        power = self.params["power"]
        goal_velocity = self.params["goal_velocity"]
        a = action[:, 0].to(f32)
        first = elapsed == 0
        clipped = (a < -1.0) | (a > 1.0)
        sign = torch.where(a < 0, -1.0, 1.0).to(f64)
        fp32 = a * power.to(f32)  # float32 action times float32(power)
        clipped_fp = sign * power
        # First step: float64 state.
        g_first = 0.0025 * torch.cos(3 * pos)
        inc_first = torch.where(clipped, clipped_fp - g_first, (fp32 - g_first.to(f32)).to(f64))
        vel_first = vel + inc_first
        # Later steps: float32 state, every NumPy operation float32.
        g_later = 0.0025 * torch.cos((3.0 * pos.to(f32)).to(f64))
        inc_later = torch.where(clipped, (clipped_fp - g_later).to(f32), fp32 - g_later.to(f32))
        vel_later = (vel.to(f32) + inc_later).to(f64)
        velocity = torch.where(first, vel_first, vel_later)
        vel_f32 = ~first
        pos_f32 = ~first
        over, under = velocity > self.max_speed, velocity < -self.max_speed
        velocity = torch.where(over, self.max_speed, torch.where(under, -self.max_speed, velocity))
        vel_f32 = vel_f32 & ~(over | under)
        position = torch.where(first, pos + velocity, (pos.to(f32) + velocity.to(f32)).to(f64))
        over, under = position > self.max_position, position < self.min_position
        position = torch.where(over, self.max_position,
                               torch.where(under, self.min_position, position))
        pos_f32 = pos_f32 & ~(over | under)
        stuck = (position == self.min_position) & (velocity < 0)
        velocity = torch.where(stuck, torch.zeros_like(velocity), velocity)
        vel_f32 = vel_f32 & ~stuck
        at_goal = torch.where(pos_f32, position.to(f32) >= torch.tensor(self.goal_position, dtype=f32),
                              position >= self.goal_position)
        fast_enough = torch.where(vel_f32, velocity.to(f32) >= goal_velocity.to(f32),
                                  velocity >= goal_velocity)
        terminated = at_goal & fast_enough
        reward = torch.where(terminated, 100.0, 0.0).to(f64) - a.to(f64).pow(2) * 0.1
        new_state = torch.stack((position.to(f32), velocity.to(f32)), -1).to(f64)
        return new_state, reward, terminated

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.to(torch.float32)


class Pendulum(_Classic):
    """Pendulum-v1 (options: ``g``, ``m``, ``l`` per env; ``x_init``, ``y_init``,
    ``max_episode_steps``)."""

    env_id = "Pendulum-v1"
    state_dim = 2
    reset_draws = 2
    max_torque = 2.0
    max_speed = 8.0
    dt = 0.05

    def validate_options(self) -> None:
        self._require_positive("m", "l")

    def sample_reset(self, u: torch.Tensor) -> torch.Tensor:
        x, y = self.settings["x_init"], self.settings["y_init"]
        return torch.stack((_uniform_between(u[:, 0], -x, x), _uniform_between(u[:, 1], -y, y)), -1)

    @staticmethod
    def angle_normalize(x: torch.Tensor) -> torch.Tensor:
        """``((x + pi) % (2 pi)) - pi`` with Python's floored modulo."""
        m = 2 * _PI
        r = torch.fmod(x + _PI, m)
        r = torch.where((r != 0) & (r < 0), r + m, r)
        return r - _PI

    def dynamics(self, state, action, elapsed, episode):
        th, thdot = state.unbind(-1)
        g, m, l_ = self.param("g", state), self.param("m", state), self.param("l", state)
        # u is a float32 scalar in Gymnasium; its products with Python floats stay float32.
        u = action[:, 0].to(torch.float32).clamp(-self.max_torque, self.max_torque)
        an = self.angle_normalize(th)
        u_cost = 0.001 * (u * u)
        costs = an * an + 0.1 * (thdot * thdot) + u_cost.to(state.dtype)
        torque_term = (3.0 / (m * (l_ * l_))).to(torch.float32) * u
        newthdot = thdot + (3 * g / (2 * l_) * torch.sin(th) + torque_term.to(state.dtype)) * self.dt
        newthdot = newthdot.clamp(-self.max_speed, self.max_speed)
        newth = th + newthdot * self.dt
        terminated = torch.zeros_like(th, dtype=torch.bool)
        return torch.stack((newth, newthdot), -1), (-costs).to(torch.float64), terminated

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        th, thdot = state.unbind(-1)
        return torch.stack((torch.cos(th), torch.sin(th), thdot), -1).to(torch.float32)
