"""Higher-order fragments that gather trajectories: :class:`Rollout` and :class:`Collect`."""
from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import torch
from tensordict import TensorDictBase
from tensordict.nn import InteractionType
from torch import nn
from torchrl.envs import EnvBase
from torchrl.envs.utils import set_exploration_type

from torchfrag.envs._torchrl_compat import new_tensordict
from torchfrag.fragments.act import Act
from torchfrag.fragments.base import Fragment
from torchfrag.fragments.env import EnvStep, env_carry_keys, env_next_keys
from torchfrag.graph.direct import direct_chain, direct_forward

logger = logging.getLogger(__name__)

__all__ = ["Rollout", "RolloutStep", "Collect", "EpisodeStats"]


class RolloutStep(nn.Module):
    """The per-step body of :class:`Rollout`: act, then step the env.

    ``forward(carry) -> (transition, carry)``; :class:`Rollout` captures it as
    its own :class:`~torchfrag.graph.FragmentGraph`.
    """

    def __init__(self, act: Fragment, env_step: EnvStep) -> None:
        super().__init__()
        self.act = act
        self.env_step = env_step

    def forward(self, carry: TensorDictBase) -> Any:
        carry = self.act(carry)
        transition, carry = self.env_step(carry)
        return transition, carry


class EpisodeStats:
    """Running per-env returns/lengths; collects the episodes that finish.

    What TorchRL's ``RewardSum`` + ``StepCounter`` transforms report at each
    episode end (``tests/test_library_parts.py`` checks that both give the same
    returns and lengths on one rollout), kept instead of them because it reads
    a whole ``[envs, time]`` batch once, after the rollout, outside the
    captured per-step graph: the transforms would run on every env step inside
    it, and a ``TransformedEnv`` loses ``PoolEnv``'s fast rollout (a 16-env x
    128-step CartPole rollout: ~280k frames/s with this class, ~9k with the
    transforms; ``benchmarks/library_parts.py``); they would also add
    ``episode_reward`` / ``step_count`` entries to every batch (and so to
    replay buffers and the graph's keys), and cannot be added to a user's env
    that is already built or to a collector's batches.

    Example:
        >>> import torch
        >>> stats = EpisodeStats()
        >>> stats.update(torch.ones(2, 3, 1), torch.tensor([[0, 0, 1], [0, 0, 0]]).bool())
        >>> stats.pop()
        {'episodes': 1, 'episode_return': 3.0, 'episode_length': 3.0}
    """

    def __init__(self) -> None:
        self._ret: torch.Tensor | None = None
        self._len: torch.Tensor | None = None
        self.returns: list[float] = []
        self.lengths: list[int] = []

    def update(self, reward: torch.Tensor, done: torch.Tensor) -> None:
        """Adds a ``[envs, time(, 1)]`` block of rewards and done flags (vectorised over time)."""
        # Running sums live on the CPU: a rollout on an accelerator hands its block over once.
        reward, done = reward.cpu(), done.cpu()
        n = reward.shape[0]
        if (reward.shape[1] == 1 and reward.numel() == n and self._ret is not None and self._ret.shape[0] == n
                and not bool(done.any())):
            # one step of one reward per env, no episode ending: what the general case computes
            # (a one-element sum and cumsum are the element), in four operations instead of ~ten
            self._ret += reward.reshape(n).double()
            self._len += 1
            return
        reward = reward.reshape(reward.shape[0], reward.shape[1], -1).sum(-1).double()
        done = done.reshape(done.shape[0], done.shape[1], -1).any(-1)
        n, t = reward.shape
        if self._ret is None or self._ret.shape[0] != n:
            self._ret = torch.zeros(n, dtype=torch.float64)
            self._len = torch.zeros(n, dtype=torch.int64)
        csum = reward.cumsum(1)
        if not bool(done.any()):
            self._ret += csum[:, -1]
            self._len += t
            return
        rows, steps = done.nonzero(as_tuple=True)  # row-major: by env, then time
        ends = csum[rows, steps]
        first = torch.ones_like(rows, dtype=torch.bool)
        first[1:] = rows[1:] != rows[:-1]
        prev_sum = torch.zeros_like(ends)
        prev_sum[1:] = ends[:-1]
        prev_step = torch.full_like(steps, -1)
        prev_step[1:] = steps[:-1]
        returns = torch.where(first, ends + self._ret[rows], ends - prev_sum)
        lengths = torch.where(first, steps + 1 + self._len[rows], steps - prev_step)
        self.returns.extend(returns.tolist())
        self.lengths.extend(lengths.tolist())
        # carry: what follows each env's last done (or everything, for envs with none)
        last = torch.full((n,), -1, dtype=torch.int64)
        last[rows] = steps  # later entries of a row overwrite earlier ones
        has = last >= 0
        tail = csum[:, -1] - torch.where(has, csum[torch.arange(n), last.clamp(min=0)],
                                         torch.zeros(n, dtype=torch.float64))
        self._ret = torch.where(has, tail, self._ret + tail)
        self._len = torch.where(has, t - 1 - last, self._len + t)

    def pop(self) -> dict[str, float]:
        """Summary of the episodes finished since the last call (empty when none)."""
        if not self.returns:
            return {}
        out = {"episodes": len(self.returns),
               "episode_return": sum(self.returns) / len(self.returns),
               "episode_length": sum(self.lengths) / len(self.lengths)}
        self.returns, self.lengths = [], []
        return out


