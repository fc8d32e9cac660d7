"""The official TypeScript SDK run with bun from tests/interop/ts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent.parent / "interop" / "ts"
BUN = HERE / "node_modules" / ".bin" / "bun"


def run_script(script: str, broker_address: tuple[str, int]) -> dict[str, Any]:
    """Run one of the TypeScript scripts against the broker; returns its JSON report."""
    host, port = broker_address
    assert BUN.exists(), "bun is missing: run `make test` (it installs tests/interop/ts)"
    result = subprocess.run(
        [str(BUN), "run", script],
        cwd=HERE,
        env={**os.environ, "TRIOQ_HOST": host, "TRIOQ_PORT": str(port)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return report
