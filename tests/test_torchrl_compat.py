"""The private TorchRL/tensordict APIs fenced in torchfrag.envs._torchrl_compat still exist and work.

A failure here after a TorchRL or tensordict upgrade names the API that moved.
"""
from __future__ import annotations

import importlib

import pytest
import torch

pytest.importorskip("torchrl")

from tensordict import TensorDict  # noqa: E402
from tensordict.nn import TensorDictModule  # noqa: E402

from torchfrag.envs import PoolEnv  # noqa: E402
from torchfrag.envs import _torchrl_compat as compat  # noqa: E402


@pytest.mark.parametrize("owner,name", compat.PRIVATE_APIS)
def test_private_api_exists(owner: str, name: str) -> None:
    module_name, _, attr = owner.rpartition(".")
    try:
        obj = importlib.import_module(owner)
    except ModuleNotFoundError:
        obj = getattr(importlib.import_module(module_name), attr)
    assert hasattr(obj, name), (
        f"{owner}.{name} is gone: a TorchRL/tensordict upgrade broke torchfrag.envs._torchrl_compat")


def test_new_tensordict_matches_public_constructor() -> None:
    data = {"a": torch.arange(6).reshape(2, 3), "b": torch.ones(2, 1)}
    fast = compat.new_tensordict(data, torch.Size([2]))
    slow = TensorDict(data, batch_size=[2])
    assert fast.batch_size == slow.batch_size
    assert set(fast.keys()) == set(slow.keys())
    assert (fast == slow).all()


def test_step_mdp_matches_public_step_mdp() -> None:
    from torchrl.envs.utils import step_mdp as public_step_mdp

    env = PoolEnv("CartPole-v1", 3, seed=0)
    td = env.reset()
    td["action"] = torch.zeros(3, dtype=torch.int64)
    td = env.step(td)
    ours = compat.step_mdp(env, td)
    ref = public_step_mdp(td, keep_other=True, exclude_action=True)
    assert set(ours.keys(True, True)) == set(ref.keys(True, True)) - {"action"} | (
        set(ours.keys(True, True)) & {"action"})
    assert torch.equal(ours["observation"], td["next", "observation"])
    env.close()


def test_make_compatible_policy_wraps_plain_callables() -> None:
    env = PoolEnv("CartPole-v1", 2, seed=0, info_keys=[])
    wrapped = compat.make_compatible_policy(lambda observation: (observation[..., 2] > 0).long(),
                                            env.observation_spec, env)
    out = wrapped(env.reset())
    assert out["action"].shape == (2,)
    module = TensorDictModule(lambda o: o[..., 0].long() * 0, ["observation"], ["action"])
    assert compat.make_compatible_policy(module, env.observation_spec, env) is module
    env.close()


# TorchRL's documented hooks for custom envs and transforms: overriding them is public API.
DOCUMENTED_HOOKS = frozenset({"_step", "_reset", "_set_seed", "_call", "_apply_transform",
                              "_inv_call", "_inv_apply_transform"})


def _library_private_names() -> set[str]:
    """Private (single underscore) names of the TorchRL/tensordict classes torchfrag builds on."""
    from tensordict import TensorDictBase
    from tensordict.nn import TensorDictModule, TensorDictModuleBase
    from torch import nn
    from torchrl.collectors import BaseCollector
    from torchrl.data import Composite, ReplayBuffer, TensorSpec
    from torchrl.envs import EnvBase, Transform, TransformedEnv
    from torchrl.objectives import LossModule

    names: set[str] = set()
    for cls in (EnvBase, Transform, TransformedEnv, BaseCollector, TensorSpec, Composite,
                ReplayBuffer, LossModule, TensorDict, TensorDictBase, TensorDictModuleBase,
                TensorDictModule):
        names |= {n for n in dir(cls) if n.startswith("_") and not n.startswith("__")}
    return names - set(dir(nn.Module))  # torch's own, not TorchRL's


def test_no_private_torchrl_api_outside_the_compat_module() -> None:
    """Greps the package's syntax trees: private TorchRL/tensordict names only in _torchrl_compat."""
    import ast
    import pathlib

    import torchfrag

    private = _library_private_names()
    allowed = DOCUMENTED_HOOKS | {name for _, name in compat.OVERRIDDEN_PRIVATE_HOOKS}
    root = pathlib.Path(torchfrag.__file__).parent
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "_torchrl_compat.py":
            continue
        tree = ast.parse(path.read_text(), str(path))
        # names this file binds to TorchRL/tensordict modules and objects (any private
        # attribute of one of them counts, e.g. ``torchrl.envs.utils._helper``)
        library_names = {"torchrl", "tensordict"}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                library_names |= {(a.asname or a.name).split(".")[0] for a in node.names
                                  if a.name.split(".")[0] in ("torchrl", "tensordict")}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
                    "torchrl", "tensordict"):
                library_names |= {a.asname or a.name for a in node.names}
        for node in ast.walk(tree):
            where = f"{path.relative_to(root.parent)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
                    "torchrl", "tensordict"):
                found += [f"{where} imports {a.name}" for a in node.names if a.name.startswith("_")]
            elif isinstance(node, ast.Attribute) and node.attr in private - allowed:
                found.append(f"{where} uses .{node.attr}")
            elif (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                  and not node.attr.startswith("__") and node.attr not in allowed
                  and isinstance(node.value, ast.Name) and node.value.id in library_names):
                found.append(f"{where} uses {node.value.id}.{node.attr}")
            elif isinstance(node, ast.FunctionDef) and node.name in private - allowed:
                found.append(f"{where} overrides {node.name}")
    assert not found, ("private TorchRL/tensordict APIs outside torchfrag/envs/_torchrl_compat.py"
                       " (fence them there, with a test here): " + "; ".join(found))
    # the grep sees what it must: the compat module's own uses
    text = (root / "envs" / "_torchrl_compat.py").read_text()
    assert all(name in text for _, name in compat.PRIVATE_APIS)


@pytest.mark.parametrize("owner,name", compat.OVERRIDDEN_PRIVATE_HOOKS)
def test_overridden_private_hooks_are_still_dispatched_to(owner: str, name: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """``step_and_maybe_reset`` (and the non-stop rollout) still call the fused override."""
    from torchfrag.envs.batched import CartPole

    for cls, env in ((PoolEnv, PoolEnv("CartPole-v1", 3, seed=0)), (CartPole, CartPole(3, seed=0))):
        calls = []
        original = getattr(cls, name)

        def spy(self, *args, _original=original, **kwargs):
            calls.append(1)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, spy)
        td = env.reset()
        td["action"] = torch.zeros(3, dtype=torch.int64)
        env.step_and_maybe_reset(td)
        assert calls, (f"{owner}.step_and_maybe_reset no longer calls {name}: {cls.__name__}'s"
                       " fused step is bypassed (a TorchRL upgrade changed the dispatch)")
        monkeypatch.undo()
        env.close()
