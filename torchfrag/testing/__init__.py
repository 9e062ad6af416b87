"""Test support shipped with torchfrag: a simulated cluster of hosts (:mod:`torchfrag.testing.cluster`)."""
from __future__ import annotations

from torchfrag.testing.cluster import Cluster, Host, unavailable

__all__ = ["Cluster", "Host", "unavailable"]
