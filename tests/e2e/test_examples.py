"""The examples a new user copies from: each of examples/ and the README's Python snippet runs
against a real broker and does what it says, so none can rot unnoticed."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.broker import ROOT, BrokerFactory, FrameSocket
from tests.support.typescript import BUN, HERE

EXAMPLES = ROOT / "examples"
RUN_TIMEOUT_S = 60


def run(command: list[str], cwd: Path = ROOT) -> list[str]:
    """Run an example to its end; its output lines (it must exit 0 and write no errors)."""
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    assert (result.returncode, result.stderr) == (0, ""), result.stderr[-3000:]
    return result.stdout.splitlines()


def emails_outcome(address: tuple[str, int]) -> tuple[dict[str, int], dict[str, Any]]:
    """The counts of the queue `emails` and its one failed job, as the broker holds them."""
    with FrameSocket(address) as client:
        counts = client.call("GetJobCounts", queue="emails")["counts"]
        [failed] = client.call("GetJobs", queue="emails", state="failed")["jobs"]
    return counts, failed


def where(address: tuple[str, int]) -> str:
    return f"{address[0]}:{address[1]}"


def test_the_raw_socket_producer_and_worker(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    lines = run([sys.executable, str(EXAMPLES / "raw_socket.py"), where(broker.address)])
    ada, grace = ({"sent": True, "to": f"{name}@example.com"} for name in ("ada", "grace"))
    assert lines == [
        "pushed 3 jobs to emails",
        f"ACK  ada@example.com (attempt 1 of 2): {ada}",
        f"ACK  grace@example.com (attempt 1 of 2): {grace}",
        "FAIL nobody (attempt 1 of 2): not an email address: 'nobody'",
        "FAIL nobody (attempt 2 of 2): not an email address: 'nobody'",
        f"ada@example.com: completed, {ada}",
        f"grace@example.com: completed, {grace}",
        "nobody: failed, not an email address: 'nobody'",
    ]
    counts, failed = emails_outcome(broker.address)
    assert (counts["completed"], counts["failed"], counts["active"]) == (2, 1, 0)
    assert failed["attempts"] == 2
    stack = failed["stacktrace"]  # FAIL's stack: a list of strings, the traceback's lines
    assert stack[0] == "Traceback (most recent call last):"  # stored trimmed, as the reference
    assert stack[-1] == "ValueError: not an email address: 'nobody'"


def assert_sdk_example_ran(
    lines: list[str], results: tuple[str, str], address: tuple[str, int]
) -> None:
    """What both SDK examples print and leave behind: ada and grace acknowledged with `results`
    (as the SDK prints them), nobody failed twice; the broker holds the same outcome."""
    ada, grace = results
    assert lines[0] == "pushed 3 jobs to emails"
    # The worker runs jobs concurrently: the order of the first outcomes may vary.
    assert sorted(lines[1:5]) == [
        f"ACK  ada@example.com: {ada}",
        f"ACK  grace@example.com: {grace}",
        "FAIL nobody (attempt 1 of 2): not an email address: 'nobody'",
        "FAIL nobody (attempt 2 of 2): not an email address: 'nobody'",
    ]
    assert lines[5:] == [
        f"ada@example.com: completed, {ada}",
        f"grace@example.com: completed, {grace}",
        "nobody: failed, not an email address: 'nobody'",
    ]
    counts, failed = emails_outcome(address)
    assert (counts["completed"], counts["failed"], counts["active"]) == (2, 1, 0)
    assert failed["attempts"] == 2


def test_the_python_sdk_example(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    lines = run([sys.executable, str(EXAMPLES / "python_sdk.py"), where(broker.address)])
    ada, grace = ({"sent": True, "to": f"{name}@example.com"} for name in ("ada", "grace"))
    assert_sdk_example_ran(lines, (str(ada), str(grace)), broker.address)


def test_the_typescript_sdk_example(broker_factory: BrokerFactory, tmp_path: Path) -> None:
    assert BUN.exists(), "bun is missing: run `make test` (it installs tests/interop/ts)"
    # As a user's project would hold it: the script beside a node_modules with bunqueue (the
    # one `make test` installs for the interop tests, pinned as examples/package.json pins it).
    (tmp_path / "node_modules").symlink_to(HERE / "node_modules")
    script = tmp_path / "typescript_sdk.ts"
    script.write_text((EXAMPLES / "typescript_sdk.ts").read_text())
    broker = broker_factory()
    lines = run([str(BUN), "run", str(script), where(broker.address)], cwd=tmp_path)
    ada, grace = (
        json.dumps({"sent": True, "to": f"{name}@example.com"}, separators=(",", ":"))
        for name in ("ada", "grace")
    )
    assert_sdk_example_ran(lines, (ada, grace), broker.address)


def test_the_examples_pin_the_sdk_versions_the_interop_tests_run() -> None:
    examples = (EXAMPLES / "package.json").read_text()
    interop = (HERE / "package.json").read_text()
    pins = re.compile(r'"(bun|bunqueue)": "([^"]+)"')
    assert pins.findall(examples) == pins.findall(interop) != []
    pyproject = (ROOT / "pyproject.toml").read_text()
    [pinned] = re.findall(r'"bunqueue-client==([^"]+)"', pyproject)
    assert f"pip install bunqueue-client=={pinned}" in (EXAMPLES / "python_sdk.py").read_text()


def readme_python_blocks() -> list[str]:
    """The README's Python code blocks that talk to a broker (they name port 6789)."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.DOTALL)
    return [block for block in blocks if "6789" in block]


def test_the_readmes_python_snippet_runs_and_prints_what_it_did(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    blocks = readme_python_blocks()
    assert blocks, "the README has no Python example"
    for block in blocks:
        broker = broker_factory()
        script = tmp_path / "snippet.py"
        script.write_text(block.replace("6789", str(broker.address[1])))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        result = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
            env=env, cwd=tmp_path,
        )  # fmt: skip
        assert (result.returncode, result.stderr) == (0, ""), result.stderr[-3000:]
        assert result.stdout.strip(), "the snippet printed nothing"
