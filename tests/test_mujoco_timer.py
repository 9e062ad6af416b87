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


#: Prepended to every script: ``records`` collects what torchfrag.envs.mujoco_timer logs.
_CAPTURE_LOG = """
import logging
records = []
handler = logging.Handler()
handler.emit = records.append
logging.getLogger("torchfrag.envs.mujoco_timer").addHandler(handler)
logging.getLogger("torchfrag.envs.mujoco_timer").setLevel(logging.INFO)
"""


def _run(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", _CAPTURE_LOG + code], check=False, cwd=ROOT,
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": ROOT})
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout.split()


def test_rendering_leaves_no_timer_when_the_user_never_imported_mujoco() -> None:
    # Frames of a MuJoCo and a DMC pool, Gymnasium's render_fps metadata: each
    # imports mujoco inside torchfrag.  The timer must be gone afterwards, and
    # nothing is logged about clearing one (torchfrag's imports clean up after themselves).
    code = """
import logging, sys
import numpy as np
from torchfrag.envs import make, mujoco_timer
from torchfrag.envs.rendering import RenderError, render_fps
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
make("HalfCheetah-v5", num_envs=1).close()
assert not [r for r in records if r.levelno >= logging.INFO], records
print(drawn)
"""
    installed, drawn = _run(code)
    assert installed == "False"
    if drawn != "2":
        pytest.skip("no OpenGL backend: only the import path of rendering was checked")


def test_a_pool_clears_an_installed_timer_logs_once_and_keep_timer_opts_out() -> None:
    code = """
import logging
import mujoco
import numpy as np
from torchfrag.envs import make, mujoco_timer


print(mujoco_timer.timer_installed())  # the user's import installed it
with mujoco_timer.keep_timer_off():  # torchfrag's import guard keeps a callback set before it
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

# The callback fills mjData.timer: a step of mujoco's own data shows a duration.
model = mujoco.MjModel.from_xml_string(
    "<mujoco><worldbody><body><freejoint/><geom size='.1'/></body></worldbody></mujoco>")
data = mujoco.MjData(model)
mujoco.mj_step(model, data)
print(data.timer[mujoco.mjtTimer.mjTIMER_STEP].duration > 0)

# Opted out: pools keep it (and their steps pay for it), nothing is logged.
mujoco_timer.keep_timer()
with_timer = {env_id: run(env_id) for env_id in ("HalfCheetah-v5", "CartpoleSwingup-v1")}
print(mujoco_timer.timer_installed(), len(records))
try:
    mujoco_timer.keep_timer("yes")
except TypeError as e:
    assert "bool" in str(e), e
else:
    raise AssertionError("keep_timer('yes') was accepted")

# The default: a non-MuJoCo pool leaves it, a MuJoCo pool clears it and logs once.
mujoco_timer.keep_timer(False)
make("CartPole-v1", num_envs=1).close()
print(mujoco_timer.timer_installed())
without = {env_id: run(env_id) for env_id in ("HalfCheetah-v5", "CartpoleSwingup-v1")}
print(mujoco_timer.timer_installed(), len(records))
message = records[0].getMessage()
assert records[0].levelno == logging.INFO, records[0]
assert "mjcb_time" in message and "keep_timer()" in message and "mjData.timer" in message, message
data = mujoco.MjData(model)
mujoco.mj_step(model, data)
print(data.timer[mujoco.mjtTimer.mjTIMER_STEP].duration == 0)

# Installed again (by the user) and cleared again, without a second log line.
mujoco.set_mjcb_time(lambda: 0.0)
make("Hopper-v5", num_envs=1).close()
print(mujoco_timer.timer_installed(), len(records))

# The timer only profiles: the pool's results are bit-identical with and without it.
for env_id, ref in with_timer.items():
    got = without[env_id]
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        assert a.dtype == b.dtype and np.array_equal(a, b), env_id
print("same")
"""
    assert _run(code) == ["True", "True", "True", "True", "0", "True", "False", "1", "True",
                          "False", "1", "same"]
