"""The MCP tools on a broker's engine, through the SDK's client: results in the reference's
shapes, broker errors as `{"error"}` results, and confirmation before removing jobs for good."""

from __future__ import annotations

import functools
import json

import trio
from mcp import ClientSession

from tests.support.mcp import call, call_error


async def test_every_reference_tool_is_listed_with_its_schema(session: ClientSession) -> None:
    tools = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert len(tools) == 73
    assert tools["bunqueue_add_job"].inputSchema["required"] == ["queue", "name", "data"]
    assert tools["bunqueue_get_job"].annotations.readOnlyHint is True  # type: ignore[union-attr]
    for guarded in ("obliterate_queue", "drain_queue", "clean_queue", "purge_dlq"):
        tool = tools[f"bunqueue_{guarded}"]
        assert "confirm" in tool.inputSchema["properties"]
        assert tool.annotations.destructiveHint is True  # type: ignore[union-attr]
    assert "confirm" not in tools["bunqueue_retry_dlq"].inputSchema["properties"]


async def test_a_job_runs_its_life_through_the_tools(session: ClientSession) -> None:
    added = await call(session, "add_job", queue="life", name="send", data={"to": "ada"},
                       priority=2, attempts=5)  # fmt: skip
    job_id = added["jobId"]
    job = await call(session, "get_job", jobId=job_id)
    assert (job["name"], job["priority"], job["maxAttempts"], job["state"]) == (
        "send",
        2,
        5,
        "prioritized",
    )
    assert job["createdAt"].endswith("Z")
    assert await call(session, "get_job_state", jobId=job_id) == {
        "jobId": job_id,
        "state": "prioritized",
    }
    pulled = await call(session, "pull_job", queue="life", timeoutMs=0)
    assert pulled["job"]["id"] == job_id and pulled["job"]["state"] == "active"
    assert (await call(session, "update_progress", jobId=job_id, progress=40, message="half"))[
        "success"
    ] is True
    assert await call(session, "get_progress", jobId=job_id) == {
        "jobId": job_id,
        "progress": 40,
        "message": "half",
    }
    await call(session, "add_job_log", jobId=job_id, message="step one")
    assert (await call(session, "get_job_logs", jobId=job_id))["count"] == 1
    assert await call(session, "ack_job", jobId=job_id, result={"sent": True}) == {
        "success": True,
        "jobId": job_id,
    }
    assert (await call(session, "get_job_result", jobId=job_id))["result"] == {"sent": True}
    assert await call(session, "wait_for_job", jobId=job_id, timeoutMs=100) == {
        "jobId": job_id,
        "completed": True,
    }
    assert (await call(session, "pull_job", queue="life", timeoutMs=0)) == {"job": None}


async def test_broker_errors_and_bad_arguments_are_error_results(session: ClientSession) -> None:
    assert await call_error(session, "get_job", jobId="ghost") == {"error": "Job not found"}
    failed = await call_error(session, "ack_job", jobId="ghost")
    assert "ghost" in failed["error"]
    assert (await call(session, "cancel_job", jobId="ghost")) == {
        "success": False,
        "jobId": "ghost",
    }
    result = await session.call_tool("bunqueue_update_progress", {"jobId": "x", "progress": 101})
    assert result.isError and "Input validation error" in result.content[0].text  # type: ignore[union-attr]
    result = await session.call_tool("bunqueue_add_job", {"queue": "q", "name": "n"})
    assert result.isError and "'data' is a required property" in result.content[0].text  # type: ignore[union-attr]


async def test_removing_jobs_for_good_needs_the_queue_repeated_in_confirm(
    session: ClientSession,
) -> None:
    for _ in range(3):
        await call(session, "add_job", queue="keep", name="n", data={})
    refused = await call_error(session, "obliterate_queue", queue="keep")
    assert refused["executed"] is False
    assert refused["error"] == "Confirmation required for a destructive operation."
    assert "3 waiting" in refused["impact"]
    assert 'confirm: "keep"' in refused["howToConfirm"]
    wrong = await call_error(session, "drain_queue", queue="keep", confirm="other")
    assert wrong["executed"] is False
    assert (await call(session, "get_job_counts", queue="keep"))["waiting"] == 3  # untouched
    drained = await call(session, "drain_queue", queue="keep", confirm="keep")
    assert drained == {"success": True, "queue": "keep", "removed": 3}
    assert (await call_error(session, "purge_dlq", queue="keep"))["executed"] is False
    assert (await call_error(session, "clean_queue", queue="keep", graceMs=0))["executed"] is False


async def test_dlq_clean_and_retry(session: ClientSession) -> None:
    for name in ("a", "b"):
        await call(session, "add_job", queue="dq", name=name, data={}, attempts=1)
    for _ in range(2):
        job = (await call(session, "pull_job", queue="dq"))["job"]
        await call(session, "fail_job", jobId=job["id"], error="boom")
    dlq = await call(session, "get_dlq", queue="dq")
    assert dlq["count"] == 2 and {job["state"] for job in dlq["jobs"]} == {"failed"}
    retried = await call(session, "retry_dlq", queue="dq", jobId=dlq["jobs"][0]["id"])
    assert retried == {"success": True, "queue": "dq", "retried": 1}
    cleaned = await call(session, "clean_queue", queue="dq", graceMs=0, confirm="dq")
    assert cleaned["removed"] == 1 and cleaned["ids"] == [dlq["jobs"][1]["id"]]
    assert (await call(session, "get_job_counts", queue="dq"))["waiting"] == 1


