"""`make test` and Chromium: installed with apt-get as root, else one line saying what to do."""

from __future__ import annotations

from pathlib import Path

from tests.support.make import make, make_checkout


def test_make_without_chromium_says_so_in_one_line(tmp_path: Path) -> None:
    checkout, env = make_checkout(tmp_path, {"id": "echo 1000"})  # not root: no apt-get
    result = make(checkout, env, "chromium")
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert "make test needs Chromium for the dashboard's browser tests" in line
    assert "apt-get install chromium chromium-driver" in line


def test_make_as_root_installs_chromium_with_apt_get(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    apt_get = (
        f'echo "apt-get $*" >> {tmp_path}/calls\n'
        f"if [ \"$1\" = install ]; then printf '#!/bin/sh\\n' > {bin_dir}/chromium; "
        f"/bin/chmod +x {bin_dir}/chromium; fi"
    )
    checkout, env = make_checkout(tmp_path, {"id": "echo 0", "apt-get": apt_get})
    result = make(checkout, env, "chromium")
    assert result.returncode == 0, result.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    assert "apt-get install -y -qq chromium chromium-driver" in calls


def test_make_never_installs_chromium_when_told_not_to(tmp_path: Path) -> None:
    apt_get = f'echo "apt-get $*" >> {tmp_path}/calls'
    checkout, env = make_checkout(tmp_path, {"id": "echo 0", "apt-get": apt_get})
    result = make(checkout, env, "chromium", "INSTALL_CHROMIUM=no")
    assert result.returncode == 2
    assert not (tmp_path / "calls").exists()
