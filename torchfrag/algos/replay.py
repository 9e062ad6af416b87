"""What the off-policy algorithms (DQN, SAC) share: the replay keys and the random warm-up.

Example:
    >>> from torchfrag.algos.replay import REPLAY_KEYS
    >>> REPLAY_KEYS[:2]
    ['observation', 'action']
"""
from __future__ import annotations

import logging
import math

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
    warm = Rollout(RandomActor(env), env, steps=max(1, math.ceil(frames / n)))
    batch = warm(rollout._carry)  # noqa: SLF001 - carry handed over between rollouts
    write(batch.select(*write.in_keys) if write.in_keys else batch)
    rollout._carry = warm._carry  # noqa: SLF001
    rollout.frames += warm.frames
    nxt = batch.get("next")
    rollout.stats.update(nxt.get("reward"), nxt.get("done"))
    logger.debug("prefilled the replay buffer with %d random frames", warm.frames)
    return warm.frames
