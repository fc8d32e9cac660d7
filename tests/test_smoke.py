"""The first things a user does: hello, push, pull, ack."""

from tests.support.client import FrameClient


async def test_hello_answers_protocol_3(client: FrameClient) -> None:
    reply = await client.call("Hello", protocolVersion=2)
    assert reply["protocolVersion"] == 3
    assert reply["capabilities"] == ["pipelining", "separate-job-name"]


async def test_push_pull_ack_round_trip(client: FrameClient) -> None:
    pushed = await client.call("PUSH", queue="q", name="n", data={"x": 1})
    pulled = await client.call("PULL", queue="q")
    assert pulled["job"]["id"] == pushed["id"]
    assert pulled["job"]["data"] == {"x": 1}
    assert (await client.call("ACK", id=pushed["id"], result=5))["ok"] is True
    assert (await client.call("GetResult", id=pushed["id"]))["result"] == 5
