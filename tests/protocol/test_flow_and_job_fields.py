"""PUSHF graphs and the commands of a job's later life: the exact error naming each bad field
(with the node index for a flow), the limits at their edges, and the values a client gets back
(each case pinned because `make mutation` showed it unpinned)."""

from __future__ import annotations

import math
from typing import Any

import msgspec
import pytest

from protocol.flows import FlowJob
from tests.support.decoding import decode, error_of

WRONG = {"not": "a number"}
MAX_DURATION = 4_320_000_000_000_000



def node(job_id: Any = "a", queue: Any = "q", **options: Any) -> dict[str, Any]:
    return {"id": job_id, "queue": queue, "input": {"name": "n", "data": 1, **options}}


def flow(*nodes: dict[str, Any]) -> dict[str, Any]:
    return {"cmd": "PUSHF", "jobs": list(nodes)}


# --- PUSHF -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (flow({"queue": "q", "input": {"data": 1}}), "jobs[0].id must be a non-empty string"),
        (flow(node("")), "jobs[0].id must be a non-empty string"),
        (flow(node(5)), "jobs[0].id must be a non-empty string"),
        (flow(node("a"), node("b:c")), "jobs[1].id must not contain ':'"),
        (flow(node("a"), node("b", None)), "jobs[1]: Queue name is required"),
        (flow(node("a", "bad name")), "jobs[0]: Queue name contains invalid characters"),
        (flow(node("a"), {"id": "b", "queue": "q"}), "jobs[1].input is required"),
        (flow(node("a"), node("b", priority="x")), "jobs[1]: priority must be a number"),
        (flow(node("a", removeDependencyOnFailure=True, ignoreDependencyOnFailure=True)),
         "jobs[0]: conflicting failure policies: removeDependencyOnFailure, "
         "ignoreDependencyOnFailure"),
        ({"cmd": "PUSHF", "jobs": 5}, "jobs must be an array"),
    ],
)  # fmt: skip
def test_a_bad_flow_node_is_named_with_its_index(message: dict[str, Any], error: str) -> None:
    assert error_of(message) == error


def test_a_flow_node_with_one_failure_policy_is_accepted() -> None:
    [job] = decode(flow(node("a", "other", continueParentOnFailure=True))).jobs
    assert isinstance(job, FlowJob)
    assert (job.id, job.queue, job.input.name) == ("a", "other", "n")
    assert job.input.continueParentOnFailure is True


def test_a_flow_holds_at_most_ten_thousand_jobs() -> None:
    jobs = [node(f"j{i}") for i in range(10_000)]
    # As large as that, it is read whole and its jobs are checked by the engine in slices.
    assert decode(flow(*jobs)).large is True
    assert error_of(flow(*jobs, node("last"))) == "a flow holds at most 10000 jobs"


def test_a_flow_holds_at_most_64_mib_of_data_in_all() -> None:
    # Eight jobs of exactly 8 MiB of MessagePack each (a str32 header is 5 bytes): 64 MiB in
    # all is accepted, one byte more is refused, though every job is under the 10 MB job limit.
    eighth = "x" * (8 * 1024 * 1024 - 5)
    jobs = [node(f"j{i}", data=eighth) for i in range(8)]
    assert len(decode(flow(*jobs)).jobs) == 8
    jobs[7] = node("j7", data=eighth + "x")
    assert error_of(flow(*jobs)) == "flow data too large (max 64MB in all)"


# --- the commands of a job's later life --------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"cmd": "AddLog", "id": "j"}, "message must be a string"),
        ({"cmd": "AddLog", "message": "m"}, "id is required"),
        ({"cmd": "ClearLogs", "id": "j", "keepLogs": True}, "keepLogs must be a number"),
        ({"cmd": "ExtendLock", "id": "j", "duration": math.nan},
         "duration must be a finite number"),
        ({"cmd": "ExtendLock", "id": "j", "duration": WRONG}, "duration must be a number"),
        ({"cmd": "ExtendLocks"}, "ids must be an array of strings"),
        ({"cmd": "ExtendLocks", "ids": ["a"], "durations": [math.inf]},
         "durations[0]: duration must be a finite number"),
        ({"cmd": "ChangeDelay", "id": "j", "delay": WRONG}, "delay must be a number"),
        ({"cmd": "ChangeDelay", "id": "j", "delay": math.inf}, "delay must be a finite number"),
        ({"cmd": "MoveToDelayed", "id": "j"}, "delay is required"),
        ({"cmd": "PromoteJobs"}, "Queue name is required"),
        ({"cmd": "Update", "id": "j"}, "data is required"),
        ({"cmd": "Update", "id": "j", "data": "x" * (10 * 1024 * 1024)},
         "Job data too large (max 10MB)"),
        ({"cmd": "Progress", "id": "j", "progress": math.nan}, "progress must be a finite number"),
        ({"cmd": "Progress", "id": "j", "progress": 1, "message": "m" * 4097},
         "message too long (max 4096 characters)"),
        ({"cmd": "WaitJob", "id": "j", "timeout": math.inf}, "timeout must be a finite number"),
        ({"cmd": "SetWebhookEnabled", "enabled": True}, "id is required"),
        ({"cmd": "Discard"}, "id is required"),
        ({"cmd": "CronGet"}, "name is required"),
        ({"cmd": "CronDelete", "name": 5}, "name must be a string"),
        ({"cmd": "PULL", "queue": "q", "group": {"concurrency": WRONG}},
         "group.concurrency must be a number"),
        ({"cmd": "JobHeartbeatB", "ids": ["a"], "tokens": [5]}, "tokens[] must be a string"),
        ({"cmd": "JobHeartbeatB", "ids": ["a"], "tokens": "t"}, "tokens must be an array"),
        ({"cmd": "JobHeartbeatB", "ids": "a"}, "ids must be an array of strings"),
    ],
)  # fmt: skip
def test_a_bad_job_field_is_named(message: dict[str, Any], error: str) -> None:
    assert error_of(message) == error


