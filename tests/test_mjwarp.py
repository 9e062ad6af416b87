"""Hopper-v5 and Ant-v5 on MuJoCo Warp (torchfrag.envs.batched.mjwarp) against Gymnasium.

As for HalfCheetah (tests/test_torch_envs.py): after a reset, each Gymnasium
reference env is set to our state (``env.state``: qpos, then qvel), then both
step with the same actions through our TorchRL face (``step_and_maybe_reset``).
MuJoCo Warp computes in float32 and Gymnasium's MuJoCo in float64: Hopper
follows Gymnasium's to ~1e-6 through a whole open-loop episode. Ant does not:
from its first foot contact, MuJoCo Warp 4.0.0's pyramidal friction cone
(Gymnasium's default) answers differently from MuJoCo's (measured: a 0.43 rad/s
jump of the torso's angular velocity at that contact; with the elliptic cone
or frictionless contacts both agree to 2e-5). So Ant is compared step for
step before its first contact with the default cone, and over a whole
open-loop stretch with contacts on a user subclass that switches both sides to
the elliptic cone, which checks our observation (contact forces), rewards and
termination through contacts; the default-cone return difference is measured
and documented in ``mjwarp.py``.

The MuJoCo Warp extra (``torchfrag[gpu]``) is optional: without it these
tests skip. CUDA cases carry the ``cuda`` mark and skip without CUDA.
"""
from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch

from torchfrag.envs.batched import CartPole, make
from torchfrag.envs.batched.mjwarp import AntWarp

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]
TASKS = ["Hopper-v5", "Ant-v5"]
#: Observation size of each task (Gymnasium's default observation).
OBS = {"Hopper-v5": 11, "Ant-v5": 105}
#: Steps compared one by one (Ant: before its first contact, see the module docstring).
STEPS = {"Hopper-v5": 6, "Ant-v5": 1}
#: Largest gaps allowed: float32 against float64 physics (measured on the CPU: 5e-6).
OBS_ATOL = {"Hopper-v5": 1e-4, "Ant-v5": 1e-3}
REW_ATOL = {"Hopper-v5": 1e-4, "Ant-v5": 1e-3}


def _warp(device: str) -> torch.device:
    pytest.importorskip("warp")
    pytest.importorskip("mujoco_warp")
    if device.startswith("cuda") and not torch.cuda.is_available():
        pytest.skip("CUDA is not available")
    return torch.device(device)


def _synced_refs(env, env_id: str, elliptic: bool = False, **options) -> list:
    """Gymnasium envs set to our current state, one per env."""
    import mujoco

    state = env.state.cpu().numpy()
    nq, nv = env.nq, env.nv
    refs = []
    for i in range(env.num_envs):
        ref = gymnasium.make(env_id, **options).unwrapped
        if elliptic:
            ref.model.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC
        ref.reset(seed=i)
        ref.set_state(state[i, :nq], state[i, nq:nq + nv])
        refs.append(ref)
    return refs


def _open_loop(t: int, n: int, k: int) -> np.ndarray:
    """The fixed open-loop policy: ``a_j = sin(0.3 t + j)`` for every env."""
    return np.tile(np.sin(0.3 * t + np.arange(k)), (n, 1)).astype(np.float32)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("env_id", TASKS)
def test_first_steps_match_gymnasium(env_id: str, device: str) -> None:
    dev = _warp(device)
    env = make(env_id, 2, seed=0, device=dev)
    assert env.observation_spec["observation"].shape == (2, OBS[env_id])
    carry = env.reset()
    start = env.state
    refs = _synced_refs(env, env_id)
    for i, ref in enumerate(refs):
        # Same start: the reset observation is exact (Ant's contact forces are 0 after a reset).
        np.testing.assert_allclose(carry["observation"][i].cpu().numpy(), ref._get_obs(), atol=1e-12)
    rng = np.random.default_rng(0)
    k = env.action_spec.shape[-1]
    for t in range(STEPS[env_id]):
        a = rng.uniform(-1, 1, size=(2, k)).astype(np.float32)
        carry["action"] = torch.as_tensor(a, device=dev)
        td, carry = env.step_and_maybe_reset(carry)
        for i, ref in enumerate(refs):
            obs, rew, term, _, _ = ref.step(a[i])
            np.testing.assert_allclose(td["next", "observation"][i].cpu().numpy(), obs,
                                       atol=OBS_ATOL[env_id], err_msg=f"step {t}, env {i}")
            assert float(td["next", "reward"][i, 0]) == pytest.approx(rew, abs=REW_ATOL[env_id])
            assert bool(td["next", "terminated"][i]) == term
    # Reset noise is seeded per env: a twin starts from the same states, another seed does not.
    twin = make(env_id, 2, seed=0, device=dev)
    twin.reset()
    other = make(env_id, 2, seed=1, device=dev)
    other.reset()
    assert torch.equal(twin.state, start)
    assert not torch.equal(other.state[:, :env.nq], start[:, :env.nq])


