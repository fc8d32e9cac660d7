"""Operator commands (queue admin, dead-letter settings, metrics, groups, dedup keys): the exact
error naming each bad field, the limits at their edges, and the values a client gets back
(each case pinned because `make mutation` showed it unpinned)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.support.decoding import decode, error_of

Q = {"queue": "q"}
WRONG = {"not": "a number"}



# --- queue admin -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"cmd": "Pause"}, "Queue name is required"),
        ({"cmd": "Clean", **Q, "limit": WRONG}, "limit must be a number"),
        ({"cmd": "Clean", **Q, "grace": math.inf}, "grace must be a finite number"),
        ({"cmd": "GetJobs", **Q, "offset": -1}, "offset must be at least 0"),
        ({"cmd": "GetJobByCustomId"}, "customId is required"),
        ({"cmd": "GetJobByCustomId", "customId": 7}, "customId must be a string"),
        ({"cmd": "Dlq", **Q, "count": -1}, "count must be at least 0"),
        ({"cmd": "Dlq", **Q, "count": WRONG}, "count must be a number"),
        ({"cmd": "RetryDlq", **Q, "jobId": 7}, "jobId must be a string"),
        ({"cmd": "RetryCompleted", **Q, "id": 7}, "id must be a string"),
        ({"cmd": "RateLimit", **Q, "limit": 0}, "limit must be at least 1"),
        ({"cmd": "RateLimit", **Q, "limit": 0.5}, "limit must be at least 1"),
        ({"cmd": "RateLimit", **Q, "limit": WRONG}, "limit must be a finite number"),
        ({"cmd": "SetConcurrency", **Q}, "limit is required"),
        ({"cmd": "SetConcurrency", **Q, "limit": 0}, "limit must be at least 1"),
        ({"cmd": "TrimEvents", **Q, "maxLength": 2.5},
         "maxLength must be a non-negative safe integer"),
        ({"cmd": "TrimEvents", **Q, "maxLength": WRONG}, "maxLength must be a number"),
        ({"cmd": "Metrics", "queue": "bad name", "type": "failed"},
         "Queue name contains invalid characters"),
        ({"cmd": "Metrics", **Q}, "Metrics type must be 'completed' or 'failed'"),
        ({"cmd": "Metrics", **Q, "type": "failed", "end": 2.5},
         "end must be a non-negative safe integer"),
        ({"cmd": "Metrics", **Q, "type": "failed", "start": math.nan},
         "start must be a finite number"),
        ({"cmd": "Metrics", **Q, "type": "failed", "start": WRONG}, "start must be a number"),
    ],
)  # fmt: skip
def test_a_bad_admin_field_is_named(message: dict[str, Any], error: str) -> None:
    assert error_of(message) == error


def test_listing_and_cleaning_read_whole_numbers() -> None:
    clean = decode({"cmd": "Clean", **Q, "grace": 0.5, "limit": 2.9, "state": "failed"})
    assert (clean.grace, clean.limit, clean.state) == (0, 2, "failed")
    listing = decode({"cmd": "GetJobs", **Q, "state": ["active", "failed"], "limit": 2.5,
                      "offset": 1.9})  # fmt: skip
    assert (listing.state, listing.limit, listing.offset) == (["active", "failed"], 2, 1)
    assert listing.explicit is True


def test_dead_letter_listing_and_retries() -> None:
    assert decode({"cmd": "Dlq", **Q}).count == 100
    assert decode({"cmd": "Dlq", **Q, "count": 3.9}).count == 3
    assert decode({"cmd": "RetryDlq", **Q}).jobId is None
    assert decode({"cmd": "RetryDlq", **Q, "jobId": "j"}).jobId == "j"
    assert decode({"cmd": "RetryCompleted", **Q}).id is None
    assert decode({"cmd": "RetryCompleted", **Q, "id": "j"}).id == "j"
    assert decode({"cmd": "GetJobByCustomId", "customId": "c"}).customId == "c"


def test_queue_limits_keep_a_whole_number_of_at_least_one() -> None:
    assert decode({"cmd": "RateLimit", **Q, "limit": 1}).limit == 1
    assert decode({"cmd": "RateLimit", **Q, "limit": 2.9}).limit == 2
    assert decode({"cmd": "SetConcurrency", **Q, "limit": "4"}).limit == 4


def test_metrics_and_trims_read_safe_integers() -> None:
    ranged = decode({"cmd": "Metrics", **Q, "type": "failed", "start": "3", "end": 0})
    assert (ranged.start, ranged.end) == (3, 0)
    assert isinstance(ranged.start, int)
    every = decode({"cmd": "Metrics", **Q, "type": "completed", "start": 0, "end": -1})
    assert (every.start, every.end) == (0, -1)  # -1: to the oldest minute
    big = decode({"cmd": "Metrics", **Q, "type": "failed", "end": float(2**40)}).end
    assert big == 2**40 and isinstance(big, int)
    assert decode({"cmd": "TrimEvents", **Q, "maxLength": "5"}).maxLength == 5


# --- stall and dead-letter settings ------------------------------------------------------------


def stall(config: Any) -> dict[str, Any]:
    return {"cmd": "SetStallConfig", **Q, "config": config}


def dlq(config: Any) -> dict[str, Any]:
    return {"cmd": "SetDlqConfig", **Q, "config": config}


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"cmd": "SetStallConfig", **Q}, "config must be an object"),
        (stall([1]), "config must be an object"),
        (stall({"nope": 1}), "unknown config key: nope"),
        (stall({"enabled": 1}), "config.enabled must be a boolean"),
        (stall({"enabled": None}), "config.enabled must be a boolean"),
        (stall({"stallInterval": -1}), "config.stallInterval must be at least 0"),
        (stall({"maxStalls": "x"}), "config.maxStalls must be a number"),
        (stall({"gracePeriod": math.inf}), "config.gracePeriod must be a finite number"),
        (dlq(None), "config must be an object"),
        (dlq({"maxAge": None, "oops": 1}), "unknown config key: oops"),
        (dlq({"maxEntries": 0}), "config.maxEntries must be at least 1"),
        (dlq({"maxEntries": 0.5}), "config.maxEntries must be at least 1"),
        (dlq({"autoRetry": "yes"}), "config.autoRetry must be a boolean"),
        (dlq({"maxAutoRetries": -1}), "config.maxAutoRetries must be at least 0"),
        (dlq({"maxAge": WRONG}), "config.maxAge must be a number"),
    ],
)
def test_a_bad_setting_is_named(message: dict[str, Any], error: str) -> None:
    assert error_of(message) == error


def test_stall_settings_keep_their_kinds() -> None:
    config = decode(stall({"enabled": False, "stallInterval": 2.5, "maxStalls": 2.9,
                           "gracePeriod": "0"})).config  # fmt: skip
    assert config == {"enabled": False, "stallInterval": 2.5, "maxStalls": 2, "gracePeriod": 0}
    assert decode(stall({})).config == {}


def test_dead_letter_settings_keep_their_kinds_and_a_null_age_cap() -> None:
    config = decode(dlq({"autoRetry": True, "autoRetryInterval": 1.5, "maxAutoRetries": 2.9,
                         "maxAge": 10, "maxEntries": 1})).config  # fmt: skip
    assert config == {"autoRetry": True, "autoRetryInterval": 1.5, "maxAutoRetries": 2,
                      "maxAge": 10, "maxEntries": 1}  # fmt: skip
    assert decode(dlq({"maxAge": None})).config == {"maxAge": None}
    uncapped = decode(dlq({"maxAge": None, "maxEntries": 3})).config
    assert uncapped == {"maxAge": None, "maxEntries": 3}
    assert decode(dlq({"maxEntries": 3})).config == {"maxEntries": 3}  # no age key added


# --- groups, dedup keys, job references --------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ({"cmd": "PauseGroup", "groupId": "g"}, "Queue name is required"),
        ({"cmd": "RateLimitGroup", **Q, "groupId": "g"},
         "duration must be a positive safe integer"),
        ({"cmd": "RateLimitGroup", **Q, "groupId": "g", "duration": 0},
         "duration must be a positive safe integer"),
        ({"cmd": "SetGroupConcurrency", **Q, "groupId": "g", "concurrency": math.inf},
         "concurrency must be a positive safe integer"),
        ({"cmd": "SetGroupConcurrency", **Q, "groupId": "g", "concurrency": -math.inf},
         "concurrency must be a positive safe integer"),
        ({"cmd": "SetGroupConcurrency", **Q, "groupId": "g", "concurrency": math.nan},
         "concurrency must be a positive safe integer"),
        ({"cmd": "RemoveDlqJob", **Q}, "jobId is required"),
        ({"cmd": "RemoveDlqJob", **Q, "jobId": 7}, "jobId must be a string"),
        ({"cmd": "GetDeduplicationJobId", **Q}, "deduplicationId is required"),
        ({"cmd": "RemoveDeduplicationKey", **Q, "deduplicationId": 7},
         "deduplicationId must be a string"),
        ({"cmd": "RemoveDeduplicationKey", "deduplicationId": "k"}, "Queue name is required"),
        ({"cmd": "RemoveJobDeduplicationKey"}, "id is required"),
        ({"cmd": "MoveToWaitingChildren", "id": 7}, "id must be a string"),
        ({"cmd": "MoveToWaitingChildren", "id": "p", "token": 7}, "token must be a string"),
        ({"cmd": "RemoveChildDependency", "id": ""}, "id is required"),
    ],
)  # fmt: skip
def test_a_bad_group_or_key_field_is_named(message: dict[str, Any], error: str) -> None:
    assert error_of(message) == error


def test_group_and_key_commands_keep_their_values() -> None:
    paused = decode({"cmd": "RateLimitGroup", **Q, "groupId": "g", "duration": 2.0})
    assert (paused.queue, paused.groupId, paused.duration) == ("q", "g", 2)
    assert isinstance(paused.duration, int)
    largest = decode({"cmd": "RateLimitGroup", **Q, "groupId": "g", "duration": 2**53 - 1})
    assert largest.duration == 2**53 - 1
    assert decode({"cmd": "RemoveDlqJob", **Q, "jobId": "j"}).jobId == "j"
    key = decode({"cmd": "GetDeduplicationJobId", **Q, "deduplicationId": "k"})
    assert (key.queue, key.deduplicationId) == ("q", "k")
    assert decode({"cmd": "RemoveUnprocessedChildren", "id": "p"}).id == "p"
    waiting = decode({"cmd": "MoveToWaitingChildren", "id": "p", "token": ""})
    assert (waiting.id, waiting.token) == ("p", None)  # no lease
    assert decode({"cmd": "MoveToWaitingChildren", "id": "p", "token": "t"}).token == "t"
