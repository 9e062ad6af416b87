"""Named observations of the DeepMind Control Suite ids, against dm_control's own.

dm_control needs another MuJoCo than the pool's, so its side is committed
(``tests/dmc_reference``, ``generate.py --keys``): ``observation_spec.json``
holds every task's ``observation_spec()`` (keys in order, shapes, dtypes) and
``named_observations.npz`` its unflattened observations at the start state the
alignment references were synced to (seed 7) and after their first actions.
Each face is checked against both: ``make_dm`` must give dm_control's
``OrderedDict`` exactly, ``PoolEnv(named_observations=True)`` TorchRL's
``DMControlEnv`` entries (scalars as ``[1]``), and the Gymnasium faces a
``Dict`` space behind the same option (the flat vector stays the default).
"""
from __future__ import annotations

import collections
import json
import os

import numpy as np
import pytest

pytest.importorskip("mujoco")
pytest.importorskip("dm_env")

import gymnasium  # noqa: E402
import torch  # noqa: E402

from torchfrag.envs import PoolEnv, list_envs, make_dm, make_gymnasium, spec  # noqa: E402
from torchfrag.envs.dmc_observations import (  # noqa: E402
    is_dmc,
    observation_keys,
    split_observation,
)

REF_DIR = os.path.join(os.path.dirname(__file__), "dmc_reference")
with open(os.path.join(REF_DIR, "observation_spec.json")) as _f:
    DM_SPECS: dict[str, list] = json.load(_f)
TASKS = sorted(DM_SPECS)
SEED = 7  # the references' seed (generate.SEED)

try:
    spec("CheetahRun-v1")
except ValueError:
    pytest.skip("dm_control (the dmc extra) is not installed", allow_module_level=True)


