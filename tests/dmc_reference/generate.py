"""Regenerates the committed dm_control reference trajectories (``*.npz`` here).

dm_control 1.0.50 runs only on ``mujoco==3.17.0`` while the pool links MuJoCo
4.0, so the reference lives in its own virtual environment and the test reads
files instead of importing it (no network or second MuJoCo in CI, and the
test takes seconds).  The script has two halves:

* with torchfrag's interpreter (default): for every task, reset our pool with
  a fixed seed, record its start state (``qpos0``, ``qvel0``, ``target0``) and
  draw a whole episode of actions, then run this file again under the
  reference interpreter;
* with ``--reference`` (dm_control's interpreter): load the suite task, sync
  its physics to that start state inside ``reset_context`` (the reset that
  dm_control's own ``initialize_episode`` goes through), step the actions
  through ``control.Environment`` and store observations (flattened in the
  ordered dict's key order), rewards, discounts and step types.

``--keys`` (dm_control's interpreter only, from the committed files) writes
``observation_spec.json`` (every task's ``observation_spec()``: keys in order,
shapes, dtypes) and ``named_observations.npz`` (the ordered dict's values,
unflattened, at the start state and after the first ``NAMED_STEPS`` actions)
for the faces' named observations; ``--pixels`` writes ``frames.npz``:
``physics.render`` frames of a few tasks (``PIXEL_VIEWS``) at the synced start
state and after ``NAMED_STEPS`` actions (set ``MUJOCO_GL=egl`` headless).

Usage::

    python -m venv /tmp/dmcref && /tmp/dmcref/bin/pip install dm-control==1.0.50 mujoco==3.17.0
    PYTHONPATH=. python tests/dmc_reference/generate.py --reference-python /tmp/dmcref/bin/python
    PYTHONPATH=. python tests/dmc_reference/generate.py --reference-python ... --only SwimmerSwimmer6-v1
    /tmp/dmcref/bin/python tests/dmc_reference/generate.py --keys
    MUJOCO_GL=egl /tmp/dmcref/bin/python tests/dmc_reference/generate.py --pixels
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 7
# torchfrag id -> (dm_control domain, task)
TASKS = {
    "AcrobotSwingup-v1": ("acrobot", "swingup"),
    "AcrobotSwingupSparse-v1": ("acrobot", "swingup_sparse"),
    "BallInCupCatch-v1": ("ball_in_cup", "catch"),
    "CartpoleBalance-v1": ("cartpole", "balance"),
    "CartpoleBalanceSparse-v1": ("cartpole", "balance_sparse"),
    "CartpoleSwingup-v1": ("cartpole", "swingup"),
    "CartpoleSwingupSparse-v1": ("cartpole", "swingup_sparse"),
    "CheetahRun-v1": ("cheetah", "run"),
    "FingerSpin-v1": ("finger", "spin"),
    "FingerTurnEasy-v1": ("finger", "turn_easy"),
    "FingerTurnHard-v1": ("finger", "turn_hard"),
    "FishSwim-v1": ("fish", "swim"),
    "FishUpright-v1": ("fish", "upright"),
    "HopperHop-v1": ("hopper", "hop"),
    "HopperStand-v1": ("hopper", "stand"),
    "HumanoidRun-v1": ("humanoid", "run"),
    "HumanoidStand-v1": ("humanoid", "stand"),
    "HumanoidWalk-v1": ("humanoid", "walk"),
    "ManipulatorBringBall-v1": ("manipulator", "bring_ball"),
    "ManipulatorBringPeg-v1": ("manipulator", "bring_peg"),
    "ManipulatorInsertBall-v1": ("manipulator", "insert_ball"),
    "ManipulatorInsertPeg-v1": ("manipulator", "insert_peg"),
    "PendulumSwingup-v1": ("pendulum", "swingup"),
    "PointMassEasy-v1": ("point_mass", "easy"),
    "PointMassHard-v1": ("point_mass", "hard"),
    "ReacherEasy-v1": ("reacher", "easy"),
    "ReacherHard-v1": ("reacher", "hard"),
    "SwimmerSwimmer6-v1": ("swimmer", "swimmer6"),
    "SwimmerSwimmer15-v1": ("swimmer", "swimmer15"),
    "WalkerStand-v1": ("walker", "stand"),
    "WalkerWalk-v1": ("walker", "walk"),
    "WalkerRun-v1": ("walker", "run"),
}


# Steps whose observations are stored (and compared) for the tasks where MuJoCo
# 3.17 and 4.0 drift apart through contacts: the same XML with the same
# controls on both builds differs by 1e-13 at first and by more than 1e-6
# after about 190 steps (walker), 470 (hopper) and 100 (humanoid), measured
# on the reference side alone; we keep a margin.  Other tasks: whole episodes.
HORIZON = {"walker": 150, "hopper": 400, "humanoid": 80}
# Steps after the start state whose named observations --keys stores.
NAMED_STEPS = 3
# --pixels: task -> views (height, width, camera_id) drawn by physics.render. Tasks
# chosen for what their reset writes into the model: nothing (cheetah, walker), a
# target geom's size (reacher), a target site (finger), a light (swimmer), bodies
# (manipulator); camera -1 is dm_control's free camera.
PIXEL_VIEWS = {
    "CheetahRun-v1": ((240, 320, 0), (84, 84, 0), (84, 84, -1)),
    "WalkerWalk-v1": ((84, 84, 0),),
    "ReacherEasy-v1": ((84, 84, 0),),
    "FingerTurnEasy-v1": ((84, 84, 0),),
    "SwimmerSwimmer6-v1": ((84, 84, 0),),
    "ManipulatorBringBall-v1": ((84, 84, 0),),
}


def _ours(out_dir: str, env_ids: list[str]) -> None:
    """Start states and actions from our pool, one file per task."""
    from torchfrag.envs import make

    for env_id in env_ids:
        env = make(env_id, num_envs=1, seed=SEED)
        _, info = env.reset()
        low, high = env.action_space.low.astype(np.float64), env.action_space.high.astype(np.float64)
        rng = np.random.default_rng(SEED)
        steps = env.spec.max_episode_steps
        # 10% beyond the bounds on each side: MuJoCo clamps ctrl; float32 values as users send.
        span = high - low
        actions = rng.uniform(low - 0.1 * span, high + 0.1 * span, (steps, low.size))
        actions = actions.astype(np.float32).astype(np.float64)
        start = {k: info[k][0] for k in ("qpos0", "qvel0", "target0") if k in info}
        np.savez(os.path.join(out_dir, f"{env_id}.npz"), actions=actions, **start)
        env.close()


def _place_target(physics, domain: str, target: np.ndarray) -> None:
    """Writes what our ``target0`` info holds into the reference's model."""
    if domain == "reacher":  # the target geom's x, y
        physics.named.model.geom_pos["target", :2] = target
    elif domain == "finger":  # the target site's x, z
        physics.named.model.site_pos["target", ["x", "z"]] = target
    elif domain == "point_mass":  # the actuators' directions (tendon wrap_prm)
        physics.model.wrap_prm[:4] = target
    elif domain == "swimmer":  # the target geom's x, y (and its light's)
        physics.named.model.geom_pos["target", :2] = target
        physics.named.model.light_pos["target_light", :2] = target
    elif domain == "manipulator":  # the target body's x, z, qw, qy (and the receptacle's)
        bodies = ["target_ball", "target_peg", "cup", "slot"]
        for body in bodies:
            if body in physics.named.model.body_pos.axes.row.names:
                physics.named.model.body_pos[body, ["x", "z"]] = target[:2]
                physics.named.model.body_quat[body, ["qw", "qy"]] = target[2:]
    elif domain == "fish":  # the target geom's x, y, z
        physics.named.model.geom_pos["target"] = target
    else:
        raise ValueError(f"no target0 for {domain}")


