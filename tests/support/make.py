"""Running `make` targets in a scratch copy of the checkout."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.support.broker import ROOT

MAKE = shutil.which("make") or "make"


def make_checkout(tmp_path: Path, tools: dict[str, str]) -> tuple[Path, dict[str, str]]:
    """A copy of the Makefile and the interop package files, and an environment whose PATH
    holds only the given fake tools (shell scripts), so no real npm or apt-get can run."""
    checkout = tmp_path / "checkout"
    interop = checkout / "tests" / "interop" / "ts"
    interop.mkdir(parents=True)
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, checkout)
    for name in ("package.json", "package-lock.json"):
        shutil.copy(ROOT / "tests" / "interop" / "ts" / name, interop)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, script in {"touch": 'exec /usr/bin/touch "$@"', **tools}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{script}\n")
        (bin_dir / name).chmod(0o755)
    return checkout, {"PATH": str(bin_dir)}


def make(checkout: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """Run `make -s ARGS` in the checkout (60 s at most)."""
    command = [MAKE, "-s", *args]
    return subprocess.run(
        command, cwd=checkout, env=env, capture_output=True, text=True, timeout=60
    )
