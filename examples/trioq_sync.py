"""The same without async: `trioq.sync` runs the client's event loop in a background thread.

python examples/trioq_sync.py
"""

from __future__ import annotations

import os

import trioq

URL = os.environ.get("TRIOQ_URL", "tcp://127.0.0.1:6789")


def resize(job: trioq.SyncJob[dict[str, int]]) -> dict[str, int]:
    """A plain function handler runs in a thread; job.progress()/log() block."""
    job.progress(100)
    return {"width": job.data["width"] // 2}


with trioq.sync.connect(URL) as client:
    images = client.queue("images")
    jobs = images.add_bulk([("resize", {"width": width}) for width in (640, 1024, 2048)])
    with trioq.sync.Worker(client, "images", resize, concurrency=3):
        print("results:", [job.wait(timeout=10) for job in jobs])
