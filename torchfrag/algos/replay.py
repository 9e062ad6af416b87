"""What the off-policy algorithms (DQN, SAC) share: the replay keys and the random warm-up.

Example:
    >>> from torchfrag.algos.replay import REPLAY_KEYS
    >>> REPLAY_KEYS[:2]
    ['observation', 'action']
"""
from __future__ import annotations

import logging
import math

import torch
from tensordict import TensorDictBase
from tensordict.nn import TensorDictModuleBase
from torchrl.envs import EnvBase
from torchrl.envs.utils import RandomPolicy

from torchfrag.fragments import Fragment, Rollout

logger = logging.getLogger(__name__)

__all__ = ["REPLAY_KEYS", "RandomActor", "prefill"]

#: The transition keys written to and sampled from a replay buffer.
REPLAY_KEYS = ["observation", "action", ("next", "observation"), ("next", "reward"),
               ("next", "done"), ("next", "terminated")]


class RandomActor(TensorDictModuleBase):
    """Uniformly random actions from ``env``'s action spec (replay warm-up).

    TorchRL's :class:`~torchrl.envs.utils.RandomPolicy` on the env's (batched)
    full action spec, with the ``in_keys``/``out_keys`` a fragment needs
    (:class:`~torchfrag.fragments.Act` reads them; ``RandomPolicy`` has none).

    Example:
        >>> from torchfrag.algos.envs import make_env
        >>> from torchfrag.algos.replay import RandomActor
        >>> env = make_env("Pendulum-v1", 3)
        >>> RandomActor(env)(env.reset())["action"].shape
        torch.Size([3, 1])
    """

    def __init__(self, env: EnvBase) -> None:
        super().__init__()
        self.in_keys = ["observation"]
        self.out_keys = list(env.action_keys)
        # A plain attribute, not a submodule: RandomPolicy is no nn.Module and has no parameters.
        self.__dict__["policy"] = RandomPolicy(env.full_action_spec)

    def forward(self, tensordict: TensorDictBase) -> TensorDictBase:
        return self.policy(tensordict)


def prefill(rollout: Rollout, env: EnvBase, frames: int, write: Fragment) -> int:
    """Fills a replay buffer with ``frames`` random-action transitions before training.

    The random rollout continues from, and hands back to, ``rollout``'s env
    state, and its frames and episodes count as ``rollout``'s.

    Returns:
        Frames written.
    """
    if frames <= 0:
        return 0
    n = max(1, int(env.batch_size.numel()))
    steps = max(1, math.ceil(frames / n))
    fast = _pool_rollout(env, steps, rollout._carry)  # the carry is handed over between rollouts
    if fast is not None:
        batch, carry = fast
        written = batch.numel()
    else:
        warm = Rollout(RandomActor(env), env, steps=steps)
        batch = warm(rollout._carry)
        carry, written = warm._carry, warm.frames
    write(batch.select(*write.in_keys) if write.in_keys else batch)
    rollout._carry = carry
    rollout.frames += written
    nxt = batch.get("next")
    rollout.stats.update(nxt.get("reward"), nxt.get("done"))
    logger.debug("prefilled the replay buffer with %d random frames%s", written,
                 " (one pool rollout)" if fast is not None else "")
    return written


def _pool_rollout(env: EnvBase, steps: int, carry: TensorDictBase | None
                  ) -> tuple[TensorDictBase, TensorDictBase] | None:
    """Random-action transitions from the raw pool in one call, or ``None`` where that is not the same.

    ``PoolEnv.rollout`` with no policy steps the pool with uniform actions into
    preallocated ``[envs, steps]`` tensors (one pool call and a few NumPy copies
    per step, ~0.05 ms for HalfCheetah) instead of a TorchRL env step per frame
    (~1 ms: the transforms, the TensorDict building, the random policy's
    ``Composite`` sampling). It applies to a ``PoolEnv`` alone or under
    ``DoubleToFloat`` on its observation only (what :func:`~torchfrag.algos.envs.make_env`
    gives a MuJoCo or classic-control env): the float64 observations are cast
    here as the transform would. The returned carry is where a TorchRL step
    loop would leave the env: the last step's next state, finished envs reset.
    """
    from torchrl.envs import DoubleToFloat, TransformedEnv
    from torchrl.envs.utils import step_mdp

    from torchfrag.envs import PoolEnv

    base, cast = env, False
    if isinstance(env, TransformedEnv):
        base = env.base_env
        transforms = list(env.transform)
        if not all(isinstance(t, DoubleToFloat) and list(t.in_keys) == ["observation"] for t in transforms):
            return None
        cast = bool(transforms)
    if type(base) is not PoolEnv or not base.batched or base.info_keys:
        return None
    root = carry if carry is not None else env.reset()
    batch = base.rollout(steps, None, auto_reset=False, tensordict=root.exclude("next"),
                         break_when_any_done=False)
    if cast:
        for key in ("observation", ("next", "observation")):
            if batch.get(key).dtype == torch.float64:
                batch.set(key, batch.get(key).float())
    last = step_mdp(batch[..., -1], keep_other=False, exclude_action=True)
    return batch, env.maybe_reset(last)