def test_lease_and_delay_commands_read_their_durations() -> None:
    assert decode({"cmd": "ExtendLock", "id": "j"}).duration is None  # keeps the current TTL
    assert decode({"cmd": "ExtendLock", "id": "j", "duration": "-5"}).duration == -5
    assert decode({"cmd": "ChangeDelay", "id": "j", "delay": -5}).delay == -5
    assert decode({"cmd": "MoveToDelayed", "id": "j", "delay": "2.5"}).delay == 2.5
    assert decode({"cmd": "ChangeDelay", "id": "j", "delay": 1e300}).delay == MAX_DURATION
    assert decode({"cmd": "ChangeDelay", "id": "j", "delay": -1e300}).delay == -MAX_DURATION


def test_job_commands_keep_their_values() -> None:
    log = decode({"cmd": "AddLog", "id": "j", "token": "t", "message": "m", "level": "error"})
    assert (log.id, log.token, log.message, log.level) == ("j", "t", "m", "error")
    assert decode({"cmd": "ClearLogs", "id": "j", "keepLogs": "2.5"}).keepLogs == 2
    assert decode({"cmd": "ClearLogs", "id": "j", "keepLogs": 1}).keepLogs == 1
    update = decode({"cmd": "Update", "id": "j", "data": {"k": [1, 2]}})
    assert msgspec.msgpack.decode(update.data) == {"k": [1, 2]}
    progress = decode({"cmd": "Progress", "id": "j", "progress": "42.5", "message": "m" * 4096})
    assert (progress.progress, len(progress.message)) == (42.5, 4096)
    assert decode({"cmd": "WaitJob", "id": "j", "timeout": "1.5"}).timeout == 1.5
    enabled = decode({"cmd": "SetWebhookEnabled", "id": "w", "enabled": True})
    assert (enabled.id, enabled.enabled) == ("w", True)
    promoted = decode({"cmd": "PromoteJobs", "queue": "q", "count": 0})
    assert (promoted.queue, promoted.count) == ("q", 0)


def test_a_webhook_url_of_2048_characters_is_accepted() -> None:
    url = "http://example.test/" + "a" * (2048 - len("http://example.test/"))
    hook = {"cmd": "AddWebhook", "url": url, "events": ["*"]}
    assert decode(hook).url == url
    assert error_of({**hook, "url": url + "a"}) == "Webhook URL too long (max 2048 characters)"


def pull_group(group: Any) -> dict[str, Any]:
    return {"cmd": "PULL", "queue": "q", "group": group}


@pytest.mark.parametrize(
    ("group", "error"),
    [
        ([], "group must be an object"),
        ({"concurrency": 0.5}, "group.concurrency must be at least 1"),
        ({"limit": 5}, "group.limit must be an object"),
        ({"limit": {"max": 1}}, "group.limit.duration must be a number"),
        ({"limit": {"max": 1, "duration": 0}}, "group.limit.duration must be greater than 0"),
        ({"limit": {"max": 1, "duration": -1}}, "group.limit.duration must be greater than 0"),
        ({"limit": {"max": 1, "duration": math.inf}},
         "group.limit.duration must be a finite number"),
        ({"limit": {"duration": 1000}}, "group.limit.max must be a number"),
        ({"limit": {"max": 0, "duration": 1000}}, "group.limit.max must be at least 1"),
    ],
)  # fmt: skip
def test_a_bad_pull_group_option_is_named(group: Any, error: str) -> None:
    assert error_of(pull_group(group)) == error


def test_pull_group_options_keep_whole_counts_and_the_duration() -> None:
    group = decode(pull_group({"concurrency": 2.7, "limit": {"max": "3.9", "duration": 0.5}}))
    assert group.group == {"concurrency": 2, "limit": {"max": 3, "duration": 0.5}}
    assert decode(pull_group({"concurrency": 1})).group == {"concurrency": 1}
    assert decode(pull_group({"limit": {"max": 1, "duration": 1}})).group == {
        "limit": {"max": 1, "duration": 1}
    }
    assert decode(pull_group({})).group == {}
    assert decode({"cmd": "PULL", "queue": "q"}).group is None
