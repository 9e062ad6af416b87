"""A captured graph's generated code with its fragments' ``forward`` called directly.

``torch.fx`` generates ``self.act(carry)`` for every fragment node: each call goes through
``nn.Module.__call__`` (``_wrapped_call_impl`` -> ``_call_impl``, which checks for hooks and
compilation) and ``nn.Module.__getattr__`` (a child module is not an instance attribute).
Inside a :class:`~torchfrag.fragments.Rollout`, whose body runs once per env step, that is
about 3-6 us a step for two fragments (see ``docs/benchmarks.md``, "Executor overhead").
:func:`direct_forward` checks once, before the steps run, that nothing needs that path
(no hook on any fragment or globally, no ``torch.compile``-d call) and then runs the same
generated code with each fragment bound to its ``forward``; anything else (a module that
is not a :class:`~torchfrag.fragments.Fragment`, a hook, a compiled call, a nested or
``get_attr`` target) is called as the graph would call it.

Hooks registered while the returned callable runs are not seen by it: a caller takes a
fresh one whenever hooks could have changed (a :class:`~torchfrag.fragments.Rollout` takes
one per call).
"""
from __future__ import annotations

import functools
import numbers
import types
from collections.abc import Callable
from typing import Any

from torch import fx, nn
from torch.nn.modules import module as _module

__all__ = ["direct_chain", "direct_forward"]


def _global_hooks() -> bool:
    """Whether any module hook is registered globally (``register_module_forward_hook``, ...)."""
    return bool(_module._global_forward_hooks or _module._global_forward_pre_hooks
                or _module._global_backward_hooks or _module._global_backward_pre_hooks)


def _plain(mod: nn.Module) -> bool:
    """Whether ``mod(...)`` is exactly ``mod.forward(...)`` (no hooks, no compiled call)."""
    return not (mod._forward_hooks or mod._forward_pre_hooks or mod._backward_hooks
                or mod._backward_pre_hooks or getattr(mod, "_compiled_call_impl", None) is not None)


def direct_forward(gm: fx.GraphModule) -> Callable[..., Any]:
    """``gm.forward`` with every plain fragment node calling the fragment's ``forward`` directly.

    Same arguments, same results and the same calls in the same order as ``gm.forward``;
    only ``nn.Module.__call__``'s dispatch is skipped, where it would do nothing. Returns
    ``gm.forward`` itself when the graph has a node this does not handle or ``gm.forward``
    was replaced on the instance (:func:`torchfrag.runtime.fused.fuse_rollout`).

    Args:
        gm: A captured graph's module (``FragmentGraph.module``).

    Returns:
        A callable taking ``gm.forward``'s arguments.

    Example:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from torchfrag import capture
        >>> from torchfrag.fragments import Fragment
        >>> class Inc(Fragment):
        ...     def __init__(self):
        ...         super().__init__(["x"], ["x"])
        ...     def forward(self, td):
        ...         return td.set("x", td["x"] + 1)
        >>> class Loop(torch.nn.Module):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.a, self.b = Inc(), Inc()
        ...     def forward(self, td):
        ...         return self.b(self.a(td))
        >>> step = direct_forward(capture(Loop(), in_keys=["x"]).module)
        >>> int(step(TensorDict(x=torch.tensor(0)))["x"])
        2
    """
    from torchfrag.fragments.base import Fragment

    if _global_hooks() or "forward" in gm.__dict__:  # an instance forward (a fused rollout) wins
        return gm.forward
    bound: dict[str, Any] = {}
    for node in gm.graph.nodes:
        if node.op == "get_attr" or (node.op == "call_module" and "." in str(node.target)):
            return gm.forward
        if node.op == "call_module" and node.target not in bound:
            mod = gm._modules.get(node.target)
            if mod is None:
                return gm.forward
            bound[node.target] = mod.forward if isinstance(mod, Fragment) and _plain(mod) else mod
    # The generated function reads only these attributes of `self`; a namespace holding them
    # (bound forwards or the modules themselves) stands in for the GraphModule.
    return functools.partial(type(gm).forward, types.SimpleNamespace(**bound))


@functools.cache
def _mlp_class() -> type:
    from torchrl.modules import MLP

    return MLP


def _chain_leaves(mod: nn.Module, out: list[nn.Module]) -> bool:
    """Appends the modules ``mod`` runs one after the other, flattening sequential containers;
    ``False`` where a container's call is more than that chain."""
    mlp = _mlp_class()
    if type(mod) is nn.Sequential or (isinstance(mod, mlp) and type(mod).forward is mlp.forward
                                      and isinstance(mod.out_features, numbers.Number)):
        if not _plain(mod):
            return False
        return all(_chain_leaves(child, out) for child in mod)
    out.append(mod)
    return True


def direct_chain(module: nn.Module) -> Callable[[Any], Any]:
    """``module`` as a function of one input, its sequential containers' leaves called through their ``forward``.

    A policy network such as ``nn.Sequential(MLP(...), head)`` costs ~9 ``nn.Module.__call__``
    dispatches per call; where no module of the chain has a hook or a compiled call, the same
    leaves' ``forward`` run in the same order (TorchRL's ``MLP`` counts as a sequential container
    when its output is not reshaped). The check is made when this is called, so take a fresh
    function whenever hooks could have changed (a Rollout takes one per call). Anything else:
    ``module`` itself.

    Example:
        >>> import torch
        >>> from torchfrag.graph.direct import direct_chain
        >>> net = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
        >>> x = torch.randn(5, 3)
        >>> torch.equal(direct_chain(net)(x), net(x))
        True
    """
    leaves: list[nn.Module] = []
    if _global_hooks() or not _chain_leaves(module, leaves) or not all(_plain(m) for m in leaves):
        return module
    forwards = [m.forward for m in leaves]

    def chain(x: Any) -> Any:
        for forward in forwards:
            x = forward(x)
        return x

    return chain