def _synced(env_id: str, given: dict) -> tuple:
    """dm_control's env of ``env_id``, synced to the start state in ``given``."""
    from dm_control import suite

    domain, task = TASKS[env_id]
    env = suite.load(domain, task, task_kwargs={"random": SEED})
    env.reset()
    physics = env.physics
    with physics.reset_context():
        physics.data.qpos[:] = given["qpos0"]
        physics.data.qvel[:] = given["qvel0"]
        if "target0" in given:
            _place_target(physics, domain, given["target0"])
    return env, physics


def _reference(in_dir: str) -> None:
    """dm_control's trajectories from the given start states and actions."""
    from dm_control.rl import control

    for env_id, (domain, _) in TASKS.items():
        if not os.path.isfile(os.path.join(in_dir, f"{env_id}.npz")):
            continue  # not asked for (--only)
        given = dict(np.load(os.path.join(in_dir, f"{env_id}.npz")))
        env, physics = _synced(env_id, given)
        obs = [control.flatten_observation(env.task.get_observation(physics))["observations"]]
        rewards, discounts, last = [], [], []
        for action in given["actions"]:
            ts = env.step(action)
            obs.append(control.flatten_observation(ts.observation)["observations"])
            rewards.append(ts.reward)
            discounts.append(ts.discount)
            last.append(ts.last())
        keep = HORIZON.get(domain, len(obs) - 1) + 1
        np.savez_compressed(os.path.join(HERE, f"{env_id}.npz"), actions=given["actions"],
                            obs=np.array(obs[:keep]), reward=np.array(rewards),
                            discount=np.array(discounts), last=np.array(last),
                            **{k: given[k] for k in ("qpos0", "qvel0", "target0") if k in given})