async def test_queue_controls_crons_webhooks_workers_and_monitoring(
    session: ClientSession,
) -> None:
    assert (await call(session, "pause_queue", queue="ctl"))["message"] == "Queue paused"
    assert await call(session, "is_paused", queue="ctl") == {"queue": "ctl", "paused": True}
    await call(session, "set_rate_limit", queue="ctl", limit=5)
    await call(session, "set_concurrency", queue="ctl", limit=2)
    cron = await call(session, "add_cron", name="tick", queue="ctl", data={}, repeatEvery=60000)
    assert (cron["success"], cron["name"], cron["repeatEvery"]) == (True, "tick", 60000)
    assert "schedule" not in cron and cron["nextRun"].endswith("Z")
    assert (await call(session, "list_crons"))["count"] == 1
    assert (await call_error(session, "get_cron", name="nope"))["error"] == "Cron not found"
    assert await call(session, "delete_cron", name="tick") == {"success": True, "name": "tick"}
    hook = await call(session, "add_webhook", url="https://example.com/h", events=["job.failed"])
    assert hook["success"] is True and hook["enabled"] is True
    assert (await call(session, "list_webhooks"))["webhooks"][0]["id"] == hook["id"]
    worker = (await call(session, "register_worker", name="w1", queues=["ctl"]))["worker"]
    assert (worker["id"], worker["queues"]) == ("w1", ["ctl"])
    assert (await call(session, "list_workers"))["count"] == 1
    stats = await call(session, "get_stats")
    assert {"waiting", "active", "totalPushed", "uptime"} <= set(stats)
    metrics = await session.call_tool("bunqueue_get_prometheus_metrics", {})
    assert "bunqueue_jobs_waiting" in metrics.content[0].text  # type: ignore[union-attr]


async def test_flows_run_children_before_their_parent(session: ClientSession) -> None:
    root = await call(session, "add_flow", name="parent", queueName="fl", data={"p": 1},
                      children=[{"name": "kid", "queueName": "fl", "data": {"c": 1}}])  # fmt: skip
    kid = root["children"][0]["jobId"]
    assert (await call(session, "get_job_state", jobId=root["jobId"]))["state"] == \
        "waiting-children"  # fmt: skip
    job = (await call(session, "pull_job", queue="fl"))["job"]
    assert job["id"] == kid
    await call(session, "ack_job", jobId=kid, result=5)
    assert (await call(session, "pull_job", queue="fl"))["job"]["id"] == root["jobId"]
    values = await call(session, "get_children_values", parentJobId=root["jobId"])
    assert list(values["children"].values()) == [5]
    tree = await call(session, "get_flow", jobId=root["jobId"], queueName="fl")
    assert tree["children"][0]["jobId"] == kid
    chain = await call(
        session,
        "add_flow_chain",
        steps=[
            {"name": "one", "queueName": "ch", "data": {}},
            {"name": "two", "queueName": "ch", "data": {}},
        ],
    )
    assert (await call(session, "get_job_state", jobId=chain["jobIds"][1]))["state"] != "waiting"
    fan = await call(
        session,
        "add_flow_bulk_then",
        parallel=[{"name": "p", "queueName": "fan", "data": {}}],
        final={"name": "f", "queueName": "fan", "data": {}},
    )
    assert len(fan["parallelIds"]) == 1 and fan["finalId"]


async def test_resources_and_prompts(session: ClientSession) -> None:
    await call(session, "add_job", queue="res", name="n", data={})
    queues = json.loads((await session.read_resource("bunqueue://queues")).contents[0].text)  # type: ignore[union-attr]
    assert queues[0]["name"] == "res" and queues[0]["waiting"] == 1
    prompts = {prompt.name for prompt in (await session.list_prompts()).prompts}
    assert prompts == {"bunqueue_health_report", "bunqueue_debug_queue",
                       "bunqueue_incident_response"}  # fmt: skip
    report = await session.get_prompt("bunqueue_debug_queue", {"queue": "res"})
    assert 'queue "res"' in report.messages[0].content.text  # type: ignore[union-attr]
    incident = await session.get_prompt("bunqueue_incident_response", {})
    assert "Flagged Queues (1 problematic)" in incident.messages[0].content.text  # type: ignore[union-attr]


async def test_an_http_handler_processes_a_queue_s_jobs(
    session: ClientSession, nursery: trio.Nursery
) -> None:
    received: list[bytes] = []

    async def endpoint(stream: trio.SocketStream) -> None:
        data = b""
        while b"\r\n\r\n" not in data or not data.endswith(b"}"):
            data += await stream.receive_some(65536)
        received.append(data)
        body = b'{"echo": true}'
        await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                              b"content-length: %d\r\n\r\n%s" % (len(body), body))  # fmt: skip

    listeners = await nursery.start(
        functools.partial(trio.serve_tcp, endpoint, 0, host="127.0.0.1")
    )
    port = listeners[0].socket.getsockname()[1]
    registered = await call(session, "register_handler", queue="hooks",
                            url=f"http://127.0.0.1:{port}/do", method="POST")  # fmt: skip
    assert registered["success"] is True
    job = await call(session, "add_job", queue="hooks", name="n", data={"v": 1})
    done = await call(session, "wait_for_job", jobId=job["jobId"], timeoutMs=10000)
    assert done["completed"] is True
    result = await call(session, "get_job_result", jobId=job["jobId"])
    assert result["result"] == {"status": 200, "body": {"echo": True}}
    assert received[0].startswith(b"POST /do") and received[0].endswith(b'{"v": 1}')
    assert (await call(session, "list_handlers"))["handlers"][0]["queue"] == "hooks"
    assert (await call(session, "unregister_handler", queue="hooks"))["success"] is True
