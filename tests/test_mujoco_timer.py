"""MuJoCo's process-wide timer callback (``mjcb_time``) and the pool.

``import mujoco`` sets libmujoco's global ``mjcb_time``, which the pool's
MuJoCo and DMC steps then call (the pool links the same library).  Each check
runs in a fresh interpreter, since whether ``mujoco`` was imported (and by
whom) is the state under test.  The speed cost is measured by
``benchmarks/mujoco.py``, not here.
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from torchfrag.envs import list_envs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.skipif(
    "HalfCheetah-v5" not in list_envs() or "CartpoleSwingup-v1" not in list_envs(),
    reason="MuJoCo/DMC envs not built")


def _run(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], check=False, cwd=ROOT,
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.split()


def test_rendering_leaves_no_timer_when_the_user_never_imported_mujoco() -> None:
    # Frames of a MuJoCo and a DMC pool, Gymnasium's render_fps metadata: each
    # imports mujoco inside torchfrag.  The timer must be gone afterwards, and
    # pools made after it must not warn (turned into an error here).
    code = """
import sys, warnings
import numpy as np
from torchfrag.envs import make, mujoco_timer
from torchfrag.envs.rendering import RenderError, render_fps
warnings.simplefilter("error", mujoco_timer.MujocoTimerWarning)
assert 'mujoco' not in sys.modules
drawn = 0
for env_id in ("HalfCheetah-v5", "CartpoleSwingup-v1"):
    pool = make(env_id, num_envs=2, seed=0)
    pool.reset()
    try:
        drawn += pool.render(0).ndim == 3
    except RenderError:  # no OpenGL here; the import of mujoco happened all the same
        pass
    pool.step(pool.random_actions(rng=np.random.default_rng(0)))
    pool.close()
assert render_fps("Hopper-v5") == 125
assert 'mujoco' in sys.modules
print(mujoco_timer.timer_installed())
mujoco_timer.clear_timer()  # harmless without a callback
assert not mujoco_timer.timer_installed()
make("HalfCheetah-v5", num_envs=1).close()  # would raise if it warned
print(drawn)
"""
    installed, drawn = _run(code)
    assert installed == "False"
    if drawn != "2":
        pytest.skip("no OpenGL backend: only the import path of rendering was checked")


def test_user_import_keeps_the_timer_warns_once_and_clear_timer_removes_it() -> None:
    code = """
import warnings
import mujoco
import numpy as np
from torchfrag.envs import make, mujoco_timer

print(mujoco_timer.timer_installed())  # the user's import installed it
with mujoco_timer.keep_timer_off():  # ... and torchfrag's guard keeps the user's callback
    pass
print(mujoco_timer.timer_installed())

def run(env_id):
    pool = make(env_id, num_envs=3, seed=7)
    obs, _ = pool.reset()
    rng = np.random.default_rng(1)
    out = [obs.copy()]
    for _ in range(40):
        o, r, term, trunc, _ = pool.step(pool.random_actions(rng=rng))
        out += [o.copy(), r.copy(), term.copy(), trunc.copy()]
    pool.close()
    return out

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    make("CartPole-v1", num_envs=1).close()  # not a MuJoCo env: no warning
    with_timer = {env_id: run(env_id) for env_id in ("HalfCheetah-v5", "CartpoleSwingup-v1")}
timer_warnings = [w for w in caught if issubclass(w.category, mujoco_timer.MujocoTimerWarning)]
print(len(timer_warnings))
message = str(timer_warnings[0].message)
assert "import mujoco" in message and "torchfrag.envs.mujoco_timer.clear_timer()" in message, message
assert "mjData.timer" in message, message
assert timer_warnings[0].filename == "<string>", timer_warnings[0].filename  # the user's line

# The callback fills mjData.timer: a step of mujoco's own data shows a duration.
model = mujoco.MjModel.from_xml_string(
    "<mujoco><worldbody><body><freejoint/><geom size='.1'/></body></worldbody></mujoco>")
data = mujoco.MjData(model)
mujoco.mj_step(model, data)
print(data.timer[mujoco.mjtTimer.mjTIMER_STEP].duration > 0)

mujoco_timer.clear_timer()
print(mujoco_timer.timer_installed())
data = mujoco.MjData(model)
mujoco.mj_step(model, data)
print(data.timer[mujoco.mjtTimer.mjTIMER_STEP].duration == 0)

# The timer only profiles: the pool's results are bit-identical without it.
for env_id, ref in with_timer.items():
    got = run(env_id)
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        assert a.dtype == b.dtype and np.array_equal(a, b), env_id
print("same")
"""
    assert _run(code) == ["True", "True", "1", "True", "False", "True", "same"]