def _reference_keys() -> None:
    """dm_control's observation specs and unflattened observations (from the committed files)."""
    specs, values = {}, {}
    for env_id in TASKS:
        given = dict(np.load(os.path.join(HERE, f"{env_id}.npz")))
        env, physics = _synced(env_id, given)
        specs[env_id] = [[k, list(v.shape), str(v.dtype)]
                         for k, v in env.observation_spec().items()]
        steps = [env.task.get_observation(physics)]
        steps += [env.step(a).observation for a in given["actions"][:NAMED_STEPS]]
        for key in steps[0]:
            values[f"{env_id}:{key}"] = np.array([np.asarray(o[key]) for o in steps])
    with open(os.path.join(HERE, "observation_spec.json"), "w") as f:
        # One task per line: readable diffs.
        f.write("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}"
                                    for k, v in specs.items()) + "\n}\n")
    np.savez_compressed(os.path.join(HERE, "named_observations.npz"), **values)


def _reference_pixels() -> None:
    """dm_control's frames of the PIXEL_VIEWS tasks (from the committed files)."""
    frames = {}
    for env_id, views in PIXEL_VIEWS.items():
        given = dict(np.load(os.path.join(HERE, f"{env_id}.npz")))
        env, physics = _synced(env_id, given)
        for t in range(NAMED_STEPS + 1):
            if t:
                env.step(given["actions"][t - 1])
            if t not in (0, NAMED_STEPS):
                continue
            for h, w, cam in views:
                frames[f"{env_id}:{h}x{w}:{cam}:{t}"] = physics.render(h, w, camera_id=cam)
    np.savez_compressed(os.path.join(HERE, "frames.npz"), **frames)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-python", help="python of a venv with dm-control==1.0.50")
    parser.add_argument("--only", nargs="*", choices=sorted(TASKS), default=None,
                        help="regenerate these tasks only (default: all)")
    parser.add_argument("--reference", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--keys", action="store_true",
                        help="(under dm_control's python) write observation_spec.json and "
                             "named_observations.npz")
    parser.add_argument("--pixels", action="store_true",
                        help="(under dm_control's python) write frames.npz")
    args = parser.parse_args()
    if args.keys:
        _reference_keys()
        return
    if args.pixels:
        _reference_pixels()
        return
    if args.reference:
        _reference(args.reference)
        return
    if not args.reference_python:
        parser.error("--reference-python is required")
    with tempfile.TemporaryDirectory() as tmp:
        _ours(tmp, args.only or list(TASKS))
        subprocess.run([args.reference_python, __file__, "--reference", tmp], check=True,
                       env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})


if __name__ == "__main__":
    sys.exit(main())
