"""The front door on its own (no I/O): what a connection answers itself, auth and its failures,
and the in-flight budget, as TCP, HTTP and WebSocket all use them."""

from __future__ import annotations

from typing import Any

import msgspec

from broker.server.frontdoor import (
    MAX_AUTH_FAILURES,
    FrontDoor,
    InFlight,
    bearer_authorized,
    tokens_match,
)
from broker.server.guards import AuthThrottle
from protocol import Rejected, decode_command

TOKENS = frozenset({"s3cret"})


def command(**fields: object) -> object:
    return decode_command(msgspec.msgpack.encode(fields))


def door(tokens: frozenset[str] = TOKENS, **options: Any) -> FrontDoor:
    return FrontDoor(tokens, lambda: 1_700_000_000_123.0, **options)


def test_local_commands_are_answered_and_the_rest_go_to_the_engine() -> None:
    front = door(frozenset())
    assert not front.is_local(command(cmd="PUSH", queue="q", data=1))
    ping = front.answer(command(cmd="Ping", reqId="p"), 0.0)
    assert (ping.reply, ping.req_id) == (
        {"ok": True, "data": {"pong": True, "time": 1.7e12 + 123}},
        "p",
    )
    hello = front.answer(command(cmd="Hello", reqId="h"), 0.0)
    assert hello.reply["protocolVersion"] == 3
    rejected = command(cmd="PUSH", queue="q", reqId="r")
    assert isinstance(rejected, Rejected) and front.is_local(rejected)
    assert front.answer(rejected, 0.0).reply == {"ok": False, "error": "data is required"}


def test_before_auth_only_auth_is_heard() -> None:
    front = door()
    push = command(cmd="PUSH", queue="q", data=1, reqId="1")
    assert front.is_local(push)
    assert front.answer(push, 0.0).reply == {"ok": False, "error": "Not authenticated"}
    assert front.answer(command(cmd="Auth", token="s3cret"), 0.0).reply == {"ok": True}
    assert not front.is_local(push)


def test_the_third_failed_auth_closes_and_the_peer_is_slowed_down() -> None:
    throttle = AuthThrottle()
    front = door(throttle=throttle, peer="10.0.0.1")
    wrong = command(cmd="Auth", token="wrong")
    answers = [front.answer(wrong, 0.0) for _ in range(MAX_AUTH_FAILURES)]
    assert [answer.close for answer in answers] == [False, False, True]
    assert all(answer.reply == {"ok": False, "error": "Invalid token"} for answer in answers)
    assert door(throttle=throttle, peer="10.0.0.1").auth_pause(wrong, 1.0) > 0


def test_a_client_admitted_by_its_bearer_header_is_not_counted_for_a_wrong_auth() -> None:
    front = door(preauthenticated=True, throttle=AuthThrottle(), peer="10.0.0.2")
    assert not front.is_local(command(cmd="PUSH", queue="q", data=1))
    wrong = command(cmd="Auth", token="wrong")
    answers = [front.answer(wrong, 0.0) for _ in range(5)]
    assert not any(answer.close for answer in answers) and front.auth_pause(wrong, 0.0) == 0


def test_event_commands_go_to_the_engine_where_they_are_not_local() -> None:
    subscribe = command(cmd="SubscribeEvents", queue="q")
    assert door(frozenset()).answer(subscribe, 0.0).events == subscribe
    assert not door(frozenset(), events_local=False).is_local(subscribe)


def test_the_budget_counts_every_command_until_its_reply_is_written() -> None:
    budget = InFlight(limit=2)
    budget.take(2)
    assert budget.room() == 0
    budget.give()
    assert budget.room() == 1


def test_an_empty_or_blank_token_never_authenticates() -> None:
    for configured in (TOKENS, frozenset({"", "s3cret"})):
        for presented in ("", "   ", None, 0):
            assert not tokens_match(presented, configured)
            front = door(configured)
            assert front.answer(command(cmd="Auth", token=presented), 0.0).reply["ok"] is False
            assert not front.authenticated
        assert not bearer_authorized([(b"authorization", b"Bearer ")], configured)
        assert not bearer_authorized([(b"authorization", b"Bearer    ")], configured)
    assert tokens_match(" s3cret\n", TOKENS)  # trimmed, as the reference compares them