@pytest.mark.parametrize("env_id", TASKS)
def test_termination_and_same_step_auto_reset(env_id: str) -> None:
    """Env 1's healthy range excludes its start: it terminates on step 1, as Gymnasium's with
    the same range, is reset in the same step, and its next episode follows Gymnasium's from
    the new state (the Warp data of that world was cleared, as mj_resetData does)."""
    dev = _warp("cpu")
    # Hopper: torso height must exceed 2 (it starts at 1.25); Ant: it must stay below 0.3 (0.75).
    bound = {"Hopper-v5": ("healthy_z_min", [0.7, 2.0], {"healthy_z_range": (2.0, float("inf"))}),
             "Ant-v5": ("healthy_z_max", [1.0, 0.3], {"healthy_z_range": (0.2, 0.3)})}[env_id]
    name, values, ref_options = bound
    env = make(env_id, 2, seed=3, device=dev, **{name: values})
    carry = env.reset()
    ref = _synced_refs(env, env_id, **ref_options)[1]
    k = env.action_spec.shape[-1]
    a = _open_loop(0, 2, k)
    carry["action"] = torch.as_tensor(a)
    td, carry = env.step_and_maybe_reset(carry)
    obs, rew, term, _, _ = ref.step(a[1])
    assert term and bool(td["next", "terminated"][1]) and bool(td["next", "done"][1])
    assert not bool(td["next", "done"][0])
    np.testing.assert_allclose(td["next", "observation"][1].numpy(), obs, atol=OBS_ATOL[env_id])
    # The unhealthy step earns no healthy reward, on both sides.
    assert float(td["next", "reward"][1, 0]) == pytest.approx(rew, abs=REW_ATOL[env_id])
    # Same-step auto-reset: the carry holds the new episode's first observation.
    assert env.elapsed.tolist() == [1, 0]
    fresh = env.state
    assert not np.allclose(carry["observation"][1].numpy(), td["next", "observation"][1].numpy())
    np.testing.assert_allclose(carry["observation"][1].numpy(), env.observe(fresh)[1].numpy())
    # The new episode (terminating again at once) follows a Gymnasium env reset to that state.
    ref2 = _synced_refs(env, env_id, **ref_options)[1]
    a = _open_loop(1, 2, k)
    carry["action"] = torch.as_tensor(a)
    td, carry = env.step_and_maybe_reset(carry)
    obs, rew, term, _, _ = ref2.step(a[1])
    np.testing.assert_allclose(td["next", "observation"][1].numpy(), obs, atol=OBS_ATOL[env_id])
    assert float(td["next", "reward"][1, 0]) == pytest.approx(rew, abs=REW_ATOL[env_id])
    assert term and bool(td["next", "terminated"][1])


class EllipticAnt(AntWarp):
    """Ant-v5 with the elliptic friction cone (a user subclass: the model is adjusted before
    it goes to the device)."""

    def setup_model(self, mjm) -> None:
        import mujoco

        super().setup_model(mjm)
        mjm.opt.cone = mujoco.mjtCone.mjCONE_ELLIPTIC


