"""Fetching a pinned source distribution from the package registry at build time.

Shared by the build_tools modules that need files only an sdist carries (ALE
headers, Box2D sources).  The tarball is downloaded once with pip into the
build cache and its SHA-256 is checked on every use; an environment variable
may name a local copy for offline builds.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys


def sha256(path: str) -> str:
    """SHA-256 hex digest of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch(requirement: str, filename: str, expected_sha256: str, cache_dir: str,
          local_env: str, purpose: str) -> str:
    """Return the path of the verified sdist ``filename``, downloading it if needed.

    Args:
        requirement: pip requirement, ``name==version``.
        filename: the tarball's name as the registry serves it.
        expected_sha256: its SHA-256.
        cache_dir: where the tarball is kept between builds.
        local_env: environment variable that may name a local copy instead.
        purpose: what the sdist is needed for, for error messages.

    Example:
        >>> fetch("box2d==2.3.2", "Box2D-2.3.2.tar.gz", "d155...", "build/native/box2d",
        ...       "TORCHFRAG_BOX2D_SDIST", "the Box2D sources")  # doctest: +SKIP
    """
    name = requirement.split("==")[0]
    local = os.environ.get(local_env, "").strip()
    target = os.path.join(cache_dir, filename)
    if local:
        if not os.path.isfile(local):
            raise SystemExit(f"{local_env}={local!r} is not a file")
        source = local
    elif os.path.isfile(target):
        source = target
    else:
        os.makedirs(cache_dir, exist_ok=True)
        # `--no-binary <name>` (not :all:) gets the sdist of that package while
        # pip may still use wheels of its build backend to read its metadata.
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", name,
               requirement, "-d", cache_dir, "--disable-pip-version-check", "--quiet"]
        result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if result.returncode != 0 or not os.path.isfile(target):
            raise SystemExit(
                f"could not download the {requirement} source distribution (needed for "
                f"{purpose}): `{' '.join(cmd)}` failed:\n{result.stdout}\n"
                f"Set {local_env} to a local copy of the tarball to build offline."
            )
        source = target
    digest = sha256(source)
    if digest != expected_sha256:
        raise SystemExit(
            f"{source} has SHA-256 {digest}, expected {expected_sha256} for {requirement}; "
            "delete it and build again"
        )
    return source
