"""Every validation rule of protocol/values.py, jobspec.py and commands.py, with its exact text.

The seed (shared/seed/000_...) is the authority: numeric strings count as their number, every
numeric option must be finite, timeout/ttl >= 0, negative delay means "ready now", durations
are clamped at 4.32e15 ms, maxAttempts <= 1 runs once / fractions round up / Infinity is
2,147,483,647, backoff objects, timestamp within +-4.32e15, positive repeat.every, grouped
priority 0..2,097,151, positive safe-integer groupMaxSize, queue names, 10 MB data.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from protocol import Rejected, decode_command, values

# Texts the seed does not word: the reference's.
EVERY_POSITIVE = "repeat.every must be a positive finite number"
GROUP_MAX_SIZE = "group.maxSize must be a positive safe integer"
BAD_JOB_NAME = "Job name must be a non-empty string of at most 256 characters"

encode = msgspec.msgpack.encode
UNDEFINED = msgspec.msgpack.Ext(0, b"\x00")  # msgpackr's JS `undefined`
NAN, INF = math.nan, math.inf
MAX_DURATION = 4_320_000_000_000_000
MAX_INT32 = 2_147_483_647
MAX_SAFE_INTEGER = 2**53 - 1
MIB = 1024 * 1024


def decode(request: Any) -> Any:
    return decode_command(encode(request))


def rejected(request: Any) -> str:
    result = decode(request)
    assert isinstance(result, Rejected), f"accepted: {result!r}"
    return result.error


def accepted(request: Any) -> Any:
    result = decode(request)
    assert not isinstance(result, Rejected), result
    return result


def push(**fields: Any) -> dict[str, Any]:
    return {"cmd": "PUSH", "queue": "q", "name": "job", "data": {"k": 1}, **fields}


def pushb(*jobs: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"cmd": "PUSHB", "queue": "q", "jobs": list(jobs), **fields}


def item(**fields: Any) -> dict[str, Any]:
    return {"name": "job", "data": 1, **fields}


def pull(**fields: Any) -> dict[str, Any]:
    return {"cmd": "PULL", "queue": "q", **fields}


def pullb(**fields: Any) -> dict[str, Any]:
    return {"cmd": "PULLB", "queue": "q", "count": 1, **fields}


def with_path(path: str, value: Any) -> dict[str, Any]:
    """A valid PUSH with `path` (`delay`, `backoff.maxDelay`, ...) set to `value`."""
    head, _, tail = path.partition(".")
    return push(**{head: {tail: value} if tail else value})


# --- every numeric PUSH option: type and finiteness ------------------------------------------

NUMERIC_PATHS: dict[str, Callable[[Any], Any]] = {
    "priority": lambda c: c.priority,
    "delay": lambda c: c.delay,
    "timeout": lambda c: c.timeout,
    "ttl": lambda c: c.ttl,
    "backoff": lambda c: c.backoff,
    "backoff.delay": lambda c: (c.backoff, c.backoffConfig["delay"]),
    "backoff.maxDelay": lambda c: c.backoffConfig["maxDelay"],
    "stallTimeout": lambda c: c.stallTimeout,
    "stackTraceLimit": lambda c: c.stackTraceLimit,
    "keepLogs": lambda c: c.keepLogs,
    "sizeLimit": lambda c: c.sizeLimit,
    "debounceTtl": lambda c: c.debounceTtl,
    "timestamp": lambda c: c.timestamp,
    "groupMaxSize": lambda c: c.groupMaxSize,
    "dedup.ttl": lambda c: c.dedup["ttl"],
    "repeat.every": lambda c: c.repeat["every"],
    "repeat.limit": lambda c: c.repeat["limit"],
    "repeat.count": lambda c: c.repeat["count"],
    "repeat.startDate": lambda c: c.repeat["startDate"],
    "repeat.endDate": lambda c: c.repeat["endDate"],
}
NOT_NUMBERS = [True, False, "abc", "", "1,5", "3 4", {}, {"n": 1}, [], [1]]
NOT_FINITE = [NAN, INF, -INF, "Infinity", "-Infinity"]


NOT_NUMBER_CASES = [
    pytest.param(path, value, id=f"{path}-{value!r}")
    for path in [*NUMERIC_PATHS, "maxAttempts"]
    for value in NOT_NUMBERS
    if not (path == "backoff" and isinstance(value, dict))  # backoff's object form
]


@pytest.mark.parametrize(("path", "value"), NOT_NUMBER_CASES)
def test_non_numbers_must_be_a_number(path: str, value: Any) -> None:
    assert rejected(with_path(path, value)) == f"{path} must be a number"


@pytest.mark.parametrize("value", NOT_FINITE, ids=repr)
@pytest.mark.parametrize("path", NUMERIC_PATHS)
def test_nan_and_infinities_must_be_a_finite_number(path: str, value: Any) -> None:
    assert rejected(with_path(path, value)) == f"{path} must be a finite number"


@pytest.mark.parametrize("path", NUMERIC_PATHS)
def test_numeric_string_counts_as_its_number(path: str) -> None:
    value = NUMERIC_PATHS[path](accepted(with_path(path, "3")))
    assert value == ((3, 3) if path == "backoff.delay" else 3)


@pytest.mark.parametrize("path", [p for p in NUMERIC_PATHS if p != "groupMaxSize"])
def test_padded_fractional_numeric_string_counts(path: str) -> None:
    value = NUMERIC_PATHS[path](accepted(with_path(path, " 2.5 ")))
    assert value == ((2.5, 2.5) if path == "backoff.delay" else 2.5)


@pytest.mark.parametrize("path", [p for p in NUMERIC_PATHS if p != "groupMaxSize"])
def test_fractions_are_kept(path: str) -> None:
    value = NUMERIC_PATHS[path](accepted(with_path(path, 1.25)))
    assert value == ((1.25, 1.25) if path == "backoff.delay" else 1.25)


@pytest.mark.parametrize("path", ["priority", "delay", "timeout", "ttl", "backoff", "dedup.ttl"])
def test_nil_is_the_same_as_absent(path: str) -> None:
    # `optionsGiven` only says whether the fast path was taken; the values must agree.
    def normalised(message: dict) -> object:
        return msgspec.structs.replace(accepted(message), optionsGiven=None)

    assert normalised(with_path(path, None)) == normalised(push())
    assert normalised(with_path(path, UNDEFINED)) == normalised(push())


# --- a table of individual rules: request -> exact error -----------------------------------

LONG_NAME = "q" * 257
REJECTIONS = [
    # timeout / ttl cannot be negative
    pytest.param(push(timeout=-1), "timeout must be at least 0", id="timeout-negative"),
    pytest.param(push(timeout=-0.5), "timeout must be at least 0", id="timeout-negative-fraction"),
    pytest.param(push(timeout="-1"), "timeout must be at least 0", id="timeout-negative-string"),
    pytest.param(push(ttl=-1), "ttl must be at least 0", id="ttl-negative"),
    pytest.param(push(ttl=-1e20), "ttl must be at least 0", id="ttl-huge-negative"),
    pytest.param(push(delay=NAN), "delay must be a finite number", id="delay-nan"),
    # maxAttempts
    pytest.param(push(maxAttempts=NAN), "maxAttempts must be a finite number", id="attempts-nan"),
    # backoff, number form and object form
    pytest.param(push(backoff=-1), "backoff must be at least 0", id="backoff-negative"),
    pytest.param(push(backoff="-5"), "backoff must be at least 0", id="backoff-negative-string"),
    pytest.param(
        push(backoff={"type": "fixed", "delay": -1}),
        "backoff.delay must be at least 0",
        id="backoff-delay-negative",
    ),
    pytest.param(
        push(backoff={"delay": -0.5}), "backoff.delay must be at least 0", id="backoff-delay-neg"
    ),
    pytest.param(
        push(backoff={"maxDelay": -1}),
        "backoff.maxDelay must be at least 0",
        id="backoff-maxdelay-negative",
    ),
    pytest.param(
        push(backoff={"maxDelay": 86_400_001}),
        "backoff.maxDelay must be at most 86400000",
        id="backoff-maxdelay-above-one-day",
    ),
    pytest.param(
        push(backoff={"maxDelay": 1e20}),
        "backoff.maxDelay must be at most 86400000",
        id="backoff-maxdelay-huge",
    ),
    # timestamp within +-4.32e15
    pytest.param(
        push(timestamp=MAX_DURATION + 1),
        "timestamp must be between -4320000000000000 and 4320000000000000",
        id="timestamp-above",
    ),
    pytest.param(
        push(timestamp=float(MAX_DURATION + 2)),
        "timestamp must be between -4320000000000000 and 4320000000000000",
        id="timestamp-above-float",
    ),
    pytest.param(
        push(timestamp=-MAX_DURATION - 1),
        "timestamp must be between -4320000000000000 and 4320000000000000",
        id="timestamp-below",
    ),
    pytest.param(
        push(timestamp=1e300),
        "timestamp must be between -4320000000000000 and 4320000000000000",
        id="timestamp-1e300",
    ),
    # repeat.every must be positive
    pytest.param(push(repeat={"every": 0}), EVERY_POSITIVE, id="every-0"),
    pytest.param(push(repeat={"every": -1}), EVERY_POSITIVE, id="every-neg"),
    pytest.param(
        push(repeat={"every": "-0.5"}), EVERY_POSITIVE, id="every-neg-str"
    ),
    # priority with groupId: integer 0..2097151
    pytest.param(push(groupId="g", priority=-1), "priority must be at least 0", id="gprio-neg"),
    pytest.param(
        push(groupId="g", priority=2_097_152), "priority must be at most 2097151", id="gprio-above"
    ),
    pytest.param(
        push(groupId="g", priority=2**40), "priority must be at most 2097151", id="gprio-huge"
    ),
    pytest.param(
        push(groupId="g", priority=1.5),
        "priority must be an integer when groupId is set",
        id="gprio-fraction",
    ),
    pytest.param(
        push(groupId="g", priority=" 1.5 "),
        "priority must be an integer when groupId is set",
        id="gprio-fraction-string",
    ),
    pytest.param(push(groupId="g", priority=NAN), "priority must be a finite number", id="gp-nan"),
    pytest.param(push(groupId="g", priority=True), "priority must be a number", id="gprio-bool"),
    pytest.param(push(groupId=5), "groupId must be a string", id="groupid-not-string"),
    # groupMaxSize: positive safe integer
    pytest.param(
        push(groupMaxSize=0), GROUP_MAX_SIZE, id="gmax-zero"
    ),
    pytest.param(
        push(groupMaxSize=-3), GROUP_MAX_SIZE, id="gmax-negative"
    ),
    pytest.param(
        push(groupMaxSize=2**53), GROUP_MAX_SIZE, id="gmax-unsafe"
    ),
    pytest.param(push(groupMaxSize=1.5), "groupMaxSize must be an integer", id="gmax-fraction"),
    pytest.param(push(groupMaxSize="2.5"), "groupMaxSize must be an integer", id="gmax-frac-str"),
    # queue names
    pytest.param(push(queue=""), "Queue name is required", id="queue-empty"),
    pytest.param(push(queue=None), "Queue name is required", id="queue-nil"),
    pytest.param(push(queue=UNDEFINED), "Queue name is required", id="queue-undefined"),
    pytest.param(
        {"cmd": "PUSH", "name": "n", "data": 1}, "Queue name is required", id="queue-missing"
    ),
    pytest.param(push(queue=LONG_NAME), "Queue name too long (max 256 characters)", id="queue-257"),
    pytest.param(
        push(queue="é" * 257), "Queue name too long (max 256 characters)", id="queue-257-bad-chars"
    ),
    pytest.param(push(queue="a b"), "Queue name contains invalid characters", id="queue-space"),
    pytest.param(push(queue="a/b"), "Queue name contains invalid characters", id="queue-slash"),
    pytest.param(push(queue="é"), "Queue name contains invalid characters", id="queue-accent"),
    pytest.param(push(queue="q\n"), "Queue name contains invalid characters", id="queue-newline"),
    pytest.param(push(queue="q*"), "Queue name contains invalid characters", id="queue-star"),
    pytest.param(push(queue=" q"), "Queue name contains invalid characters", id="queue-lead-space"),
    pytest.param(push(queue=5), "Queue name must be a string", id="queue-number"),
    pytest.param(push(queue=["q"]), "Queue name must be a string", id="queue-list"),
    pytest.param(push(queue={"q": 1}), "Queue name must be a string", id="queue-map"),
    pytest.param(pull(queue="a b"), "Queue name contains invalid characters", id="pull-queue"),
    pytest.param(pullb(queue=LONG_NAME), "Queue name too long (max 256 characters)", id="pullb-q"),
    pytest.param(pushb(item(), queue=""), "Queue name is required", id="pushb-queue"),
    pytest.param(
        {"cmd": "GetJobCounts", "queue": "x?"},
        "Queue name contains invalid characters",
        id="getjobcounts-queue",
    ),
    pytest.param({"cmd": "Count"}, "Queue name is required", id="count-queue"),
    # data
    pytest.param({"cmd": "PUSH", "queue": "q", "name": "n"}, "data is required", id="data-missing"),
    pytest.param(push(data=UNDEFINED), "data is required", id="data-undefined"),
    pytest.param(
        push(data="x" * (10 * MIB + 1)), "Job data too large (max 10MB)", id="data-over-10mb"
    ),
    pytest.param(
        push(data={"blob": b"\x00" * (11 * MIB)}), "Job data too large (max 10MB)", id="data-11mb"
    ),
    # strings, arrays and booleans of a job
    pytest.param(push(name=5), BAD_JOB_NAME, id="name-number"),
    pytest.param(push(uniqueKey=5), "uniqueKey must be a string", id="uniquekey"),
    pytest.param(push(parentId=5), "parentId must be a string", id="parentid"),
    pytest.param(push(debounceId=[]), "debounceId must be a string", id="debounceid"),
    pytest.param(push(jobId=5), "jobId must be a string", id="jobid"),
    pytest.param(push(dependsOn="a"), "dependsOn must be an array of strings", id="dependson-str"),
    pytest.param(push(dependsOn=["a", 1]), "dependsOn must be an array of strings", id="deps-int"),
    pytest.param(push(tags=[None]), "tags must be an array of strings", id="tags"),
    pytest.param(push(childrenIds={}), "childrenIds must be an array of strings", id="children"),
    pytest.param(push(dedup="x"), "dedup must be an object", id="dedup-not-object"),
    pytest.param(push(dedup={"extend": "y"}), "dedup.extend must be a boolean", id="dedup-extend"),
    pytest.param(push(dedup={"replace": "y"}), "dedup.replace must be a boolean", id="dedup-repl"),
    pytest.param(push(repeat="x"), "repeat must be an object", id="repeat-not-object"),
    pytest.param(push(repeat={"pattern": 5}), "repeat.pattern must be a string", id="pattern"),
    pytest.param(push(repeat={"tz": 5}), "repeat.tz must be a string", id="tz"),
    pytest.param(
        push(repeat={"immediately": "y"}), "repeat.immediately must be a boolean", id="immediately"
    ),
    # PUSHB: the batch and the index prefix
    pytest.param(pushb(item(data=UNDEFINED)), "jobs[0]: data is required", id="pushb-0-data"),
    pytest.param({"cmd": "PUSHB", "queue": "q"}, "jobs must be an array", id="pushb-no-jobs"),
    pytest.param(pushb(jobs=5), "jobs must be an array", id="pushb-jobs-number"),
    pytest.param(pushb(jobs={"a": 1}), "jobs must be an array", id="pushb-jobs-map"),
    pytest.param(
        pushb(item(), item(delay=NAN)), "jobs[1]: delay must be a finite number", id="pushb-1"
    ),
    pytest.param(
        pushb(item(), item(), item(timeout=-1)),
        "jobs[2]: timeout must be at least 0",
        id="pushb-2",
    ),
    pytest.param(
        pushb(item(), item(), item(), item(data="x" * (10 * MIB + 1))),
        "jobs[3]: Job data too large (max 10MB)",
        id="pushb-3-data",
    ),
    pytest.param(
        pushb(item(), item(ttl=-1), item(ttl=-2)),
        "jobs[1]: ttl must be at least 0",
        id="pushb-first-bad-item-wins",
    ),
    pytest.param(
        pushb(*[item()] * 10, item(groupId="g", priority=-1)),
        "jobs[10]: priority must be at least 0",
        id="pushb-10",
    ),
    pytest.param(pushb(item(customId=5)), "jobs[0]: customId must be a string", id="customid"),
    pytest.param(pushb(item(queue=5, name=7)), f"jobs[0]: {BAD_JOB_NAME}", id="pushb-name"),
    pytest.param(
        pushb(item(backoff={"maxDelay": -1})),
        "jobs[0]: backoff.maxDelay must be at least 0",
        id="pushb-backoff",
    ),
    pytest.param(
        pushb(item(maxAttempts=NAN)),
        "jobs[0]: maxAttempts must be a finite number",
        id="pushb-attempts-nan",
    ),
    pytest.param(pushb(item(lifo="y")), "jobs[0]: lifo must be a boolean", id="pushb-lifo"),
    # PULL / PULLB long-poll timeout 0..60000
    pytest.param(pull(timeout=-1), "timeout must be at least 0", id="pull-timeout-negative"),
    pytest.param(pull(timeout=60_001), "timeout must be at most 60000", id="pull-timeout-above"),
    pytest.param(pull(timeout=60_000.5), "timeout must be at most 60000", id="pull-timeout-frac"),
    pytest.param(pull(timeout=NAN), "timeout must be a finite number", id="pull-timeout-nan"),
    pytest.param(pull(timeout=INF), "timeout must be a finite number", id="pull-timeout-inf"),
    pytest.param(pull(timeout="abc"), "timeout must be a number", id="pull-timeout-text"),
    pytest.param(pull(timeout=True), "timeout must be a number", id="pull-timeout-bool"),
    pytest.param(pullb(timeout=-1), "timeout must be at least 0", id="pullb-timeout-negative"),
    pytest.param(pullb(timeout=60_001), "timeout must be at most 60000", id="pullb-timeout-above"),
    # lockTtl: any finite number
    pytest.param(pull(lockTtl="abc"), "lockTtl must be a number", id="lockttl-text"),
    pytest.param(pull(lockTtl=True), "lockTtl must be a number", id="lockttl-bool"),
    pytest.param(pull(lockTtl={}), "lockTtl must be a number", id="lockttl-map"),
    pytest.param(pull(lockTtl=[1]), "lockTtl must be a number", id="lockttl-list"),
    pytest.param(pull(lockTtl=NAN), "lockTtl must be a finite number", id="lockttl-nan"),
    pytest.param(pull(lockTtl=INF), "lockTtl must be a finite number", id="lockttl-inf"),
    pytest.param(pull(lockTtl=-INF), "lockTtl must be a finite number", id="lockttl-neg-inf"),
    pytest.param(pullb(lockTtl=NAN), "lockTtl must be a finite number", id="pullb-lockttl-nan"),
    pytest.param(pullb(lockTtl="x"), "lockTtl must be a number", id="pullb-lockttl-text"),
    pytest.param(pull(owner=5), "owner must be a string", id="pull-owner"),
    pytest.param(pull(detach="y"), "detach must be a boolean", id="pull-detach"),
    # PULLB count 1..1000, required
    pytest.param({"cmd": "PULLB", "queue": "q"}, "count is required", id="count-missing"),
    pytest.param(pullb(count=None), "count is required", id="count-nil"),
    pytest.param(pullb(count=UNDEFINED), "count is required", id="count-undefined"),
    pytest.param(pullb(count=0), "count must be at least 1", id="count-zero"),
    pytest.param(pullb(count=-5), "count must be at least 1", id="count-negative"),
    pytest.param(pullb(count=0.5), "count must be at least 1", id="count-half"),
    pytest.param(pullb(count=1001), "count must be at most 1000", id="count-1001"),
    pytest.param(pullb(count=1e9), "count must be at most 1000", id="count-huge"),
    pytest.param(pullb(count=NAN), "count must be a finite number", id="count-nan"),
    pytest.param(pullb(count=INF), "count must be a finite number", id="count-inf"),
    pytest.param(pullb(count="abc"), "count must be a number", id="count-text"),
    pytest.param(pullb(count=True), "count must be a number", id="count-bool"),
    # ACK
    pytest.param({"cmd": "ACK"}, "id is required", id="ack-id-missing"),
    pytest.param({"cmd": "ACK", "id": ""}, "id is required", id="ack-id-empty"),
    pytest.param({"cmd": "ACK", "id": UNDEFINED}, "id is required", id="ack-id-undefined"),
    pytest.param({"cmd": "ACK", "id": 5}, "id must be a string", id="ack-id-number"),
    pytest.param({"cmd": "ACK", "id": "j", "token": 5}, "token must be a string", id="ack-token"),
    pytest.param(
        {"cmd": "ACK", "id": "j", "removeOnComplete": "y"},
        "removeOnComplete must be a boolean",
        id="ack-remove",
    ),
    # ACKB
    pytest.param({"cmd": "ACKB"}, "ids must be an array of strings", id="ackb-ids-missing"),
    pytest.param({"cmd": "ACKB", "ids": "a"}, "ids must be an array of strings", id="ackb-ids-s"),
    pytest.param({"cmd": "ACKB", "ids": ["a", 1]}, "ids must be an array of strings", id="ackb-i"),
    pytest.param(
        {"cmd": "ACKB", "ids": ["a", "b"], "results": [1]},
        "ACKB results length must match ids length",
        id="ackb-results-short",
    ),
    pytest.param(
        {"cmd": "ACKB", "ids": ["a"], "results": [1, 2]},
        "ACKB results length must match ids length",
        id="ackb-results-long",
    ),
    pytest.param(
        {"cmd": "ACKB", "ids": ["a"], "results": []},
        "ACKB results length must match ids length",
        id="ackb-results-empty",
    ),
    pytest.param(
        {"cmd": "ACKB", "ids": ["a"], "results": 5}, "results must be an array", id="ackb-res-num"
    ),
    pytest.param(
        {"cmd": "ACKB", "ids": ["a", "b"], "tokens": ["t"]},
        "ACKB tokens length must match ids length",
        id="ackb-tokens-short",
    ),
    pytest.param(
        {"cmd": "ACKB", "ids": ["a"], "tokens": ["t", "u"]},
        "ACKB tokens length must match ids length",
        id="ackb-tokens-long",
    ),
    pytest.param(
        {"cmd": "ACKB", "ids": ["a"], "tokens": []},
        "ACKB tokens length must match ids length",
        id="ackb-tokens-empty",
    ),
    pytest.param(
        {"cmd": "ACKB", "ids": ["a"], "tokens": [1]}, "tokens[] must be a string", id="ackb-tok-int"
    ),
    # FAIL
    pytest.param({"cmd": "FAIL"}, "id is required", id="fail-id-missing"),
    pytest.param({"cmd": "FAIL", "id": 5}, "id must be a string", id="fail-id-number"),
    pytest.param(
        {"cmd": "FAIL", "id": "j", "stack": "at f"},
        "stack must be an array of strings",
        id="fail-stack-string",
    ),
    pytest.param(
        {"cmd": "FAIL", "id": "j", "stack": {"0": "at f"}},
        "stack must be an array of strings",
        id="fail-stack-map",
    ),
    pytest.param(
        {"cmd": "FAIL", "id": "j", "stack": 5}, "stack must be an array of strings", id="fail-stk-n"
    ),
    pytest.param(
        {"cmd": "FAIL", "id": "j", "unrecoverable": "y"},
        "unrecoverable must be a boolean",
        id="fail-unrecoverable",
    ),
    pytest.param(
        {"cmd": "FAIL", "id": "j", "removeOnFail": "y"},
        "removeOnFail must be a boolean",
        id="fail-remove",
    ),
    pytest.param({"cmd": "FAIL", "id": "j", "token": 5}, "token must be a string", id="fail-token"),
    # other commands in commands.py
    pytest.param({"cmd": "GetJob"}, "id is required", id="getjob-id"),
    pytest.param({"cmd": "GetState", "id": ""}, "id is required", id="getstate-id"),
    pytest.param({"cmd": "GetResult", "id": 5}, "id must be a string", id="getresult-id"),
    pytest.param({"cmd": "JobHeartbeat"}, "id is required", id="jobheartbeat-id"),
    pytest.param(
        {"cmd": "JobHeartbeat", "id": "j", "token": 5}, "token must be a string", id="jhb-token"
    ),
    pytest.param(
        {"cmd": "JobHeartbeat", "id": "j", "duration": NAN},
        "duration must be a finite number",
        id="jhb-duration-nan",
    ),
    pytest.param(
        {"cmd": "JobHeartbeat", "id": "j", "duration": "abc"},
        "duration must be a number",
        id="jhb-duration-text",
    ),
    pytest.param({"cmd": "JobHeartbeatB"}, "ids must be an array of strings", id="jhbb-ids"),
    pytest.param(
        {"cmd": "JobHeartbeatB", "ids": ["a"], "tokens": "t"},
        "tokens must be an array",
        id="jhbb-tokens",
    ),
    pytest.param({"cmd": "RegisterWorker"}, "name is required", id="register-name"),
    pytest.param(
        {"cmd": "RegisterWorker", "name": "w", "queues": "q"},
        "queues must be an array of strings",
        id="register-queues",
    ),
    pytest.param(
        {"cmd": "RegisterWorker", "name": "w", "concurrency": NAN},
        "concurrency must be a finite number",
        id="register-concurrency",
    ),
    pytest.param(
        {"cmd": "RegisterWorker", "name": "w", "workerId": 5},
        "workerId must be a string",
        id="register-workerid",
    ),
    pytest.param(
        {"cmd": "RegisterWorker", "name": "w", "hostname": 5},
        "hostname must be a string",
        id="register-hostname",
    ),
    pytest.param(
        {"cmd": "RegisterWorker", "name": "w", "pid": "x"}, "pid must be a number", id="reg-pid"
    ),
    pytest.param({"cmd": "UnregisterWorker"}, "workerId is required", id="unregister"),
    pytest.param({"cmd": "Heartbeat"}, "id is required", id="heartbeat-id"),
    pytest.param(
        {"cmd": "Heartbeat", "id": "w", "activeJobs": "x"},
        "activeJobs must be a number",
        id="heartbeat-active",
    ),
    pytest.param(
        {"cmd": "Heartbeat", "id": "w", "processed": INF},
        "processed must be a finite number",
        id="heartbeat-processed",
    ),
    pytest.param(
        {"cmd": "Heartbeat", "id": "w", "failed": NAN},
        "failed must be a finite number",
        id="heartbeat-failed",
    ),
]

FLAGS = [
    "lifo",
    "removeOnComplete",
    "removeOnFail",
    "durable",
    "failParentOnFailure",
    "removeDependencyOnFailure",
    "ignoreDependencyOnFailure",
    "continueParentOnFailure",
]


@pytest.mark.parametrize(("request_", "error"), REJECTIONS)
def test_rejection_text(request_: dict[str, Any], error: str) -> None:
    assert rejected(request_) == error


@pytest.mark.parametrize("flag", FLAGS)
def test_job_flags_must_be_booleans(flag: str) -> None:
    assert rejected(push(**{flag: "yes"})) == f"{flag} must be a boolean"
    assert getattr(accepted(push(**{flag: True})), flag) is True
    assert getattr(accepted(push(**{flag: False})), flag) is False
    # Absent (or nil) is false; the struct may keep it as None or False.
    assert getattr(accepted(push(**{flag: None})), flag) in (None, False)
    assert getattr(accepted(push()), flag) in (None, False)


def test_pushb_item_that_is_not_a_map_names_its_index() -> None:
    assert rejected(pushb(item(), 5)).startswith("jobs[1]: ")


# --- a table of accepted values: request -> normalised value ----------------------------------

ACCEPTED = [
    # numeric strings count
    pytest.param(push(priority="3"), "priority", 3, id="priority-string"),
    pytest.param(push(priority=" 2.5 "), "priority", 2.5, id="priority-padded-string"),
    pytest.param(push(priority="+4"), "priority", 4, id="priority-plus-string"),
    pytest.param(push(delay=" -2.5 "), "delay", -2.5, id="delay-negative-string"),
    pytest.param(push(timeout="50"), "timeout", 50, id="timeout-string"),
    # ungrouped priority: any finite number
    pytest.param(push(priority=-1e9), "priority", -1e9, id="priority-negative"),
    pytest.param(push(priority=2_097_152), "priority", 2_097_152, id="priority-above-group-max"),
    pytest.param(push(priority=1e300), "priority", 1e300, id="priority-huge"),
    # grouped priority: integer 0..2097151
    pytest.param(push(groupId="g", priority=0), "priority", 0, id="gprio-0"),
    pytest.param(push(groupId="g", priority=2_097_151), "priority", 2_097_151, id="gprio-max"),
    pytest.param(push(groupId="g", priority="7"), "priority", 7, id="gprio-string"),
    pytest.param(push(groupId="g", priority=7.0), "priority", 7, id="gprio-float"),
    pytest.param(push(groupId="g"), "priority", 0, id="gprio-default"),
    # timeout / ttl: 0 allowed
    pytest.param(push(timeout=0), "timeout", 0, id="timeout-0"),
    pytest.param(push(ttl=0), "ttl", 0, id="ttl-0"),
    pytest.param(push(ttl=0.5), "ttl", 0.5, id="ttl-fraction"),
    # negative delay: ready at once, the delay stays negative
    pytest.param(push(delay=-5), "delay", -5, id="delay-negative"),
    pytest.param(push(delay=-0.5), "delay", -0.5, id="delay-negative-fraction"),
    pytest.param(push(delay="-1000"), "delay", -1000, id="delay-negative-numeric-string"),
    pytest.param(push(delay=1.5), "delay", 1.5, id="delay-fraction"),
    pytest.param(push(), "delay", 0, id="delay-default"),
    # durations clamped at 4.32e15
    pytest.param(push(delay=1e20), "delay", MAX_DURATION, id="delay-clamped"),
    pytest.param(push(delay=-1e20), "delay", -MAX_DURATION, id="delay-clamped-negative"),
    pytest.param(push(delay=MAX_DURATION), "delay", MAX_DURATION, id="delay-at-clamp"),
    pytest.param(push(delay=MAX_DURATION + 2), "delay", MAX_DURATION, id="delay-just-above"),
    pytest.param(push(delay="1e20"), "delay", MAX_DURATION, id="delay-clamped-string"),
    pytest.param(push(ttl=1e20), "ttl", MAX_DURATION, id="ttl-clamped"),
    pytest.param(push(timeout=1e300), "timeout", MAX_DURATION, id="timeout-clamped"),
    pytest.param(push(debounceTtl=1e20), "debounceTtl", MAX_DURATION, id="debouncettl-clamped"),
    # maxAttempts
    pytest.param(push(), "maxAttempts", 3, id="attempts-default"),
    pytest.param(push(maxAttempts=1), "maxAttempts", 1, id="attempts-1"),
    pytest.param(push(maxAttempts=0), "maxAttempts", 1, id="attempts-0"),
    pytest.param(push(maxAttempts=-5), "maxAttempts", 1, id="attempts-negative"),
    pytest.param(push(maxAttempts=0.5), "maxAttempts", 1, id="attempts-half"),
    pytest.param(push(maxAttempts=-INF), "maxAttempts", 1, id="attempts-neg-infinity"),
    pytest.param(push(maxAttempts=1.5), "maxAttempts", 2, id="attempts-1.5"),
    pytest.param(push(maxAttempts=2.5), "maxAttempts", 3, id="attempts-2.5"),
    pytest.param(push(maxAttempts=2.0001), "maxAttempts", 3, id="attempts-2.0001"),
    pytest.param(push(maxAttempts="2.5"), "maxAttempts", 3, id="attempts-string-fraction"),
    pytest.param(push(maxAttempts="7"), "maxAttempts", 7, id="attempts-string"),
    pytest.param(push(maxAttempts=10), "maxAttempts", 10, id="attempts-10"),
    pytest.param(push(maxAttempts="Infinity"), "maxAttempts", MAX_INT32, id="attempts-Infinity"),
    pytest.param(push(maxAttempts=INF), "maxAttempts", MAX_INT32, id="attempts-inf"),
    pytest.param(push(maxAttempts=1e300), "maxAttempts", MAX_INT32, id="attempts-1e300"),
    pytest.param(push(maxAttempts=2**40), "maxAttempts", MAX_INT32, id="attempts-2**40"),
    pytest.param(push(maxAttempts=MAX_INT32), "maxAttempts", MAX_INT32, id="attempts-max"),
    pytest.param(push(maxAttempts=MAX_INT32 - 0.5), "maxAttempts", MAX_INT32, id="attempts-max-"),
    pytest.param(push(maxAttempts=MAX_INT32 - 1), "maxAttempts", MAX_INT32 - 1, id="attempts-m1"),
    # backoff, number form
    pytest.param(push(), "backoff", 1000, id="backoff-default"),
    pytest.param(push(backoff=0), "backoff", 0, id="backoff-0"),
    pytest.param(push(backoff="500"), "backoff", 500, id="backoff-string"),
    pytest.param(push(backoff=250.5), "backoff", 250.5, id="backoff-fraction"),
    pytest.param(push(backoff=500), "backoffConfig", None, id="backoff-number-no-config"),
    # backoff, object form
    pytest.param(
        push(backoff={"type": "fixed", "delay": 500}),
        "backoffConfig",
        {"type": "fixed", "delay": 500},
        id="backoff-fixed",
    ),
    pytest.param(push(backoff={"type": "fixed", "delay": 500}), "backoff", 500, id="backoff-base"),
    pytest.param(
        push(backoff={"type": "exponential", "delay": 100}),
        "backoffConfig",
        {"type": "exponential", "delay": 100},
        id="backoff-exponential",
    ),
    pytest.param(
        push(backoff={"type": "linear", "delay": 100}),
        "backoffConfig",
        {"type": "exponential", "delay": 100},
        id="backoff-other-type-is-exponential",
    ),
    pytest.param(
        push(backoff={"type": "custom"}),
        "backoffConfig",
        {"type": "exponential", "delay": 1000},
        id="backoff-custom-type",
    ),
    pytest.param(
        push(backoff={"type": 5}),
        "backoffConfig",
        {"type": "exponential", "delay": 1000},
        id="backoff-non-string-type",
    ),
    pytest.param(
        push(backoff={}),
        "backoffConfig",
        {"type": "exponential", "delay": 1000},
        id="backoff-empty-object",
    ),
    pytest.param(push(backoff={"type": "fixed"}), "backoff", 1000, id="backoff-missing-delay"),
    pytest.param(
        push(backoff={"type": "fixed", "delay": None}), "backoff", 1000, id="backoff-nil-delay"
    ),
    pytest.param(push(backoff={"delay": 0}), "backoff", 0, id="backoff-delay-0"),
    pytest.param(push(backoff={"delay": "250"}), "backoff", 250, id="backoff-delay-string"),
    pytest.param(
        push(backoff={"type": "fixed", "delay": 10, "maxDelay": 5000}),
        "backoffConfig",
        {"type": "fixed", "delay": 10, "maxDelay": 5000},
        id="backoff-maxdelay",
    ),
    pytest.param(
        push(backoff={"maxDelay": 0}),
        "backoffConfig",
        {"type": "exponential", "delay": 1000, "maxDelay": 0},
        id="backoff-maxdelay-0",
    ),
    pytest.param(
        push(backoff={"maxDelay": 86_400_000}),
        "backoffConfig",
        {"type": "exponential", "delay": 1000, "maxDelay": 86_400_000},
        id="backoff-maxdelay-one-day",
    ),
    pytest.param(
        push(backoff={"maxDelay": "60000"}),
        "backoffConfig",
        {"type": "exponential", "delay": 1000, "maxDelay": 60000},
        id="backoff-maxdelay-string",
    ),
    pytest.param(
        push(backoff={"type": "fixed", "delay": 10, "maxDelay": None}),
        "backoffConfig",
        {"type": "fixed", "delay": 10},
        id="backoff-maxdelay-nil-is-omitted",
    ),
    # timestamp bounds (inclusive)
    pytest.param(push(timestamp=MAX_DURATION), "timestamp", MAX_DURATION, id="timestamp-max"),
    pytest.param(push(timestamp=-MAX_DURATION), "timestamp", -MAX_DURATION, id="timestamp-min"),
    pytest.param(push(timestamp=1.7e12), "timestamp", 1_700_000_000_000, id="timestamp-float"),
    pytest.param(push(timestamp="1700000000000"), "timestamp", 1_700_000_000_000, id="ts-string"),
    pytest.param(push(timestamp=0), "timestamp", 0, id="timestamp-0"),
    pytest.param(push(), "timestamp", None, id="timestamp-default"),
    # repeat
    pytest.param(push(repeat={"every": 0.5}), "repeat.every", 0.5, id="every-fraction"),
    pytest.param(push(repeat={"every": "1000"}), "repeat.every", 1000, id="every-string"),
    pytest.param(push(repeat={"every": 1e20}), "repeat.every", MAX_DURATION, id="every-clamped"),
    pytest.param(
        push(repeat={"pattern": "*/5 * * * *", "tz": "UTC", "immediately": True, "limit": 3}),
        "repeat",
        {"count": 0, "pattern": "*/5 * * * *", "tz": "UTC", "immediately": True, "limit": 3},
        id="repeat-pattern",
    ),
    pytest.param(
        push(repeat={"every": "1000", "limit": 5, "pattern": None}),
        "repeat",
        {"count": 0, "every": 1000, "limit": 5},
        id="repeat-every",
    ),
    pytest.param(push(repeat={"startDate": -5}), "repeat.startDate", -5, id="repeat-start-neg"),
    # groupMaxSize
    pytest.param(push(groupMaxSize=1), "groupMaxSize", 1, id="gmax-1"),
    pytest.param(push(groupMaxSize="3"), "groupMaxSize", 3, id="gmax-string"),
    pytest.param(push(groupMaxSize=4.0), "groupMaxSize", 4, id="gmax-float"),
    pytest.param(
        push(groupMaxSize=MAX_SAFE_INTEGER), "groupMaxSize", MAX_SAFE_INTEGER, id="gmax-max"
    ),
    pytest.param(push(groupId="g", groupMaxSize=2), "groupMaxSize", 2, id="gmax-with-group"),
    pytest.param(push(), "groupMaxSize", None, id="gmax-default"),
    # other finite options: any finite value, negative included
    pytest.param(push(stallTimeout=-1), "stallTimeout", -1, id="stalltimeout-negative"),
    pytest.param(push(stackTraceLimit=0), "stackTraceLimit", 0, id="stacktracelimit-0"),
    pytest.param(push(), "stackTraceLimit", 10, id="stacktracelimit-default"),
    pytest.param(push(keepLogs=-3), "keepLogs", -3, id="keeplogs-negative"),
    pytest.param(push(sizeLimit=1e6), "sizeLimit", 1_000_000, id="sizelimit"),
    pytest.param(push(debounceTtl=-5), "debounceTtl", -5, id="debouncettl-negative"),
    pytest.param(
        push(dedup={"ttl": -5, "extend": True}),
        "dedup",
        {"ttl": -5, "extend": True, "replace": False},
        id="dedup-negative-ttl",
    ),
    pytest.param(
        push(dedup={"ttl": 1e20, "replace": True}),
        "dedup",
        {"ttl": MAX_DURATION, "extend": False, "replace": True},
        id="dedup-ttl-clamped",
    ),
    # queue names
    pytest.param(push(queue="q" * 256), "queue", "q" * 256, id="queue-256"),
    pytest.param(push(queue="Az09_-.:x"), "queue", "Az09_-.:x", id="queue-all-allowed-chars"),
    pytest.param(push(queue="emails:high.v2"), "queue", "emails:high.v2", id="queue-dotted"),
    pytest.param(push(queue="1"), "queue", "1", id="queue-digit"),
    # strings, arrays
    pytest.param(push(jobId=""), "jobId", None, id="jobid-empty-is-none"),
    pytest.param(push(jobId="order-1"), "jobId", "order-1", id="jobid"),
    pytest.param(push(uniqueKey="u"), "uniqueKey", "u", id="uniquekey"),
    pytest.param(push(dependsOn=["a", "b"]), "dependsOn", ["a", "b"], id="dependson"),
    pytest.param(push(childrenIds=["c"]), "childrenIds", ["c"], id="childrenids"),
    # data
    pytest.param(push(data=None), "data", b"\xc0", id="data-nil-is-a-value"),
    pytest.param(push(data=0), "data", b"\x00", id="data-zero"),
    pytest.param(push(data=""), "data", b"\xa0", id="data-empty-string"),
    pytest.param(push(data=[]), "data", b"\x90", id="data-empty-list"),
    # PULL / PULLB
    pytest.param(pull(), "timeout", 0, id="pull-timeout-default"),
    pytest.param(pull(timeout=0), "timeout", 0, id="pull-timeout-0"),
    pytest.param(pull(timeout=60_000), "timeout", 60_000, id="pull-timeout-max"),
    pytest.param(pull(timeout=250.5), "timeout", 250.5, id="pull-timeout-fraction"),
    pytest.param(pullb(timeout=60_000), "timeout", 60_000, id="pullb-timeout-max"),
    pytest.param(pull(), "lockTtl", 30_000, id="lockttl-default"),
    pytest.param(pull(lockTtl=None), "lockTtl", 30_000, id="lockttl-nil"),
    pytest.param(pull(lockTtl=UNDEFINED), "lockTtl", 30_000, id="lockttl-undefined"),
    pytest.param(pull(lockTtl=0), "lockTtl", 0, id="lockttl-0"),
    pytest.param(pull(lockTtl=-5), "lockTtl", -5, id="lockttl-negative"),
    pytest.param(pull(lockTtl=-1e12), "lockTtl", -1e12, id="lockttl-very-negative"),
    pytest.param(pull(lockTtl=2.5), "lockTtl", 2.5, id="lockttl-fraction"),
    pytest.param(pull(lockTtl=1e15), "lockTtl", 1e15, id="lockttl-huge"),
    pytest.param(pullb(lockTtl=0), "lockTtl", 0, id="pullb-lockttl-0"),
    pytest.param(pullb(lockTtl=-1), "lockTtl", -1, id="pullb-lockttl-negative"),
    pytest.param(pullb(), "lockTtl", 30_000, id="pullb-lockttl-default"),
    pytest.param(pull(owner=""), "owner", None, id="pull-owner-empty"),
    pytest.param(pull(owner="w1"), "owner", "w1", id="pull-owner"),
    pytest.param(pull(detach=True), "detach", True, id="pull-detach"),
    pytest.param(pullb(count=1), "count", 1, id="count-1"),
    pytest.param(pullb(count=1000), "count", 1000, id="count-1000"),
    pytest.param(pullb(count=5.0), "count", 5, id="count-float"),
    # ACKB / FAIL / others
    pytest.param({"cmd": "ACKB", "ids": []}, "ids", [], id="ackb-empty"),
    pytest.param(
        {"cmd": "ACKB", "ids": ["a"], "tokens": [None]}, "tokens", [None], id="ackb-nil-token"
    ),
    pytest.param({"cmd": "FAIL", "id": "j", "stack": []}, "stack", [], id="fail-stack-empty"),
    pytest.param({"cmd": "FAIL", "id": "j", "stack": None}, "stack", None, id="fail-stack-nil"),
    pytest.param({"cmd": "FAIL", "id": "j", "error": 5}, "error", "5", id="fail-error-number"),
    pytest.param(
        {"cmd": "JobHeartbeat", "id": "j", "duration": 5000}, "duration", 5000, id="jhb-duration"
    ),
    pytest.param({"cmd": "JobHeartbeat", "id": "j"}, "duration", None, id="jhb-no-duration"),
    pytest.param({"cmd": "RegisterWorker", "name": "w"}, "concurrency", 1, id="reg-concurrency"),
    pytest.param(
        {"cmd": "RegisterWorker", "name": "w", "concurrency": 4}, "concurrency", 4, id="reg-conc-4"
    ),
    pytest.param({"cmd": "RegisterWorker", "name": "w"}, "workerId", None, id="reg-workerid"),
]


@pytest.mark.parametrize("path", ["dependsOn", "tags", "childrenIds"])
def test_absent_string_lists_are_empty(path: str) -> None:
    # Absent (or nil) is empty; the struct may keep it as None or [].
    assert getattr(accepted(push(**{path: None})), path) in (None, [])
    assert getattr(accepted(push()), path) in (None, [])


def field(command: Any, path: str) -> Any:
    head, _, tail = path.partition(".")
    value = getattr(command, head)
    return value[tail] if tail else value


@pytest.mark.parametrize(("request_", "path", "expected"), ACCEPTED)
def test_accepted_value(request_: dict[str, Any], path: str, expected: Any) -> None:
    value = field(accepted(request_), path)
    assert value == expected
    if isinstance(expected, bool) or expected is None:
        assert value is expected


@pytest.mark.parametrize("path", ["maxAttempts", "count"])
def test_counts_are_python_ints(path: str) -> None:
    request = pullb(count=7.0) if path == "count" else push(maxAttempts=2.5)
    assert type(field(accepted(request), path)) is int


def test_pushb_item_without_error_is_accepted_even_in_long_batches() -> None:
    command = accepted(pushb(*[item(delay=-i) for i in range(50)]))
    assert [job.delay for job in command.jobs] == [-i for i in range(50)]


def test_pushb_items_follow_push_rules() -> None:
    command = accepted(
        pushb(
            item(maxAttempts=0, priority="2"),
            item(backoff={"type": "linear"}, delay=1e20, groupId="g", priority=3.0),
        )
    )
    first, second = command.jobs
    assert (first.maxAttempts, first.priority) == (1, 2)
    assert second.backoffConfig == {"type": "exponential", "delay": 1000}
    assert second.delay == MAX_DURATION
    assert second.priority == 3


def test_empty_pushb_is_accepted() -> None:
    assert accepted(pushb()).jobs == []


# --- data size ---------------------------------------------------------------------------------


def test_data_just_under_10mb_is_accepted() -> None:
    data = "x" * (10 * MIB - 1024)
    assert accepted(push(data=data)).data == encode(data)


# --- the job name and data.name ----------------------------------------------------------------


def test_name_is_taken_out_of_data_when_missing() -> None:
    request = {"cmd": "PUSH", "queue": "q", "data": {"name": "legacy", "x": 1, "y": [1, 2]}}
    command = accepted(request)
    assert command.name == "legacy"
    data = msgspec.msgpack.decode(command.data)
    assert data == {"x": 1, "y": [1, 2]}
    assert list(data) == ["x", "y"]


def test_name_only_data_becomes_empty_map() -> None:
    command = accepted({"cmd": "PUSH", "queue": "q", "data": {"name": "only"}})
    assert command.name == "only"
    assert msgspec.msgpack.decode(command.data) == {}


def test_nil_name_is_missing_name() -> None:
    command = accepted(push(name=None, data={"name": "legacy", "x": 1}))
    assert command.name == "legacy"
    assert msgspec.msgpack.decode(command.data) == {"x": 1}


def test_explicit_name_leaves_data_alone() -> None:
    data = {"name": "inner", "x": 1}
    command = accepted(push(name="outer", data=data))
    assert command.name == "outer"
    assert command.data == encode(data)


def test_without_any_name_the_name_is_default() -> None:
    command = accepted({"cmd": "PUSH", "queue": "q", "data": {"x": 1}})
    assert command.name == "default"
    assert command.data == encode({"x": 1})


@pytest.mark.parametrize("data", ["text", 5, [1, "name"], {"name": 5}, {"name": None}, None])
def test_data_without_a_string_name_is_untouched(data: Any) -> None:
    command = accepted({"cmd": "PUSH", "queue": "q", "data": data})
    assert command.name == "default"
    assert command.data == encode(data)


def test_pushb_items_take_the_name_out_of_data() -> None:
    command = accepted(pushb({"data": {"name": "legacy", "v": 2}}, {"data": 3}))
    assert [job.name for job in command.jobs] == ["legacy", "default"]
    assert [msgspec.msgpack.decode(job.data) for job in command.jobs] == [{"v": 2}, 3]


# -- caps on stored strings and lists (README "Limits") ------------------------------------------

ID_CAP = 1024


def push_with(**fields: Any) -> dict[str, Any]:
    return {"cmd": "PUSH", "queue": "q", "data": {}, **fields}


@pytest.mark.parametrize("field", ["jobId", "uniqueKey", "groupId", "parentId", "debounceId"])
def test_ids_and_keys_are_capped_at_1024_characters(field: str) -> None:
    assert accepted(push_with(**{field: "k" * ID_CAP}))
    too_long = "k" * (ID_CAP + 1)
    assert rejected(push_with(**{field: too_long})) == f"{field} too long (max 1024 characters)"


def test_pushb_custom_id_is_capped() -> None:
    request = {"cmd": "PUSHB", "queue": "q", "jobs": [{"data": 1, "customId": "c" * 1025}]}
    assert rejected(request) == "jobs[0]: customId too long (max 1024 characters)"


def test_tags_are_capped_at_100() -> None:
    assert accepted(push_with(tags=[f"t{i}" for i in range(100)]))
    tags = [f"t{i}" for i in range(101)]
    assert rejected(push_with(tags=tags)) == "tags has too many items (max 100)"
    assert rejected(push_with(tags=["t" * 1025])) == "tags items too long (max 1024 characters)"


def test_depends_on_is_deduplicated_then_capped_at_1000() -> None:
    command = accepted(push_with(dependsOn=["a", "b", "a", "b", "c"]))
    assert command.dependsOn == ["a", "b", "c"]
    assert accepted(push_with(dependsOn=["same"] * 100_000)).dependsOn == ["same"]
    many = [f"j{i}" for i in range(1001)]
    assert rejected(push_with(dependsOn=many)) == "dependsOn has too many items (max 1000)"


def test_progress_message_is_capped_at_4096_characters() -> None:
    request = {"cmd": "Progress", "id": "j", "progress": 5}
    assert accepted({**request, "message": "m" * 4096})
    text = rejected({**request, "message": "m" * 4097})
    assert text == "message too long (max 4096 characters)"


def test_long_req_id_is_refused_without_being_echoed() -> None:
    assert accepted({"cmd": "Ping", "reqId": "r" * 256})
    for req_id in ("r" * 257, ["r"] * 300):
        assert decode({"cmd": "Ping", "reqId": req_id}) == Rejected(
            None, "reqId too long (max 256 characters)"
        )
    assert decode({"cmd": "nope", "reqId": "r" * 1000}) == Rejected(
        None, "reqId too long (max 256 characters)"
    )


def test_unknown_command_never_shows_a_python_repr_or_a_huge_name() -> None:
    ext = msgspec.msgpack.Ext(5, b"\x01\x02")
    assert rejected({"cmd": ext}) == "Unknown command: [object Object]"
    assert rejected({"cmd": {"a": 1}}) == "Unknown command: [object Object]"
    assert rejected({"cmd": True}) == "Unknown command: true"
    assert rejected({"cmd": "x" * 10_000}) == "Unknown command: " + "x" * 64 + "..."


def test_a_256_character_queue_name_passes_the_length_check_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Accepted names are cached (even from before this test): with the cache empty, the name
    # must pass the length rule itself, and one character more must not.
    monkeypatch.setattr(values, "_KNOWN_QUEUE_NAMES", set())
    assert accepted(pull(queue="w" * 256)).queue == "w" * 256
    assert rejected(pull(queue="w" * 257)) == "Queue name too long (max 256 characters)"