class Rollout(Fragment):
    """Runs ``policy`` in ``env`` for ``steps`` steps; returns a ``[*env_batch, steps]`` TensorDict.

    A higher-order fragment: its per-step body (:class:`RolloutStep`: act,
    then env step with auto-reset) is itself captured as a
    :class:`~torchfrag.graph.FragmentGraph` (``rollout.body_graph``), so a
    distribution policy can place the act and env fragments apart. The env's
    current state carries over from one call to the next; the first call resets.

    Args:
        policy: A TorchRL actor (wrapped in :class:`~torchfrag.fragments.Act`) or an act fragment.
        env: A TorchRL env (:class:`~torchfrag.envs.PoolEnv` or any ``EnvBase``).
        steps: Steps per call (the time dimension of the output).
        exploration: Exploration type for :class:`~torchfrag.fragments.Act`.

    Example:
        >>> import torch
        >>> from tensordict.nn import TensorDictModule
        >>> from torchfrag.envs import PoolEnv
        >>> from torchfrag.fragments import Rollout
        >>> env = PoolEnv("Pendulum-v1", num_envs=3, seed=0)
        >>> policy = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])
        >>> rollout = Rollout(policy, env, steps=5)
        >>> rollout().batch_size
        torch.Size([3, 5])
        >>> [n.name for n in rollout.body_graph.nodes]
        ['act', 'env_step']
    """

    #: Frames this copy collected: per process by design (the runtime counts frames itself).
    local_state = frozenset({"frames"})

    impure = True
    passthrough = False
    role = "rollout"

    def __init__(self, policy: nn.Module, env: EnvBase, steps: int,
                 exploration: str = "random") -> None:
        act = policy if isinstance(policy, Fragment) else Act(policy, exploration=exploration)
        env_step = EnvStep(env, auto_reset=True)
        carry_keys = env_carry_keys(env)
        out_keys = list(dict.fromkeys([*carry_keys, *act.out_keys, *env_next_keys(env)]))
        super().__init__((), out_keys, reads=act.read_parameters() and [act], state=[env])
        if steps < 1:
            raise ValueError(f"steps must be >= 1, got {steps}")
        self.body = RolloutStep(act, env_step)
        self.env = env
        self.steps = int(steps)
        from torchfrag.graph import capture

        self.__dict__["body_graph"] = capture(self.body, in_keys=carry_keys, name="RolloutStep")
        self._carry: TensorDictBase | None = None
        self._time_dim = len(env.batch_size)
        self._itype = getattr(act, "_itype", InteractionType.RANDOM)
        self.stats = EpisodeStats()
        self.frames = 0

    def describe(self) -> str:
        return f"Rollout({type(self.env).__name__}, steps={self.steps})"

    def produced_state(self) -> dict[str, torch.Tensor]:
        """The env transforms' state (running observation statistics): updated as the rollout runs."""
        return _flatten_state(_transform_state(self.env))

    def merge_produced_state(self, base: dict[str, torch.Tensor],
                             replicas: list[dict[str, torch.Tensor]] | Any) -> None:
        """Folds replicas' env-transform state (all started from ``base``) into this rollout's.

        Counters add up and flags are kept (:func:`~torchfrag.fragments.base.merge_states`);
        a ``VecNormV2``'s running moments are merged as if the replicas had run one after
        the other (:func:`merge_running_moments`), not averaged: an average of N replicas'
        moments moves them by 1/N of what the union of their data does.
        """
        if not replicas:
            return
        from torchfrag.fragments.base import merge_states

        merged = merge_states(base, replicas)
        merged.update(merge_running_moments(getattr(self.env, "transform", None), base, replicas))
        self.load_produced_state(merged)

    def load_produced_state(self, state: dict[str, torch.Tensor]) -> None:
        transform = getattr(self.env, "transform", None)
        if transform is None or not state:
            return
        transform.load_state_dict(_unflatten_state(transform.state_dict(), state))

    def reset(self) -> None:
        """Forgets the carried env state; the next call resets the env."""
        self._carry = None
        self.stats = EpisodeStats()

    def forward(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        carry = tensordict if tensordict is not None else self._carry
        if carry is None:
            carry = self.env.reset()
        # the captured body's generated code, called directly, its fragments' forwards too
        # (no nn.Module dispatch where it would do nothing: checked once per call, not per step)
        direct = self._direct_plan(carry)
        done = direct(carry) if direct is not None else None
        if done is not None:
            batch, carry = done
        else:
            step = direct_forward(self.body_graph.module)
            out = []
            with torch.no_grad(), set_exploration_type(self._itype):
                for _ in range(self.steps):
                    transition, carry = step(carry)
                    out.append(transition)
            batch = torch.stack(out, dim=self._time_dim)
        self._carry = carry
        self.frames += batch.numel()
        if self._time_dim == 1:
            nxt = batch.get("next")
            self.stats.update(nxt.get("reward"), nxt.get("done"))
        return batch


    def _direct_plan(self, carry: TensorDictBase) -> Any:
        """The steps on plain tensors, or ``None`` where the body must run as captured.

        For the plain case (the body graph unplaced and without hooks, an :class:`Act` whose
        fast plan samples a ``TanhNormal`` from a network on the observation, a CPU
        :class:`~torchfrag.envs.PoolEnv` without transforms, info keys or pixels, a carry of the
        observation, the done flags and at most the act's last outputs, random exploration)
        the steps skip the TensorDict work of ``Act``, ``step_and_maybe_reset``, ``step_mdp``
        and ``torch.stack`` (~0.11 ms of SAC's ~0.31 ms one-step rollout on one thread): the
        same batches, the same carry, the same random draws in the same order and the same env
        state afterwards, so calls of either kind continue from each other
        (``tests/test_rollout_direct.py``). A one-step batch views the step's tensors, which
        are fresh and held by nothing that is read again (the next carry's act outputs are
        overwritten by the next step's act before they are read).
        """
        from torchfrag.envs.torchrl_env import PoolEnv
        from torchfrag.graph.direct import _global_hooks, _plain

        gm = self.body_graph.module
        act, env = self.body.act, self.env
        plan = getattr(act, "_fast", None)
        tensors = getattr(plan, "tensors", None)
        if (tensors is None or type(act) is not Act or not isinstance(env, PoolEnv) or not env._direct_ok()
                or "forward" in gm.__dict__ or _global_hooks()
                or gm._modules.get("act") is not act or gm._modules.get("env_step") is not self.body.env_step
                or set(gm._modules) != {"act", "env_step"} or not _plain(act) or not _plain(self.body.env_step)
                or self._itype is not InteractionType.RANDOM
                or carry.device != env.device or carry.batch_size != env.batch_size):
            return None
        net, in_keys, param_keys, action_key, sample = tensors
        if list(in_keys) != ["observation"] or action_key != "action" or len(param_keys) != 2:
            return None
        net = direct_chain(net)  # its leaves' forwards where no module of it has a hook
        # the env's carry, plus what step_mdp carries over from the last step (the act's outputs)
        keys = set(carry.keys())
        if not {"observation", "done", "terminated", "truncated"} <= keys <= {
                "observation", "done", "terminated", "truncated", *param_keys, "action"}:
            return None
        steps, dim = self.steps, self._time_dim
        size = torch.Size((*env.batch_size[:dim], steps, *env.batch_size[dim:]))
        root_keys = ("observation", "done", "terminated", "truncated", *param_keys, "action")
        device = env.device

        def join(values: list[torch.Tensor]) -> torch.Tensor:
            # every tensor here is fresh for this step (nothing else holds it): one step's is viewed
            return values[0].unsqueeze(dim) if steps == 1 else torch.stack(values, dim)

        def run(carry: TensorDictBase) -> tuple[TensorDictBase, TensorDictBase] | None:
            obs = carry.get("observation")
            flags = [carry.get(k) for k in ("done", "terminated", "truncated")]
            root: list[list[torch.Tensor]] = [[] for _ in root_keys]
            nxt_all: dict[str, list[torch.Tensor]] = {}
            with torch.no_grad():
                for _ in range(steps):
                    out = net(obs)
                    params = (out,) if isinstance(out, torch.Tensor) else tuple(out)
                    action = sample(*params)
                    if action is None:  # the sampler declined (it does so from the first step on)
                        if root[0]:
                            raise RuntimeError("Rollout: the actor's sampler declined after the first step")
                        return None
                    nxt, new_obs = env._direct_step(action)
                    for values, v in zip(root, (obs, *flags, *params, action)):
                        values.append(v)
                    for k, v in nxt.items():
                        nxt_all.setdefault(k, []).append(v)
                    obs = new_obs
                    zeros = torch.zeros_like(nxt["done"])
                    flags = [zeros, zeros.clone(), zeros.clone()]
            data = {k: join(v) for k, v in zip(root_keys, root)}
            data["next"] = new_tensordict({k: join(v) for k, v in nxt_all.items()}, size, device)
            batch = new_tensordict(data, size, device)
            # what step_mdp leaves: the new observation, cleared flags, the last step's act outputs
            last = dict(zip(("observation", "done", "terminated", "truncated", *param_keys, "action"),
                            (obs, *flags, *(values[-1] for values in root[4:]))))
            new_carry = new_tensordict(last, env.batch_size, device)
            return batch, new_carry

        return run


def merge_running_moments(transform: Any, base: dict[str, torch.Tensor],
                          replicas: Any) -> dict[str, torch.Tensor]:
    """The exact merge of ``VecNormV2`` moments (``loc``, ``var``) over replicas that started from ``base``.

    A replica that added ``n`` items (its count's increment) to the base moment ``b``:
    with ``decay < 1`` it holds ``r = decay ** n * b + c``, so running the replicas one after
    the other gives ``m <- r + decay ** n * (m - b)``; with ``decay == 1`` (means over counts)
    its items' sum is ``r * (C + n) - C * b`` (``C`` the base count), added to the merged sum.
    Every replica's contribution is kept whole (an average would keep 1/N of it).

    Example:
        >>> import torch
        >>> from torchrl.envs import VecNormV2
        >>> t = VecNormV2(in_keys=["observation"], decay=1.0)
        >>> key, count = "_extra_state/loc.-|-.observation", "_extra_state/count.-|-.observation"
        >>> base = {key: torch.tensor([0.0]), count: torch.tensor(2)}
        >>> reps = [{key: torch.tensor([1.0]), count: torch.tensor(4)},   # 2 items of mean 2
        ...         {key: torch.tensor([2.0]), count: torch.tensor(6)}]   # 4 items of mean 3
        >>> merge_running_moments(t, base, reps)[key]  # (2 * 0 + 2 * 2 + 4 * 3) / 8
        tensor([2.])
    """
    from torchrl.envs import VecNormV2

    if transform is None:
        return {}
    out: dict[str, torch.Tensor] = {}
    for key, b in base.items():
        head, sep, tail = key.partition("_extra_state/")
        if not sep or not tail.startswith(("loc.", "var.")) or not b.is_floating_point():
            continue
        module = transform.get_submodule(head.rstrip(".")) if head else transform
        if not isinstance(module, VecNormV2):
            continue
        count_key = head + sep + "count." + tail.split(".", 1)[1]
        if count_key not in base:
            continue
        start = base[count_key].double()
        seen, m, b64 = start, b.double(), b.double()
        for r in replicas:
            n = r[count_key].double() - start
            if module.decay < 1.0:  # the replica kept decay ** n of where it started
                m = r[key].double() + torch.pow(torch.tensor(float(module.decay), dtype=torch.float64), n) * (m - b64)
            elif float(seen + n) > 0:  # means over counts: the replica's own items' sum, added
                m = (seen * m + r[key].double() * (start + n) - start * b64) / (seen + n)
            seen = seen + n
        out[key] = m.to(b.dtype)
    return out


def _transform_state(env: Any) -> dict[str, Any]:
    transform = getattr(env, "transform", None)
    return dict(transform.state_dict()) if transform is not None else {}


def _flatten_state(state: dict[str, Any], prefix: str = "") -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for k, v in state.items():
        if isinstance(v, torch.Tensor):
            out[prefix + k] = v
        elif isinstance(v, dict):
            out.update(_flatten_state(v, f"{prefix}{k}/"))
    return out


def _unflatten_state(template: dict[str, Any], flat: dict[str, torch.Tensor],
                     prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in template.items():
        if isinstance(v, torch.Tensor):
            out[k] = flat.get(prefix + k, v)
        elif isinstance(v, dict):
            out[k] = _unflatten_state(v, flat, f"{prefix}{k}/")
        else:
            out[k] = v
    return out


class Collect(Fragment):
    """Takes the next batch from a TorchRL collector (or any iterable of TensorDicts).

    Args:
        collector: A collector (e.g. :class:`torchfrag.collectors.PoolCollector`
            or TorchRL's ``Collector``) or an iterable.
        out_keys: Keys its batches carry (for the graph's key check).
        policy: The policy module the collector runs (recorded as read parameters).

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchfrag.fragments import Collect
        >>> batches = [TensorDict(x=torch.zeros(2)) for _ in range(3)]
        >>> Collect(batches, out_keys=["x"])()["x"].shape
        torch.Size([2])
    """

    #: Frames this copy collected: per process by design (the runtime counts frames itself).
    local_state = frozenset({"frames"})

    impure = True
    passthrough = False
    role = "rollout"

    def __init__(self, collector: Iterable[TensorDictBase], out_keys: list[Any] | tuple = (),
                 policy: nn.Module | None = None) -> None:
        super().__init__((), out_keys, reads=policy, state=[collector])
        self.__dict__["collector"] = collector
        self._it: Any = None
        self.frames = 0
        self.stats = EpisodeStats()

    def describe(self) -> str:
        return f"Collect({type(self.collector).__name__})"

    def reset(self) -> None:
        """Clears the episode statistics (the collector keeps its state)."""
        self.stats = EpisodeStats()

    def forward(self, tensordict: TensorDictBase | None = None) -> TensorDictBase:
        if self._it is None:
            self._it = iter(self.collector)
        batch = next(self._it)
        self.frames += batch.numel()
        if batch.batch_dims == 2 and ("next", "reward") in batch.keys(True):
            nxt = batch.get("next")
            self.stats.update(nxt.get("reward"), nxt.get("done"))
        return batch
