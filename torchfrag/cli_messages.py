"""One-line messages for what the training CLI refuses before a run starts.

Hydra reports a config it cannot compose (an unknown group option, a malformed
override, a missing ``+``, a value of the wrong type) in 6-7 lines plus a
search-path listing. :func:`composition_error_line` turns each such error into
one line naming the key, the value and what is allowed; ``python -m
torchfrag.train`` prints it as ``torchfrag.train: error: <line>`` and keeps the
full detail for ``HYDRA_FULL_ERROR=1`` or ``-v``.

Example:
    >>> from hydra.errors import MissingConfigException
    >>> err = MissingConfigException("Could not find 'algo/nope'", "algo/nope",
    ...                              ["a2c", "ppo", "ppo_schema"])
    >>> composition_error_line(err, ["algo=nope"])
    'algo=nope: no such algo; choose one of: a2c, ppo'
"""
from __future__ import annotations

import difflib
import re
from typing import Any

__all__ = ["HELP_RESOLVER", "composition_error_line", "config_groups_help", "register_help_resolver",
           "visible_options"]

#: The OmegaConf resolver ``conf/config.yaml``'s ``hydra.help.template`` lists the groups with.
HELP_RESOLVER = "torchfrag_config_groups"

#: Past this many options a refusal lists the nearest ones and says how to see all.
MAX_LISTED = 20


def visible_options(options: list[str]) -> list[str]:
    """The group options a user picks from: ``*_schema`` entries (typed bases that the
    group's files extend) left out.

    Example:
        >>> visible_options(["ppo", "ppo_schema", "sac"])
        ['ppo', 'sac']
    """
    return sorted(o for o in options if not o.endswith("_schema"))


def composition_error_line(err: BaseException, overrides: list[str]) -> str:
    """One line for an error Hydra raised while composing the config from ``overrides``.

    Args:
        err: The exception (a ``hydra.errors.HydraException`` or what Hydra let through).
        overrides: The command line's overrides, to quote the one that failed.

    Returns:
        ``<override>: <what is wrong>; <what is allowed>`` without newlines.

    Example:
        >>> from hydra.errors import OverrideParseException
        >>> err = OverrideParseException("algo.lr=[1", "no viable alternative at input '[1'")
        >>> composition_error_line(err, ["algo.lr=[1"])
        "cannot parse override 'algo.lr=[1': no viable alternative at input '[1'; overrides are key=value, +key=value (a new key), ++key=value or ~key"
    """
    from hydra.errors import MissingConfigException, OverrideParseException

    if isinstance(err, MissingConfigException) and err.missing_cfg_file and err.options is not None \
            and "/" in err.missing_cfg_file:
        return _missing_option(err.missing_cfg_file, list(err.options))
    if isinstance(err, OverrideParseException):
        return (f"cannot parse override {err.override!r}: {_first_line(err.message)}; overrides are "
                "key=value, +key=value (a new key), ++key=value or ~key")
    cause = err.__cause__
    full_key = getattr(cause, "full_key", None)
    if full_key:
        key = re.sub(r"\[(\d+)\]", r".\1", str(full_key))
        given = _override_for(key, overrides) or f"{key}={getattr(cause, 'value', '?')}"
        if "not in" in _first_line(getattr(cause, "msg", "")) and hasattr(cause, "parent_node"):
            return _unknown_key(key, given, cause.parent_node)
        return f"{given}: {_first_line(getattr(cause, 'msg', str(cause)))}"
    from hydra.errors import HydraException

    line = _one_line(str(err)) or type(err).__name__
    if isinstance(err, HydraException):
        return line
    return f"cannot compose the config from {' '.join(overrides)!r}: {line}"


def _missing_option(missing: str, options: list[str]) -> str:
    group, name = missing.rsplit("/", 1)
    choices = visible_options(options)
    what = f"{group}={name}: no such {group}" if name else f"{group}= needs an option"
    if len(choices) <= MAX_LISTED:
        return f"{what}; choose one of: {', '.join(choices)}"
    near = difflib.get_close_matches(name, choices, n=5, cutoff=0.5)
    return (f"{what}" + (f"; did you mean {', '.join(near)}?" if near else "")
            + f" ({len(choices)} options; `python -m torchfrag.train --help` lists them)")


def _unknown_key(key: str, given: str, parent: Any) -> str:
    name = key.rsplit(".", 1)[-1]
    where = key.rsplit(".", 1)[0] if "." in key else "top-level"
    try:
        known = sorted(str(k) for k in parent.keys() if k != "hydra")
    except Exception:  # a parent that is not a mapping: say what we can
        known = []
    near = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    add = given if given.startswith("+") else f"+{given}"
    return (f"{given}: no key {key!r} in the config"
            + (f" (did you mean {', '.join(repr(n) for n in near)}?)" if near else "")
            + (f"; {where} keys: {', '.join(known)}" if known else "")
            + f" (a new key is added with {add})")


def _override_for(key: str, overrides: list[str]) -> str | None:
    """The override on the command line that sets ``key`` (``+``/``++`` prefixes included)."""
    for override in overrides:
        if override.split("=", 1)[0].lstrip("+~") == key:
            return override
    return None


def _first_line(text: str) -> str:
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


def _one_line(text: str) -> str:
    return "; ".join(line.strip().rstrip(".") for line in str(text).splitlines() if line.strip())


def config_groups_help() -> str:
    """``group: option, option, ...`` per config group, for ``--help``: Hydra's own listing
    (``$APP_CONFIG_GROUPS``) less the ``*_schema`` entries and Hydra's groups.

    Reads the running Hydra's config loader, so groups added with ``hydra.searchpath`` or
    ``--config-dir`` are listed too; outside a Hydra app it returns an empty string.
    """
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.object_type import ObjectType

    if not GlobalHydra.instance().is_initialized():
        return ""
    loader = GlobalHydra.instance().config_loader()

    def groups(parent: str) -> list[str]:
        found = []
        for name in loader.list_groups(parent):
            group = f"{parent}/{name}" if parent else name
            if group == "hydra" or group.startswith("hydra/"):
                continue
            if loader.get_group_options(group, ObjectType.CONFIG):
                found.append(group)
            found.extend(groups(group))
        return found

    lines = []
    for group in sorted(groups("")):
        options = visible_options(list(loader.get_group_options(group, ObjectType.CONFIG)))
        if options:
            lines.append(f"{group}: {', '.join(options)}")
    return "\n".join(lines)


def register_help_resolver() -> None:
    """Registers :data:`HELP_RESOLVER` with OmegaConf (idempotent)."""
    from omegaconf import OmegaConf

    if not OmegaConf.has_resolver(HELP_RESOLVER):
        OmegaConf.register_new_resolver(HELP_RESOLVER, config_groups_help, use_cache=False)
