"""Admin, cron, webhook and lifecycle commands: each bad field is named exactly in the error,
and the defaults a client gets when it leaves a field out (found unpinned by `make mutation`)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from protocol import decode_command
from protocol.codec import Rejected

CRON = {"cmd": "Cron", "name": "nightly", "queue": "q", "repeatEvery": 1000}
HOOK = {"cmd": "AddWebhook", "url": "http://example.test/h", "events": ["job.completed"]}
LOCKS = {"cmd": "ExtendLocks", "ids": ["a", "b"]}
WRONG = {"not": "a scalar"}  # the wrong type for every typed field


def decode(message: dict[str, Any]) -> Any:
    return decode_command(msgspec.msgpack.encode(message))


def error_of(message: dict[str, Any]) -> str:
    command = decode(message)
    assert isinstance(command, Rejected), command
    return command.error


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({**CRON, "name": 7}, "name must be a string"),
        ({**CRON, "name": ""}, "name is required"),
        ({**CRON, "schedule": 5}, "schedule must be a string"),
        ({**CRON, "repeatEvery": WRONG}, "repeatEvery must be a number"),
        ({**CRON, "repeatEvery": 0}, "repeatEvery must be greater than 0"),
        ({**CRON, "repeatEvery": -5}, "repeatEvery must be greater than 0"),
        ({**CRON, "priority": WRONG}, "priority must be a number"),
        ({**CRON, "maxLimit": WRONG}, "maxLimit must be a number"),
        ({**CRON, "maxLimit": 1.5}, "maxLimit must be an integer"),
        ({**CRON, "timezone": 3}, "timezone must be a string"),
        ({**CRON, "uniqueKey": 3}, "uniqueKey must be a string"),
        ({**CRON, "preventOverlap": "yes"}, "preventOverlap must be a boolean"),
        ({**CRON, "skipMissedOnRestart": "yes"}, "skipMissedOnRestart must be a boolean"),
        ({**CRON, "immediately": "yes"}, "immediately must be a boolean"),
        ({**HOOK, "url": 5}, "url must be a string"),
        ({**HOOK, "url": ""}, "Webhook URL is required"),
        ({**HOOK, "url": "http://x/" + "a" * 2100}, "Webhook URL too long (max 2048 characters)"),
        ({**HOOK, "events": []}, "events must be a non-empty array of strings"),
        ({**HOOK, "events": "job.completed"}, "events must be a non-empty array of strings"),
        ({**HOOK, "events": ["job.completed", 3]}, "events must be a non-empty array of strings"),
        ({**HOOK, "secret": 5}, "secret must be a string"),
        ({"cmd": "RemoveWebhook", "webhookId": 5}, "webhookId must be a string"),
        ({"cmd": "SetWebhookEnabled", "id": "w", "enabled": "no"}, "enabled must be a boolean"),
        ({"cmd": "SetWebhookEnabled", "id": 4, "enabled": True}, "id must be a string"),
        ({**LOCKS, "ids": "a"}, "ids must be an array of strings"),
        ({**LOCKS, "ids": ["a", 1]}, "ids must be an array of strings"),
        ({**LOCKS, "tokens": ["t"]}, "tokens must be an array as long as ids"),
        ({**LOCKS, "tokens": "t"}, "tokens must be an array as long as ids"),
        ({**LOCKS, "durations": [1]}, "durations must be an array as long as ids"),
        ({**LOCKS, "durations": 1}, "durations must be an array as long as ids"),
        ({**LOCKS, "durations": [1, "x"]}, "durations[1]: duration must be a number"),
        ({**LOCKS, "tokens": ["t", 5]}, "tokens[] must be a string"),
        ({"cmd": "Metrics", "type": "completed"}, "Metrics queue is required"),
        ({"cmd": "Metrics", "queue": "q", "type": "x"},
         "Metrics type must be 'completed' or 'failed'"),
        ({"cmd": "Metrics", "queue": "q", "type": "failed", "start": 1.5},
         "start must be a non-negative safe integer"),
        ({"cmd": "Metrics", "queue": "q", "type": "failed", "start": -1},
         "start must be a non-negative safe integer"),
        ({"cmd": "Metrics", "queue": "q", "type": "failed", "end": -2},
         "end must be a non-negative safe integer"),
        ({"cmd": "TrimEvents", "queue": "q"}, "maxLength must be a non-negative safe integer"),
        ({"cmd": "TrimEvents", "queue": "q", "maxLength": -1},
         "maxLength must be a non-negative safe integer"),
        ({"cmd": "RateLimit", "queue": "q"}, "limit is required"),
        ({"cmd": "ClearLogs", "id": "j", "keepLogs": "x"}, "keepLogs must be a number"),
        ({"cmd": "ClearLogs", "id": "j", "keepLogs": float("nan")}, "keepLogs must be a number"),
        ({"cmd": "WaitJob", "id": "j", "timeout": -1}, "timeout must be at least 0"),
        ({"cmd": "WaitJob", "id": "j", "timeout": WRONG}, "timeout must be a number"),
    ],
)  # fmt: skip
def test_a_bad_field_is_named_in_the_error(message: dict[str, Any], error: str) -> None:
    assert error_of(message) == error


def test_a_cron_gets_its_defaults() -> None:
    cron = decode(CRON)
    assert (cron.name, cron.queue, cron.schedule, cron.repeatEvery) == ("nightly", "q", None, 1000)
    assert cron.data == b"\xc0"  # no data: null
    assert (cron.priority, cron.maxLimit, cron.timezone, cron.uniqueKey) == (0, None, None, None)
    assert (cron.preventOverlap, cron.skipMissedOnRestart, cron.immediately) == (True, True, False)


def test_a_cron_keeps_what_it_was_given() -> None:
    cron = decode({
        **CRON, "repeatEvery": 1, "priority": 3, "maxLimit": 4, "timezone": "Europe/Rome",
        "uniqueKey": "u", "preventOverlap": False, "skipMissedOnRestart": False,
        "immediately": True, "data": {"k": 1}, "schedule": "* * * * *",
    })  # fmt: skip
    assert (cron.repeatEvery, cron.priority, cron.maxLimit) == (1, 3, 4)
    assert (cron.timezone, cron.uniqueKey, cron.schedule) == ("Europe/Rome", "u", "* * * * *")
    assert (cron.preventOverlap, cron.skipMissedOnRestart, cron.immediately) == (False, False, True)
    assert msgspec.msgpack.decode(cron.data) == {"k": 1}


def test_a_webhook_keeps_its_fields() -> None:
    hook = decode({**HOOK, "queue": "q", "secret": "s"})
    assert (hook.url, hook.events, hook.queue, hook.secret) == (
        "http://example.test/h", ["job.completed"], "q", "s",
    )  # fmt: skip
    assert decode(HOOK).queue is None


def test_extend_locks_reads_tokens_and_durations_in_order() -> None:
    command = decode({**LOCKS, "tokens": ["t1", ""], "durations": [5, None]})
    assert (command.tokens, command.durations) == (["t1", None], [5, None])
    assert (decode(LOCKS).tokens, decode(LOCKS).durations) == ([None, None], [None, None])


@pytest.mark.parametrize(
    ("keep", "kept"), [(None, 0), (-3, 0), (0, 0), (2.7, 2), (float("inf"), float("inf"))]
)
def test_clear_logs_keeps_a_whole_number_of_lines(keep: Any, kept: float) -> None:
    message = {"cmd": "ClearLogs", "id": "j"} | ({} if keep is None else {"keepLogs": keep})
    assert decode(message).keepLogs == kept


def test_metrics_without_a_queue_are_broker_wide_and_with_one_count_a_range() -> None:
    whole = decode({"cmd": "Metrics"})
    assert (whole.queue, whole.type) == (None, None)
    ranged = decode({"cmd": "Metrics", "queue": "q", "type": "failed"})
    assert (ranged.start, ranged.end) == (0, -1)
    ranged = decode({"cmd": "Metrics", "queue": "q", "type": "completed", "start": 2, "end": 5})
    assert (ranged.start, ranged.end) == (2, 5)


def test_wait_job_waits_thirty_seconds_unless_told() -> None:
    assert decode({"cmd": "WaitJob", "id": "j"}).timeout == 30_000
    assert decode({"cmd": "WaitJob", "id": "j", "timeout": 0}).timeout == 0


def test_limits_and_trims_read_whole_numbers() -> None:
    assert decode({"cmd": "RateLimit", "queue": "q", "limit": 3}).limit == 3
    assert decode({"cmd": "TrimEvents", "queue": "q", "maxLength": 0}).maxLength == 0
    assert decode({"cmd": "SetWebhookEnabled", "id": "w", "enabled": False}).enabled is False


GROUP = {"cmd": "GetGroupJobsCount", "queue": "q"}


@pytest.mark.parametrize(
    ("group", "error"),
    [
        (None, "groupId is required"),
        (5, "groupId must be a string"),
        ("", "groupId must be a non-empty string"),
        ("g" * 257, "groupId must be at most 256 characters"),
        ("a\0b", "groupId must not contain NUL characters"),
    ],
)
def test_a_bad_group_id_is_refused(group: Any, error: str) -> None:
    message = GROUP if group is None else {**GROUP, "groupId": group}
    assert error_of(message) == error


def test_a_group_id_of_256_characters_is_accepted() -> None:
    assert decode({**GROUP, "groupId": "g" * 256}).groupId == "g" * 256


@pytest.mark.parametrize("value", [0, -1, 1.5, "3", True, 2**53, None])
def test_group_limits_are_positive_safe_integers(value: Any) -> None:
    message = {"cmd": "SetGroupConcurrency", "queue": "q", "groupId": "g", "concurrency": value}
    assert error_of(message) == "concurrency must be a positive safe integer"
    limit = {"cmd": "SetGroupRateLimit", "queue": "q", "groupId": "g", "max": value, "duration": 5}
    assert error_of(limit) == "max must be a positive safe integer"
    assert error_of({**limit, "max": 5, "duration": value}) == (
        "duration must be a positive safe integer"
    )


def test_group_limits_keep_their_numbers() -> None:
    concurrency = {"cmd": "SetGroupConcurrency", "queue": "q", "groupId": "g", "concurrency": 1}
    assert decode(concurrency).concurrency == 1
    big = decode({**concurrency, "concurrency": float(2**53 - 1)}).concurrency
    assert big == 2**53 - 1 and isinstance(big, int)
    limit = decode({"cmd": "SetGroupRateLimit", "queue": "q", "groupId": "g", "max": 2,
                    "duration": 3.0})  # fmt: skip
    assert (limit.max, limit.duration) == (2, 3)


CLEAN_ERROR = "state must be one of waiting, wait, delayed, prioritized, paused, completed, failed"
LIST_ERROR = (
    "state must be one of waiting, prioritized, delayed, active, completed, failed, "
    "waiting-children, paused"
)


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"cmd": "Clean", "queue": "q", "state": "active"}, CLEAN_ERROR),
        ({"cmd": "Clean", "queue": "q", "grace": -1}, "grace must be at least 0"),
        ({"cmd": "Clean", "queue": "q", "grace": WRONG}, "grace must be a number"),
        ({"cmd": "Clean", "queue": "q", "limit": -1}, "limit must be at least 0"),
        ({"cmd": "GetJobs", "queue": "q", "state": "nope"}, LIST_ERROR),
        ({"cmd": "GetJobs", "queue": "q", "state": ["waiting", "nope"]}, LIST_ERROR),
        ({"cmd": "GetJobs", "queue": "q", "state": 5}, LIST_ERROR),
        ({"cmd": "GetJobs", "queue": "q", "limit": -1}, "limit must be at least 0"),
        ({"cmd": "GetJobs", "queue": "q", "offset": WRONG}, "offset must be a number"),
    ],
)
def test_a_bad_listing_or_cleaning_field_is_named(message: dict[str, Any], error: str) -> None:
    assert error_of(message) == error


def test_clean_and_get_jobs_fill_in_their_defaults() -> None:
    clean = decode({"cmd": "Clean", "queue": "q"})
    assert (clean.grace, clean.state, clean.limit) == (0, None, 1000)
    clean = decode({"cmd": "Clean", "queue": "q", "grace": 2.9, "limit": 0, "state": "wait"})
    assert (clean.grace, clean.state, clean.limit) == (2, "wait", 0)
    listing = decode({"cmd": "GetJobs", "queue": "q"})
    assert (listing.limit, listing.offset, listing.explicit) == (100, 0, False)
    assert listing.state == [
        "waiting", "prioritized", "delayed", "active", "completed", "failed", "waiting-children",
    ]  # fmt: skip
    listing = decode({"cmd": "GetJobs", "queue": "q", "state": "paused", "limit": 0, "offset": 3})
    assert (listing.state, listing.limit, listing.offset, listing.explicit) == (
        ["paused"], 0, 3, True,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("cmd", "error"),
    [
        (True, "Unknown command: true"),
        (3, "Unknown command: 3"),
        (1.5, "Unknown command: 1.5"),
        ({"a": 1}, "Unknown command: [object Object]"),
        ("n" * 64, "Unknown command: " + "n" * 64),
        ("n" * 65, "Unknown command: " + "n" * 64 + "..."),
    ],
)
def test_an_unknown_command_is_named_as_the_reference_prints_it(cmd: Any, error: str) -> None:
    assert error_of({"cmd": cmd, "reqId": "r"}) == error


def test_a_command_with_a_bad_string_inside_keeps_its_req_id() -> None:
    valid = msgspec.msgpack.encode({"cmd": "PUSH", "reqId": "r1", "queue": "q", "name": "MARK"})
    payload = valid.replace(msgspec.msgpack.encode("MARK"), b"\xa2\xff\xfe")  # not UTF-8
    rejected = decode_command(payload)
    assert rejected == Rejected("r1", "Invalid command format")


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"cmd": "UpdateParent", "parentId": "p"}, "childId is required"),
        ({"cmd": "UpdateParent", "childId": "c", "parentId": 4}, "parentId must be a string"),
        ({"cmd": "PUSHF", "jobs": []}, "jobs must be a non-empty array"),
        ({"cmd": "PUSHF"}, "jobs must be a non-empty array"),
        ({"cmd": "GetChildrenValues", "id": 4}, "id must be a string"),
    ],
)
def test_a_bad_flow_field_is_named(message: dict[str, Any], error: str) -> None:
    assert error_of(message) == error


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"cmd": "Promote"}, "id is required"),
        ({"cmd": "Promote", "id": 3}, "id must be a string"),
        ({"cmd": "Promote", "id": "j", "token": 3}, "token must be a string"),
        ({"cmd": "GetLogs", "id": "j", "start": WRONG}, "start must be a number"),
        ({"cmd": "GetLogs", "id": "j", "end": WRONG}, "end must be a number"),
        ({"cmd": "ChangePriority", "id": "j"}, "priority is required"),
        ({"cmd": "ChangePriority", "id": "j", "priority": WRONG}, "priority must be a number"),
        ({"cmd": "Progress", "id": "j"}, "progress is required"),
        ({"cmd": "Progress", "id": "j", "progress": WRONG}, "progress must be a number"),
        ({"cmd": "Progress", "id": "j", "progress": 5, "message": 3}, "message must be a string"),
        ({"cmd": "PromoteJobs", "queue": "q", "count": -1}, "count must be at least 0"),
        ({"cmd": "PromoteJobs", "queue": "q", "count": WRONG}, "count must be a number"),
        ({"cmd": "ChangeDelay", "id": "j"}, "delay is required"),
        ({"cmd": "AddLog", "id": "j", "message": 3}, "message must be a string"),
        ({"cmd": "AddLog", "id": "j", "message": "m", "level": "debug"},
         "level must be one of info, warn, error"),
    ],
)  # fmt: skip
def test_a_bad_job_command_field_is_named(message: dict[str, Any], error: str) -> None:
    assert error_of(message) == error


def test_job_commands_read_their_numbers() -> None:
    assert decode({"cmd": "Promote", "id": "j", "token": ""}).token is None  # no lease
    assert decode({"cmd": "Promote", "id": "j", "token": "t"}).token == "t"
    logs = decode({"cmd": "GetLogs", "id": "j", "start": 1.9, "end": -2.5})
    assert (logs.start, logs.end) == (1, -2)
    all_logs = decode({"cmd": "GetLogs", "id": "j"})
    assert (all_logs.start, all_logs.end) == (None, None)
    assert decode({"cmd": "ChangePriority", "id": "j", "priority": "7"}).priority == 7
    progress = [
        decode({"cmd": "Progress", "id": "j", "progress": p}).progress for p in (-5, 50, 150)
    ]
    assert progress == [0, 50, 100]
    assert decode({"cmd": "Progress", "id": "j", "progress": 1, "message": "m"}).message == "m"
    assert decode({"cmd": "PromoteJobs", "queue": "q"}).count is None
    assert decode({"cmd": "PromoteJobs", "queue": "q", "count": 2.8}).count == 2
    assert decode({"cmd": "AddLog", "id": "j", "message": "m"}).level == "info"
    assert decode({"cmd": "AddLog", "id": "j", "message": "m", "level": "warn"}).level == "warn"