@pytest.mark.slow
@pytest.mark.parametrize("env_id", TASKS)
def test_open_loop_return_matches_gymnasium(env_id: str) -> None:
    """The fixed open-loop policy ``a_j = sin(0.3 t + j)``, same starts: Hopper's whole
    episode (it falls at step 17) with Gymnasium's MuJoCo; Ant's first 12 steps, through
    foot contacts, with both sides on the elliptic cone (measured: joints within 1e-4 and
    observations within 2e-4 there; later a contact switching on one side only, at a
    float32 distance from the margin, moves Ant's contact forces apart by up to 0.6 at
    step 18 while the joints still agree to 2e-4)."""
    dev = _warp("cpu")
    n, limit = 2, {"Hopper-v5": 40, "Ant-v5": 12}[env_id]
    elliptic = env_id == "Ant-v5"
    env = (EllipticAnt(n, seed=0, device=dev) if elliptic else make(env_id, n, seed=0, device=dev))
    carry = env.reset()
    refs = _synced_refs(env, env_id, elliptic=elliptic)
    k = env.action_spec.shape[-1]
    ours, theirs = np.zeros(n), np.zeros(n)
    live_ours, live_theirs = np.ones(n, bool), np.ones(n, bool)
    length_ours, length_theirs = np.zeros(n, int), np.zeros(n, int)
    for t in range(limit):
        a = _open_loop(t, n, k)
        carry["action"] = torch.as_tensor(a)
        td, carry = env.step_and_maybe_reset(carry)
        obs = td["next", "observation"].numpy()
        reward, term = td["next", "reward"][:, 0].numpy(), td["next", "terminated"][:, 0].numpy()
        for i, ref in enumerate(refs):
            if live_theirs[i]:
                ref_obs, rew, ref_term, _, _ = ref.step(a[i])
                theirs[i] += rew
                length_theirs[i] += 1
                live_theirs[i] = not ref_term
                if live_ours[i]:
                    np.testing.assert_allclose(obs[i], ref_obs, atol=1e-3, err_msg=f"step {t}")
            if live_ours[i]:
                ours[i] += reward[i]
                length_ours[i] += 1
                live_ours[i] = not term[i]
    if env_id == "Hopper-v5":
        assert not live_ours.any() and 10 < length_ours.min()  # whole episodes, ended by a fall
    else:
        assert live_ours.all()  # the Ant stays healthy over these steps
    np.testing.assert_array_equal(length_ours, length_theirs)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("env_id", TASKS)
def test_check_env_specs(env_id: str) -> None:
    from torchrl.envs.utils import check_env_specs

    _warp("cpu")
    env = make(env_id, 3, seed=0)
    check_env_specs(env)
    td = env.rollout(4, break_when_any_done=False)
    assert td["next", "observation"].shape == (3, 4, OBS[env_id])
    assert td["next", "reward"].dtype == torch.float32


def test_rollout_fragment_drives_it_like_the_pool() -> None:
    """The Rollout fragment steps a Warp env like the C++ pool: a policy written here, episodes
    (3-step limit) ended and restarted inside the rollout, counted by the episode stats."""
    from tensordict.nn import TensorDictModule

    from torchfrag.fragments import Rollout

    _warp("cpu")
    env = make("Hopper-v5", 2, seed=0, max_episode_steps=3)
    policy = TensorDictModule(torch.nn.Sequential(torch.nn.Linear(11, 3), torch.nn.Tanh()),
                              ["observation"], ["action"]).double()
    rollout = Rollout(policy, env, steps=8)
    batch = rollout()
    assert batch.batch_size == (2, 8)
    truncated = batch["next", "truncated"][..., 0]
    assert truncated[:, [2, 5]].all() and int(truncated.sum()) == 4
    assert rollout.stats.pop()["episodes"] == 4
    # Each new episode starts from a reset state: near Hopper's standing pose again.
    assert torch.allclose(batch["observation"][:, 3, 0], torch.full((2,), 1.25, dtype=torch.float64),
                          atol=0.01)


def test_options_outside_the_spec_are_refused() -> None:
    _warp("cpu")
    with pytest.raises(ValueError, match="main_body='2'.*only the root body"):
        make("Ant-v5", 1, main_body="2")
    with pytest.raises(ValueError, match="include_cfrc_ext_in_observation=False"):
        make("Ant-v5", 1, include_cfrc_ext_in_observation=False)
    with pytest.raises(ValueError, match="xml_file='walker2d.xml'"):
        make("Hopper-v5", 1, xml_file="walker2d.xml")
    with pytest.raises(ValueError, match="frame_skip must be >= 1"):
        make("Hopper-v5", 1, frame_skip=0)
    with pytest.raises(ValueError, match=r"healthy_z_max=nan: values must be numbers \(not NaN\)"):
        make("Hopper-v5", 1, healthy_z_max=float("nan"))
    with pytest.raises(ValueError, match="healthy_z_min=inf: values must be finite"):
        make("Hopper-v5", 1, healthy_z_min=float("inf"))
    # The torso by name is the root body; Hopper's unbounded default height range is accepted.
    assert make("Ant-v5", 1, main_body="torso").observation_spec["observation"].shape == (1, 105)
    assert make("Hopper-v5", 1, healthy_z_max=[float("inf")]).params["healthy_z_max"].isinf().all()


def test_infinite_option_values_only_where_the_default_is_infinite() -> None:
    with pytest.raises(ValueError, match="gravity=inf: values must be finite"):
        CartPole(1, gravity=float("inf"))
