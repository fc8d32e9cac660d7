"""ClearLogs with `keepLogs: Infinity` keeps every line (it answered an internal error before
the field was typed: the engine sliced the log with a float)."""

from __future__ import annotations

from tests.support.client import FrameClient


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
