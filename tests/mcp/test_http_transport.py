"""`/mcp` on the HTTP port: the official SDK's client over Streamable HTTP (a real socket),
behind the port's Bearer auth, with confirmation asked of the user (elicitation)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from mcp import ClientSession, types
from mcp.client.streamable_http import streamable_http_client

from broker.node.app import App
from broker.node.config import Config
from tests.support.app import start_app

# The SDK's client (httpx on Trio) leaves its response streams to the garbage collector when a
# session closes; Trio reports each as a ResourceWarning. It is the client's, not the broker's.
pytestmark = [
    pytest.mark.filterwarnings("ignore::ResourceWarning"),
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

TOKEN = "s3cret"
Elicit = Callable[[Any, types.ElicitRequestParams], Awaitable[Any]]


async def serve_http(app: App, nursery: trio.Nursery) -> str:
    """Open the app's HTTP port on a free loopback port; the /mcp URL."""
    assert app.http is not None
    listeners = await nursery.start(app.http.run, "127.0.0.1", 0)
    port = listeners[0].socket.getsockname()[1]
    return f"http://127.0.0.1:{port}/mcp"


@asynccontextmanager
async def mcp_session(
    url: str, token: str | None = TOKEN, elicit: Elicit | None = None
) -> AsyncIterator[ClientSession]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write, _),
        ClientSession(read, write, elicitation_callback=elicit) as session,
    ):
        await session.initialize()
        yield session


async def result_json(result: types.CallToolResult) -> Any:
    return json.loads(result.content[0].text)  # type: ignore[union-attr]


async def test_tools_over_streamable_http_behind_bearer_auth(nursery: trio.Nursery) -> None:
    app = await start_app(
        nursery, Config(port=0, http_port=0, memory=True, auth_tokens=frozenset({TOKEN}))
    )
    url = await serve_http(app, nursery)
    async with httpx.AsyncClient() as plain:
        refused = await plain.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert refused.status_code == 401
    async with mcp_session(url) as session:
        tools = (await session.list_tools()).tools
        assert len(tools) == 73 and all(tool.name.startswith("bunqueue_") for tool in tools)
        added = await result_json(
            await session.call_tool(
                "bunqueue_add_job", {"queue": "web", "name": "n", "data": {"k": 1}}
            )
        )
        counts = await result_json(
            await session.call_tool("bunqueue_get_job_counts", {"queue": "web"})
        )
        assert counts["waiting"] == 1
        pulled = await result_json(
            await session.call_tool("bunqueue_pull_job", {"queue": "web", "timeoutMs": 0})
        )
        assert pulled["job"]["id"] == added["jobId"] and pulled["job"]["data"] == {"k": 1}
        resources = (await session.list_resources()).resources
        assert {str(r.uri) for r in resources} == {
            "bunqueue://stats",
            "bunqueue://queues",
            "bunqueue://crons",
            "bunqueue://workers",
            "bunqueue://webhooks",
        }
    assert app.http is not None and len(app.http.mcp.manager._server_instances) == 0  # closed


async def test_a_client_that_can_ask_its_user_confirms_through_elicitation(
    nursery: trio.Nursery,
) -> None:
    app = await start_app(
        nursery, Config(port=0, http_port=0, memory=True, auth_tokens=frozenset({TOKEN}))
    )
    url = await serve_http(app, nursery)
    asked: list[str] = []

    def answering(confirm: bool) -> Elicit:
        async def elicit(context: Any, params: types.ElicitRequestParams) -> Any:
            asked.append(params.message)
            return types.ElicitResult(action="accept", content={"confirm": confirm})

        return elicit

    async with mcp_session(url, elicit=answering(False)) as session:
        await session.call_tool("bunqueue_add_job", {"queue": "doomed", "name": "n", "data": {}})
        refused = await session.call_tool(
            "bunqueue_obliterate_queue", {"queue": "doomed", "confirm": "doomed"}
        )
        assert refused.isError
        assert (await result_json(refused))["error"] == "The user did not confirm this operation."
        counts = await result_json(
            await session.call_tool("bunqueue_get_job_counts", {"queue": "doomed"})
        )
        assert counts["waiting"] == 1  # nothing was removed
    assert 'Permanently delete queue "doomed"' in asked[0] and "1 waiting" in asked[0]
    async with mcp_session(url, elicit=answering(True)) as session:
        done = await session.call_tool("bunqueue_obliterate_queue", {"queue": "doomed"})
        assert not done.isError
        counts = await result_json(
            await session.call_tool("bunqueue_get_job_counts", {"queue": "doomed"})
        )
        assert counts["waiting"] == 0


async def test_a_broken_request_ends_only_its_own_exchange(nursery: trio.Nursery) -> None:
    app = await start_app(nursery, Config(port=0, http_port=0, memory=True))
    url = await serve_http(app, nursery)
    async with httpx.AsyncClient() as plain:
        garbage = await plain.post(
            url,
            content=b"{not json",
            headers={
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
            },
        )
        assert garbage.status_code == 400
        unknown = await plain.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={
                "accept": "application/json, text/event-stream",
                "mcp-session-id": "no-such-session",
            },
        )
        assert unknown.status_code == 404
        too_big = await plain.post(
            url,
            content=b"x" * (4 * 1024 * 1024 + 1),
            headers={
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
            },
        )
        assert too_big.status_code == 413
    async with mcp_session(url, token=None) as session:  # the broker still serves
        assert len((await session.list_tools()).tools) == 73
