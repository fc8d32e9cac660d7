"""Flow throughput: PUSHF a 1-parent/100-children graph, work it to completion, repeat.

    python -m benchmarks.flows --host 127.0.0.1 --port 6789 [--graphs 50]
    python -m benchmarks.flows --compare [--modes memory,sqlite]

One connection pushes each graph with PUSHF; another pulls the 100 children (PULLB 100 +
ACKB), then the parent, which only becomes ready once they are done. Prints jobs/s over all
graphs (101 jobs each), pushing and completing included.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Sequence
from typing import Any

from .lateness import Conn
from .servers import each_server

CHILDREN = 100


def graph(tag: str, child_queue: str, parent_queue: str) -> list[dict[str, Any]]:
    """The PUSHF jobs of one graph."""
    children = [f"{tag}c{i}" for i in range(CHILDREN)]
    nodes = [
        {
            "id": cid,
            "queue": child_queue,
            "input": {"name": "child", "data": {"i": i}, "parentId": tag},
        }
        for i, cid in enumerate(children)
    ]
    parent_input = {
        "name": "parent",
        "data": {},
        "dependsOn": children,
        "childrenIds": children,
    }
    nodes.append({"id": tag, "queue": parent_queue, "input": parent_input})
    return nodes


def run(host: str, port: int, graphs: int) -> float:
    """Jobs per second to push and complete `graphs` graphs."""
    child_queue, parent_queue = (f"flow-{k}-{uuid.uuid4().hex[:8]}" for k in ("c", "p"))
    producer, worker = Conn(host, port), Conn(host, port)
    try:
        start = time.perf_counter()
        for n in range(graphs):
            tag = f"g{n}x{uuid.uuid4().hex[:8]}"
            producer.call({"cmd": "PUSHF", "jobs": graph(tag, child_queue, parent_queue)})
            done = 0
            while done < CHILDREN:
                reply = worker.call({"cmd": "PULLB", "queue": child_queue, "count": CHILDREN})
                ids = [job["id"] for job in reply["jobs"]]
                worker.call({"cmd": "ACKB", "ids": ids})
                done += len(ids)
            parent = worker.call({"cmd": "PULL", "queue": parent_queue, "timeout": 5000})["job"]
            if parent is None or parent["id"] != tag:
                raise RuntimeError(f"the parent of graph {n} did not become ready")
            worker.call({"cmd": "ACK", "id": tag})
        return graphs * (CHILDREN + 1) / (time.perf_counter() - start)
    finally:
        producer.close()
        worker.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.flows")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int)
    parser.add_argument("--compare", action="store_true", help="start trioq and the reference")
    parser.add_argument("--modes", default="memory", help="with --compare: memory,sqlite")
    parser.add_argument("--graphs", type=int, default=50)
    args = parser.parse_args(argv)
    print(f"PUSHF of 1 parent + {CHILDREN} children, then completion, x{args.graphs}")
    if not args.compare:
        if args.port is None:
            parser.error("--port is required without --compare")
        print(f"{args.host}:{args.port}: {run(args.host, args.port, args.graphs):,.0f} jobs/s")
        return 0
    for label, server in each_server(args.modes.split(",")):
        try:
            rate = run(server.host, server.port, args.graphs)
            print(f"{label:<20} {rate:>10,.0f} jobs/s")
        except (RuntimeError, ConnectionError) as exc:
            print(f"{label:<20} failed: {exc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
