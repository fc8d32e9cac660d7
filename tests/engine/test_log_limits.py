"""Issue 29: a log line and a job's logs are bounded in bytes, beside the 100-line cap.

A line took up to the 64 MiB frame, and 100 of them per job: 6 GiB a job. A line is now at
most 64 KiB of UTF-8 (a longer one is refused whole: the client hears it was not kept), and a
job's lines together at most 1 MiB (the oldest go, as past the line count).
"""

from __future__ import annotations

from typing import Any

from broker.engine.components.lifecycle import MAX_LOG_BYTES
from protocol.values import MAX_LOG_LINE_BYTES
from tests.support.client import FrameClient
from tests.support.engine import push

TOO_LONG = f"message too long (max {MAX_LOG_LINE_BYTES} bytes of UTF-8)"


async def logs(client: FrameClient, job_id: str) -> list[dict[str, Any]]:
    return (await client.call("GetLogs", id=job_id))["data"]["logs"]


async def test_a_line_past_64_kib_is_refused_and_nothing_is_added(client: FrameClient) -> None:
    job_id = await push(client)
    assert (await client.call("AddLog", id=job_id, message="first"))["ok"] is True
    for message in ("x" * (MAX_LOG_LINE_BYTES + 1), "x" * (8 * 1024 * 1024)):
        reply = await client.call("AddLog", id=job_id, message=message)
        assert reply == {"ok": False, "error": TOO_LONG, "reqId": reply["reqId"]}
    assert [line["message"] for line in await logs(client, job_id)] == ["first"]


async def test_a_line_is_measured_in_bytes_of_utf8(client: FrameClient) -> None:
    job_id = await push(client)
    euro = "\u20ac"  # three bytes of UTF-8
    fits = euro * (MAX_LOG_LINE_BYTES // 3)
    assert (await client.call("AddLog", id=job_id, message=fits))["ok"] is True
    over = euro * (MAX_LOG_LINE_BYTES // 3 + 1)  # fewer characters than the limit, more bytes
    assert (await client.call("AddLog", id=job_id, message=over))["error"] == TOO_LONG
    exact = "x" * MAX_LOG_LINE_BYTES
    assert (await client.call("AddLog", id=job_id, message=exact))["ok"] is True
    assert [len(line["message"]) for line in await logs(client, job_id)] == [
        MAX_LOG_LINE_BYTES // 3,
        MAX_LOG_LINE_BYTES,
    ]


async def test_a_jobs_logs_keep_their_newest_megabyte(client: FrameClient) -> None:
    job_id = await push(client)
    line = MAX_LOG_LINE_BYTES
    count = MAX_LOG_BYTES // line + 5  # 21 lines of 64 KiB: 5 too many
    for n in range(count):
        message = f"{n:04d}" + "x" * (line - 4)
        assert (await client.call("AddLog", id=job_id, message=message))["ok"] is True
    kept = await logs(client, job_id)
    assert [entry["message"][:4] for entry in kept] == [f"{n:04d}" for n in range(5, count)]
    assert sum(len(entry["message"]) for entry in kept) == MAX_LOG_BYTES
    # A short line pushes out only what it must.
    assert (await client.call("AddLog", id=job_id, message="short"))["ok"] is True
    after = await logs(client, job_id)
    assert [entry["message"][:4] for entry in after][:2] == ["0006", "0007"]
    assert after[-1]["message"] == "short"


# ClearLogs with `keepLogs: Infinity` answered an internal error before the field was typed
# (the engine sliced the log with a float).
async def test_clear_logs_keeping_infinitely_many_lines_keeps_them_all(
    client: FrameClient,
) -> None:
    job_id = (await client.call("PUSH", queue="q", data={"n": 1}))["id"]
    for i in range(3):
        await client.call("AddLog", id=job_id, message=f"m{i}")
    reply = await client.call("ClearLogs", id=job_id, keepLogs=float("inf"))
    assert reply["ok"] is True
    logs = (await client.call("GetLogs", id=job_id))["data"]["logs"]
    assert [entry["message"] for entry in logs] == ["m0", "m1", "m2"]
