"""Interop: the official TypeScript SDK (npm `bunqueue` 2.9.5, run with `bun`) against trioq.

`make test` installs both from the npm registry into tests/interop/ts (see the Makefile).
The script builds a FlowProducer graph (one PUSHF), runs workers for the children and the
parent, and prints what happened as one JSON line.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

HERE = Path(__file__).parent / "ts"
BUN = HERE / "node_modules" / ".bin" / "bun"


def test_flow_producer_children_run_first_and_parent_reads_them(
    broker_address: tuple[str, int],
) -> None:
    host, port = broker_address
    assert BUN.exists(), "bun is missing: run `make test` (it installs tests/interop/ts)"
    result = subprocess.run(
        [str(BUN), "run", "flow.ts"],
        cwd=HERE,
        env={**os.environ, "TRIOQ_HOST": host, "TRIOQ_PORT": str(port)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["order"][2] == "parent:release"
    assert sorted(report["order"][:2]) == ["child:sdk", "child:unit"]
    values = report["childValues"]
    assert sorted(values.values()) == [10, 20]
    assert {key.split(":", 1)[1] for key in values} == set(report["childIds"])