def _named_reference(env_id: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """dm_control's values (``[steps + 1, *shape]`` per key) and the actions that led there."""
    values = np.load(os.path.join(REF_DIR, "named_observations.npz"))
    ref = {k.split(":", 1)[1]: values[k] for k in values.files if k.startswith(env_id + ":")}
    actions = np.load(os.path.join(REF_DIR, f"{env_id}.npz"))["actions"]
    steps = len(next(iter(ref.values()))) - 1
    return ref, actions[:steps]


def _tol(env_id: str) -> float:
    return 1e-5 if env_id == "FingerSpin-v1" else 1e-9  # test_dmc's tolerance for FingerSpin


def test_every_dmc_id_has_dm_controls_keys() -> None:
    dmc_ids = [e for e in list_envs() if is_dmc(e)]
    assert sorted(dmc_ids) == TASKS
    for env_id in TASKS:
        ours = [[k, list(shape), "float64"] for k, shape in observation_keys(env_id)]
        assert ours == DM_SPECS[env_id], env_id
        size = sum(int(np.prod(s)) for _, s in observation_keys(env_id))
        assert spec(env_id).observation_space.shape == (size,), env_id


@pytest.mark.parametrize("env_id", TASKS)
def test_make_dm_gives_dm_controls_ordered_dict(env_id: str) -> None:
    ref, actions = _named_reference(env_id)
    env = make_dm(env_id, num_envs=1, seed=SEED)
    obs_spec = env.observation_spec()
    assert isinstance(obs_spec, collections.OrderedDict)
    assert [[k, list(s.shape), str(s.dtype)] for k, s in obs_spec.items()] == DM_SPECS[env_id]
    assert all(s.name == k for k, s in obs_spec.items())
    steps = [env.reset()] + [env.step(a[None]) for a in actions]
    for t, ts in enumerate(steps):
        assert isinstance(ts.observation, collections.OrderedDict)
        assert list(ts.observation) == list(obs_spec)
        for key, value in ts.observation.items():
            assert value.dtype == np.float64 and value.shape == (1, *obs_spec[key].shape)
            np.testing.assert_allclose(value[0], ref[key][t], rtol=0, atol=_tol(env_id),
                                       err_msg=f"{env_id} {key} at step {t}")
    assert env.last_info["env_id"].tolist() == [0]
    assert env.last_info["elapsed_step"].tolist() == [len(actions)]
    env.close()


def test_make_dm_keeps_envpools_state_when_asked_and_for_other_ids() -> None:
    env = make_dm("CheetahRun-v1", num_envs=2, named_observations=False)
    assert env.reset().observation.obs.shape == (2, 17)
    env.close()
    env = make_dm("Pendulum-v1", num_envs=2)
    assert env.reset().observation.obs.shape == (2, 3)
    env.close()


@pytest.mark.parametrize("env_id", ["CheetahRun-v1", "WalkerWalk-v1", "FingerTurnHard-v1",
                                    "ManipulatorBringBall-v1"])
def test_poolenv_named_entries_as_dmcontrolenv(env_id: str) -> None:
    ref, actions = _named_reference(env_id)
    keys = observation_keys(env_id)
    env = PoolEnv(env_id, seed=SEED, named_observations=True)
    for key, shape in keys:  # DMControlEnv's rule: scalars get one dimension
        assert env.observation_spec[key].shape == (shape or (1,))
        assert env.observation_spec[key].dtype == torch.float64
    assert "observation" not in env.observation_spec.keys()
    td = env.reset()
    tds = [td]
    for a in actions:
        td["action"] = torch.as_tensor(a, dtype=torch.float32)
        td = env.step(td)["next"].clone()
        tds.append(td)
    for t, td in enumerate(tds):
        for key, shape in keys:
            np.testing.assert_allclose(td[key].numpy().reshape(shape), ref[key][t], rtol=0,
                                       atol=_tol(env_id), err_msg=f"{env_id} {key} at {t}")
    env.close()
    # Batched, with a cast and rollouts over episode ends (auto-reset through TorchRL's loop).
    env = PoolEnv(env_id, num_envs=3, seed=SEED, named_observations=True,
                  observation_dtype=torch.float32, max_episode_steps=4)
    out = env.rollout(6, break_when_any_done=False)
    flat = PoolEnv(env_id, num_envs=3, seed=SEED, observation_dtype=torch.float32,
                   max_episode_steps=4)
    actions = out["action"]
    td = flat.reset()
    for t in range(6):
        td["action"] = actions[:, t]
        td, td_next = flat.step_and_maybe_reset(td)
        for key, part in split_observation(env_id, td["next", "observation"], (1,)).items():
            assert out["next", key][:, t].dtype == torch.float32
            torch.testing.assert_close(out["next", key][:, t], part, rtol=0, atol=0)
        td = td_next
    env.close()
    flat.close()


def test_gymnasium_faces_offer_a_dict_space() -> None:
    env_id = "WalkerWalk-v1"
    ref, actions = _named_reference(env_id)
    envs = make_gymnasium(env_id, num_envs=2, named_observations=True, seed=SEED,
                          autoreset="same_step", max_episode_steps=3)
    assert isinstance(envs.single_observation_space, gymnasium.spaces.Dict)
    assert list(envs.single_observation_space) == [k for k, _, _ in DM_SPECS[env_id]]
    assert envs.observation_space["height"].shape == (2,)
    obs, _ = envs.reset()
    assert obs in envs.observation_space
    for key in ref:
        np.testing.assert_allclose(obs[key][0], ref[key][0], rtol=0, atol=1e-9)
    for t, a in enumerate(actions):
        obs, _, _, trunc, info = envs.step(np.stack([a, a]).astype(np.float32))
        if t < 2:
            for key in ref:
                np.testing.assert_allclose(obs[key][0], ref[key][t + 1], rtol=0, atol=1e-9)
    assert trunc.all() and set(info["final_obs"][0]) == set(ref)  # the terminal step's, split
    np.testing.assert_allclose(info["final_obs"][0]["velocity"], ref["velocity"][3], atol=1e-9)
    envs.close()
    assert make_gymnasium(env_id, num_envs=2).single_observation_space.shape == (24,)
    single = gymnasium.make(f"torchfrag/{env_id}", named_observations=True)
    obs, _ = single.reset(seed=0)
    assert obs["height"].shape == () and obs in single.observation_space
    obs, *_ = single.step(single.action_space.sample())
    assert obs["orientations"].shape == (14,)
    single.close()


def test_named_observations_refused_where_they_do_not_exist() -> None:
    with pytest.raises(ValueError, match="named observations"):
        PoolEnv("CartPole-v1", named_observations=True)
    with pytest.raises(ValueError, match="named observations"):
        make_gymnasium("Hopper-v5", named_observations=True)
    with pytest.raises(ValueError, match="named observations"):
        make_dm("CartPole-v1", named_observations=True)
    with pytest.raises(TypeError, match="True or False"):
        PoolEnv("CheetahRun-v1", named_observations="yes")
    with pytest.raises(ValueError, match="have 17 values"):
        split_observation("CheetahRun-v1", np.zeros(16))
