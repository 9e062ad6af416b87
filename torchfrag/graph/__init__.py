"""Capturing a training loop as a fragmented dataflow graph.

Example:
    >>> import torch
    >>> from tensordict.nn import TensorDictModule
    >>> from torchfrag.graph import capture
    >>> from torchfrag.fragments import wrap
    >>> class Loop(torch.nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.f = wrap(TensorDictModule(torch.nn.Linear(2, 1), ["x"], ["y"]))
    ...     def forward(self, td):
    ...         return self.f(td)
    >>> capture(Loop(), in_keys=["x"]).nodes[0].out_keys
    (('y',),)
"""
from __future__ import annotations

from torchfrag.graph.capture import FragmentTracer, capture
from torchfrag.graph.errors import CaptureError, MissingKeyError
from torchfrag.graph.fragment_graph import DataEdge, FragmentGraph, FragmentNode, SharedEdge

__all__ = [
    "CaptureError",
    "DataEdge",
    "FragmentGraph",
    "FragmentNode",
    "FragmentTracer",
    "MissingKeyError",
    "SharedEdge",
    "capture",
]
