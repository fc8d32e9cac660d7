"""benchmarks/interpreter.py: which interpreter `make` builds .venv with.

Stand-in interpreters are shell scripts that answer the usability check and the probe the way a
real one would, so each test knows which candidate must win.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from benchmarks import interpreter
from benchmarks.loadgen import parse_args
from benchmarks.servers import TrioqServer


def fake_python(directory: Path, name: str, *, seconds: float, usable: bool = True) -> str:
    """A program that passes (or fails) the usability check and reports `seconds` per probe."""
    path = directory / name
    answers = f"*ensurepip*) echo {usable} ;; *) echo {seconds} ;;"
    path.write_text(f'#!/bin/sh\ncase "$2" in {answers} esac\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_the_fastest_usable_candidate_is_printed(tmp_path: Path, capsys) -> None:
    slow = fake_python(tmp_path, "slow", seconds=0.3)
    fast = fake_python(tmp_path, "fast", seconds=0.1)
    assert interpreter.main([slow, fast]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == os.path.realpath(fast)
    assert "fast 100 ms" in err and "slow 300 ms" in err


def test_an_unusable_or_missing_candidate_is_never_chosen(tmp_path: Path, capsys) -> None:
    old = fake_python(tmp_path, "old", seconds=0.01, usable=False)  # e.g. Python 3.8
    fine = fake_python(tmp_path, "fine", seconds=0.5)
    assert interpreter.main([str(tmp_path / "absent"), old, fine]) == 0
    assert capsys.readouterr().out.strip() == os.path.realpath(fine)


def test_one_program_named_twice_is_not_probed(tmp_path: Path, capsys) -> None:
    only = fake_python(tmp_path, "only", seconds=0.2)
    link = tmp_path / "link"
    link.symlink_to(only)
    assert interpreter.main([only, str(link)]) == 0
    out, err = capsys.readouterr()
    assert out.strip() == os.path.realpath(only)
    assert err == ""  # a single candidate needs no probe


def test_no_usable_candidate_fails_with_a_message(tmp_path: Path, capsys) -> None:
    old = fake_python(tmp_path, "old", seconds=0.1, usable=False)
    assert interpreter.main([old]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "no usable Python" in err


def test_a_failing_probe_loses(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.write_text('#!/bin/sh\ncase "$2" in *ensurepip*) echo True ;; *) exit 3 ;; esac\n')
    broken.chmod(0o755)
    steady = fake_python(tmp_path, "steady", seconds=0.9)
    chosen, best = interpreter.fastest([str(broken), steady])
    assert chosen == steady
    assert best[str(broken)] == float("inf")


def test_this_interpreter_is_usable_and_runs_the_probe() -> None:
    assert interpreter.usable(sys.executable)
    assert 0 < interpreter.probe_seconds(sys.executable) < 60


def test_a_baseline_runs_with_the_interpreter_it_was_given() -> None:
    given = TrioqServer.command("memory", "127.0.0.1", 1, None, python="/opt/other/python")
    assert given[:4] == ["/opt/other/python", "-m", "broker", "serve"]
    assert TrioqServer.command("memory", "127.0.0.1", 1, None)[0] == sys.executable


def test_a_baseline_python_without_its_baseline_is_refused(capsys) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--compare", "--baseline-python", "/usr/bin/python3"])
    assert "each --baseline-python belongs to a --baseline" in capsys.readouterr().err


def test_each_baseline_has_the_interpreter_given_in_its_position() -> None:
    from benchmarks.compare import baseline_python

    args = parse_args(["--compare", "--baseline", ".", "--baseline", ".",
                       "--baseline-python", "/opt/old/python"])  # fmt: skip
    assert baseline_python(args, 0) == "/opt/old/python"
    assert baseline_python(args, 1) == sys.executable
