"""`trioq mcp --url tcp://...` over stdio with the official SDK's client, and the reference's own
MCP server (npm `bunqueue` 2.9.5's `bunqueue-mcp`, run with bun in its TCP mode) pointed at a
trioq broker: the same tools, with arguments trioq's accept, answering the same shapes."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

TOKEN = "mcp-token"
TS = Path(__file__).parent.parent / "interop" / "ts"
BUN = TS / "node_modules" / ".bin" / "bun"
REFERENCE_MCP = TS / "node_modules" / "bunqueue" / "dist" / "mcp" / "index.js"


@pytest.fixture(scope="module")
def broker() -> Iterator[tuple[str, int]]:
    """A trioq process (memory mode) that wants TOKEN, on a free port."""
    process = subprocess.Popen(
        [sys.executable, "-m", "broker", "serve", "--port", "0", "--http-port", "0", "--memory",
         "--auth-token", TOKEN],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        assert select.select([process.stdout], [], [], 30)[0], "the broker did not start"
        host, port = process.stdout.readline().rsplit(" ", 1)[1].strip().rsplit(":", 1)
        yield host, int(port)
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


def trioq_mcp(broker: tuple[str, int]) -> StdioServerParameters:
    host, port = broker
    url = f"tcp://{host}:{port}"
    return StdioServerParameters(
        command=sys.executable, args=["-m", "broker", "mcp", "--url", url, "--token", TOKEN],
        env=dict(os.environ),
    )  # fmt: skip


def reference_mcp(broker: tuple[str, int]) -> StdioServerParameters:
    host, port = broker
    assert BUN.exists(), "bun is missing: run `make test` (it installs tests/interop/ts)"
    env = {**os.environ, "BUNQUEUE_MODE": "tcp", "BUNQUEUE_HOST": host,
           "BUNQUEUE_PORT": str(port), "BUNQUEUE_TOKEN": TOKEN}  # fmt: skip
    return StdioServerParameters(command=str(BUN), args=[str(REFERENCE_MCP)], env=env, cwd=TS)


@asynccontextmanager
async def session_on(server: StdioServerParameters) -> AsyncIterator[ClientSession]:
    with open(os.devnull, "w") as quiet:  # noqa: ASYNC230  # opening /dev/null never blocks
        async with (
            stdio_client(server, errlog=quiet) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


async def call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    result = await session.call_tool(f"bunqueue_{tool}", arguments)
    assert not result.isError, result.content
    return json.loads(result.content[0].text)  # type: ignore[union-attr]


async def test_trioq_mcp_over_stdio_runs_tools_on_the_broker(broker: tuple[str, int]) -> None:
    async with session_on(trioq_mcp(broker)) as session:
        assert len((await session.list_tools()).tools) == 73
        added = await call(session, "add_job", queue="stdio", name="n", data={"x": 1})
        job = await call(session, "get_job", jobId=added["jobId"])
        assert (job["queue"], job["data"], job["state"]) == ("stdio", {"x": 1}, "waiting")
        pulled = await call(session, "pull_job_batch", queue="stdio", count=5, owner="agent")
        assert pulled["count"] == 1 and pulled["jobs"][0]["token"]
        token = pulled["jobs"][0]["token"]
        await call(session, "ack_job", jobId=added["jobId"], result={"ok": 1}, token=token)
        result = await call(session, "get_job_result", jobId=added["jobId"])
        assert result == {"jobId": added["jobId"], "result": {"ok": 1}}


def test_trioq_mcp_stops_with_a_clear_error_on_a_wrong_token(broker: tuple[str, int]) -> None:
    host, port = broker
    done = subprocess.run(
        [sys.executable, "-m", "broker", "mcp", "--url", f"tcp://{host}:{port}", "--token", "bad"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert "authentication failed" in done.stderr and done.stdout == ""


async def test_the_reference_mcp_server_in_tcp_mode_drives_trioq(broker: tuple[str, int]) -> None:
    async with (
        session_on(reference_mcp(broker)) as reference,
        session_on(trioq_mcp(broker)) as ours,
    ):
        theirs = {tool.name: tool for tool in (await reference.list_tools()).tools}
        mine = {tool.name: tool for tool in (await ours.list_tools()).tools}
        assert set(theirs) == set(mine) and len(mine) == 73
        for name, tool in theirs.items():  # every argument the reference takes, trioq takes
            schema = mine[name].inputSchema
            assert set(tool.inputSchema.get("properties", {})) <= set(schema["properties"]), name
            assert set(tool.inputSchema.get("required", [])) == set(schema.get("required", [])), (
                name
            )
        # jobs added through the reference's server are trioq's, and both answer alike
        added = await call(reference, "add_job", queue="ref", name="n", data={"k": "v"})
        their_job = await call(reference, "get_job", jobId=added["jobId"])
        my_job = await call(ours, "get_job", jobId=added["jobId"])
        assert set(their_job) <= set(my_job)
        assert {key: my_job[key] for key in their_job} == their_job
        their_counts = await call(reference, "get_job_counts", queue="ref")
        my_counts = await call(ours, "get_job_counts", queue="ref")
        assert their_counts.items() <= my_counts.items() and my_counts["waiting"] == 1
        assert await call(reference, "list_queues") == await call(ours, "list_queues")
        bulk = await call(
            reference,
            "add_jobs_bulk",
            queue="ref",
            jobs=[{"name": "a", "data": {}}, {"name": "b", "data": {}, "priority": 3}],
        )
        assert len(bulk["jobIds"]) == 2
        assert (await call(ours, "get_job_counts", queue="ref"))["prioritized"] == 1
        their_pull = await call(reference, "pull_job", queue="ref", timeoutMs=0)
        assert their_pull["job"]["id"] == bulk["jobIds"][1]  # the prioritized job first
        await call(reference, "ack_job", jobId=their_pull["job"]["id"], result=7)
        assert (await call(ours, "get_job_result", jobId=bulk["jobIds"][1]))["result"] == 7
        await call(reference, "pause_queue", queue="ref")
        assert await call(ours, "is_paused", queue="ref") == {"queue": "ref", "paused": True}
