"""Placement rules: the data a policy is made of.

A rule is a mapping with exactly one *matcher* and the ``role`` it assigns:

* ``node``: a node name; ``cls``: a class name (anywhere in the fragment's MRO);
* ``tag``: a declared role of :meth:`~torchfrag.fragments.Fragment.tags` (``rollout``,
  ``env``, ``act``, ``learn``, ``per_env``, ``impure``, ``optimizer``);
* ``predicate``: an attribute or method of the fragment that is true;
* ``all: true``: every fragment.

and optionally these *modifiers*:

* ``pick: first``: one fragment only gets the role: the one ``placement`` already puts on
  it, else the first match in the loop's order (an actors policy replicates one rollout;
  an evaluation rollout stays on the learner);
* ``chained: true``: only the fragments that continue the chain after what the role already
  holds (each the only consumer of the one before), up to the first that does not match;
* ``part: env_step``: the matched rollout stays where it is; the env step inside its
  captured body goes to the role (central inference);
* ``when: {field: value, ...}``: the rule applies only when the policy's fields have these
  values (``when: {advantage: actors}``).

A policy applies its ``base_rules`` (the shipped policies' are in their
``conf/policy/<name>.yaml``), then ``rules``, then the ``placement`` overrides.

Example:
    >>> from torchfrag.policies.rules import shipped_rules
    >>> shipped_rules("actors")[0]
    {'tag': 'rollout', 'role': 'actor', 'pick': 'first'}
"""
from __future__ import annotations

import copy
import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["RULE_MATCHERS", "RULE_MODIFIERS", "apply_rules", "check_rule", "rule_matches", "shipped_rules",
           "shipped"]

#: The keys a placement rule may match on (exactly one per rule).
RULE_MATCHERS = ("node", "cls", "tag", "predicate", "all")
#: The optional keys that narrow a rule (see the module docstring).
RULE_MODIFIERS = ("pick", "chained", "part", "when")


def rule_matches(rule: dict[str, Any], node: str, frag: Any) -> bool:
    """Whether a placement rule's matcher selects fragment ``frag`` at ``node``.

    Example:
        >>> from torchfrag.fragments import Fragment
        >>> class Eval(Fragment):
        ...     evaluation = True
        >>> rule_matches({"predicate": "evaluation", "role": "learner"}, "ev", Eval())
        True
        >>> rule_matches({"tag": "per_env", "role": "actor"}, "ev", Eval())
        False
    """
    if "node" in rule:
        return node == rule["node"]
    if "cls" in rule:
        return any(c.__name__ == rule["cls"] for c in type(frag).__mro__)
    if "tag" in rule:
        tags = frag.tags() if hasattr(frag, "tags") else frozenset()
        return rule["tag"] in tags
    if "predicate" in rule:
        value = getattr(frag, str(rule["predicate"]), False)
        return bool(value() if callable(value) else value)
    if "all" in rule:
        return bool(rule["all"])
    return False


def check_rule(rule: Any, where: str, roles: Sequence[str], fields: Sequence[str]) -> str | None:
    """What is wrong with ``rule`` (``None``: nothing), for the error of the policy that holds it."""
    if not isinstance(rule, dict):
        return f"{where} = {rule!r} must be a mapping"
    matchers = sorted(set(rule) & set(RULE_MATCHERS))
    extra = sorted(set(rule) - set(RULE_MATCHERS) - set(RULE_MODIFIERS) - {"role"})
    if len(matchers) != 1 or extra or "role" not in rule:
        return (f"{where} = {rule} must have exactly one of {list(RULE_MATCHERS)} and a 'role' "
                f"(and optionally {list(RULE_MODIFIERS)})" + (f"; unknown keys {extra}" if extra else ""))
    if rule["role"] not in roles:
        return (f"{where} assigns unknown role {rule['role']!r} (no group of that name); groups: "
                f"{list(roles)}")
    if "pick" in rule and rule["pick"] != "first":
        return f"{where}: pick must be 'first', got {rule['pick']!r}"
    if "chained" in rule and not isinstance(rule["chained"], bool):
        return f"{where}: chained must be true or false, got {rule['chained']!r}"
    if "part" in rule and rule["part"] != "env_step":
        return f"{where}: part must be 'env_step', got {rule['part']!r}"
    when = rule.get("when", {})
    if not isinstance(when, dict) or any(k not in fields for k in when):
        return f"{where}: when must map policy fields to values, got {when!r}; fields: {sorted(fields)}"
    return None


def apply_rules(policy: Any, graph: Any, rules: Sequence[dict[str, Any]], roles: dict[str, str],
                pinned: dict[str, str]) -> dict[str, str]:
    """Applies ``rules`` in order to ``roles`` (node -> role, changed in place).

    Args:
        policy: The policy (``when`` reads its fields).
        graph: The captured loop.
        rules: The rules.
        roles: Node name -> role so far.
        pinned: The ``placement`` overrides (node name -> role), applied after the rules.

    Returns:
        ``env_split``: rollout node -> role of its env step (from ``part: env_step`` rules).
    """
    from torchfrag.policies.base import env_nodes, per_env_chain

    env_split: dict[str, str] = {}
    order = [n.name for n in graph.nodes]
    for rule in rules:
        if any(getattr(policy, k, None) != v for k, v in dict(rule.get("when") or {}).items()):
            continue
        role = str(rule["role"])
        if rule.get("part") == "env_step":
            found = [n for n in env_nodes(graph) if rule_matches(rule, n, graph.fragment(n))]
            for n in found[:1] if rule.get("pick") == "first" else found:
                env_split[n] = role
            continue
        if rule.get("chained"):
            current = {**roles, **pinned}
            held = [n for n in order if current[n] == role]
            if held:
                for n in per_env_chain(graph, held[-1], per_env_only=False):
                    if not rule_matches(rule, n, graph.fragment(n)):
                        break
                    roles[n] = role
            continue
        found = [n for n in order if rule_matches(rule, n, graph.fragment(n))]
        if rule.get("pick") == "first":
            if any(pinned.get(n) == role for n in found):
                continue  # the override chose which one
            found = found[:1]
        for n in found:
            roles[n] = role
    return env_split


@functools.lru_cache(maxsize=None)
def _load_shipped(name: str) -> dict[str, Any]:
    from omegaconf import OmegaConf

    pkg = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for conf in (os.path.join(pkg, "conf"), os.path.join(os.path.dirname(pkg), "conf")):
        path = os.path.join(conf, "policy", f"{name}.yaml")
        if os.path.isfile(path):
            return dict(OmegaConf.to_container(OmegaConf.load(path), resolve=True) or {})
    raise FileNotFoundError(f"torchfrag's conf/policy/{name}.yaml was not found next to {pkg}; "
                            "reinstall torchfrag")


def shipped_rules(name: str, key: str = "base_rules") -> Any:
    """``key`` (``base_rules`` or ``groups``) of the shipped ``conf/policy/<name>.yaml`` (a fresh copy)."""
    empty: Any = {} if key == "groups" else []
    return copy.deepcopy(_load_shipped(name).get(key) or empty)


def shipped(name: str, key: str = "base_rules") -> Callable[[], Any]:
    """A dataclass ``default_factory`` giving :func:`shipped_rules` of ``name`` (``key``: what to read)."""
    return functools.partial(shipped_rules, name, key)
