"""A model-checked engine: random command sequences against a small reference model of jobs.

A Hypothesis state machine drives one engine actor (through `Batch`es of wire commands, on a
MockClock it jumps by hand, over the memory store and over SQLite) with pushes (priorities,
delays, attempts, unique keys, groups, LIFO, durable), batch pushes, flows, pulls with leases,
acks and fails (with current and stale tokens), pause/resume, dead-letter retries and purges,
clock jumps, disconnects and restarts. The model keeps, per job, what the engine may still do
with it. After every step:

- the counts per state (GetJobCounts) agree with the jobs listed in each state (GetJobs);
- no job is listed in two states, and every job pushed (and not purged) is listed;
- a job acked with `ok` stays completed;
- a stale token never settles a job;
- every timer fires once: no job is handed out twice unless something could have requeued it
  (a fail, its lease running out, its holder leaving, a restart, a dead-letter retry), and no job
  stays delayed past its run time;
- a restart reloads every job in the state it had (active jobs come back requeued).

`make test` runs STATEFUL_EXAMPLES examples per store; `TRIOQ_STATEFUL_EXAMPLES=N` runs N. A
failure prints the minimal step sequence and the `@reproduce_failure` blob that replays it, and
the seed of the run (set `TRIOQ_STATEFUL_SEED` to rerun the same search).
"""

from __future__ import annotations

import itertools
import math
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import seed as use_seed
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from tests.support.engine_model import EngineHarness, ModelSession

STATEFUL_EXAMPLES = int(os.environ.get("TRIOQ_STATEFUL_EXAMPLES", "25"))
STEPS = int(os.environ.get("TRIOQ_STATEFUL_STEPS", "40"))
QUEUES = ("q", "r")
STATES = ("waiting", "prioritized", "delayed", "active", "completed", "failed",
          "waiting-children", "paused")  # fmt: skip
READY = ("waiting", "prioritized", "paused")
QUEUED = {"waiting", "prioritized", "delayed", "paused", "waiting-children"}
DEFAULT_LEASE_MS = 30_000


@attrs.define
class ModelJob:
    """What the model knows of one job."""

    queue: str
    active: bool = False  # handed out, and not settled since (as far as the model knows)
    token: str | None = None  # the lease of its current delivery
    holder: ModelSession | None = None
    pulled_at_ms: float = 0.0
    lease_ms: float = DEFAULT_LEASE_MS
    stale_tokens: list[str] = attrs.Factory(list)
    acked: bool = False
    may_redeliver: bool = True  # queued, or something since its delivery could requeue it
    purged: bool = False


def ready_as_one(counts: dict[str, int]) -> dict[str, int]:
    """Counts with a paused queue's ready jobs merged: GetJobCounts counts them as waiting or
    prioritized, GetJobs asked for every state by name lists them as `paused` (both as in the
    reference)."""
    merged = {state: counts[state] for state in STATES if state not in READY}
    merged["ready"] = sum(counts[state] for state in READY)
    return merged


def settlement(job_id: str, fail: bool, unrecoverable: bool) -> dict[str, Any]:
    """The fields of an ACK or a FAIL of `job_id` (without its token)."""
    if fail:
        return {"cmd": "FAIL", "error": "boom", "unrecoverable": unrecoverable}
    return {"cmd": "ACK", "result": {"done": job_id}}


class EngineModel(RuleBasedStateMachine):
    """The engine against the model; `store_kind` is set by the subclass per store."""

    store_kind = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.TemporaryDirectory()
        self.engine = EngineHarness(self.store_kind, Path(self.directory.name))
        self.sessions = [self.engine.session() for _ in range(3)]
        self.jobs: dict[str, ModelJob] = {}
        self.now_ms = 0.0
        self.flows = itertools.count()

    def teardown(self) -> None:
        """Stop the engine and remove its files."""
        self.engine.close()
        self.directory.cleanup()

    def call(self, session_index: int, **fields: Any) -> dict[str, Any]:
        """Send one wire command from the session at `session_index`."""
        return self.engine.call(self.sessions[session_index % len(self.sessions)], **fields)

    def active_jobs(self) -> list[str]:
        """Ids of the jobs the model last saw handed out (sorted, for stable sampling)."""
        return sorted(i for i, job in self.jobs.items() if job.active)

    # -- pushes ------------------------------------------------------------------------------

    job_options = st.fixed_dictionaries(
        {},
        optional={
            "priority": st.sampled_from([0, 1, 5]),
            "delay": st.sampled_from([0, 500, 3_000]),
            "maxAttempts": st.integers(1, 3),
            "backoff": st.sampled_from([100, 1_000]),
            "uniqueKey": st.sampled_from(["u1", "u2"]),
            "groupId": st.sampled_from(["g1", "g2"]),
            "lifo": st.booleans(),
            "durable": st.booleans(),
        },
    )

    def remember(self, job_id: str, queue: str) -> None:
        """A pushed job (a unique-key hit returns a job the model knows already)."""
        self.jobs.setdefault(job_id, ModelJob(queue))

    @rule(session=st.integers(0, 2), queue=st.sampled_from(QUEUES), options=job_options)
    def push(self, session: int, queue: str, options: dict[str, Any]) -> None:
        """PUSH one job with random options."""
        reply = self.call(session, cmd="PUSH", queue=queue, data={"n": len(self.jobs)}, **options)
        assert reply["ok"] is True, reply
        self.remember(reply["id"], queue)

    @rule(queue=st.sampled_from(QUEUES), items=st.lists(job_options, min_size=1, max_size=3))
    def push_batch(self, queue: str, items: list[dict[str, Any]]) -> None:
        """PUSHB a few jobs."""
        jobs = [{"data": {"n": n}, **options} for n, options in enumerate(items)]
        reply = self.call(0, cmd="PUSHB", queue=queue, jobs=jobs)
        assert reply["ok"] is True, reply
        for job_id in reply["ids"]:
            self.remember(job_id, queue)

    @rule(fail_parent=st.booleans())
    def push_flow(self, fail_parent: bool) -> None:
        """PUSHF a parent on `r` waiting for two children on `q`."""
        flow = next(self.flows)
        parent, children = f"f{flow}-p", [f"f{flow}-c1", f"f{flow}-c2"]
        child_input = {"parentId": parent, "failParentOnFailure": fail_parent, "maxAttempts": 1}
        nodes = [{"id": c, "queue": "q", "input": {"data": c, **child_input}} for c in children]
        parent_input = {"data": parent, "dependsOn": children, "childrenIds": children}
        nodes.append({"id": parent, "queue": "r", "input": parent_input})
        reply = self.call(1, cmd="PUSHF", jobs=nodes)
        assert reply["ok"] is True, reply
        for node in nodes:
            self.remember(node["id"], node["queue"])

    # -- pulls and settlement -----------------------------------------------------------------

    @rule(
        session=st.integers(0, 2),
        queue=st.sampled_from(QUEUES),
        lease=st.sampled_from([None, 1_000, 5_000, DEFAULT_LEASE_MS]),
        count=st.integers(1, 3),
    )
    def pull(self, session: int, queue: str, lease: int | None, count: int) -> None:
        """PULLB up to `count` jobs: with an owner and a lease (and so a token), or held by the
        connection alone (no lease: the job is requeued when the connection goes)."""
        options = {} if lease is None else {"owner": f"w{session}", "lockTtl": lease}
        reply = self.call(session, cmd="PULLB", queue=queue, count=count, **options)
        assert reply["ok"] is True, reply
        ids = [job["id"] for job in reply["jobs"]]
        assert len(set(ids)) == len(ids), f"one pull handed out a job twice: {ids}"
        tokens = reply.get("tokens") or [None] * len(ids)
        if lease is not None:
            assert all(isinstance(token, str) for token in tokens), reply
        for job_id, token in zip(ids, tokens, strict=True):
            self.delivered(job_id, token, session, math.inf if lease is None else lease)

    def delivered(self, job_id: str, token: str | None, session: int, lease_ms: float) -> None:
        """Check and record one delivery."""
        job = self.jobs[job_id]
        assert not job.acked, f"{job_id} was handed out again after it was acked"
        assert job.may_redeliver, f"{job_id} was handed out twice with nothing requeueing it"
        if job.token is not None:
            job.stale_tokens.append(job.token)
        job.active, job.token = True, token
        job.holder = self.sessions[session % len(self.sessions)]
        job.pulled_at_ms, job.lease_ms, job.may_redeliver = self.now_ms, lease_ms, False

    def leased_jobs(self) -> list[str]:
        """Ids of handed-out jobs with a lease token."""
        return [i for i in self.active_jobs() if self.jobs[i].token is not None]

    @precondition(lambda self: self.leased_jobs())
    @rule(data=st.data(), fail=st.booleans())
    def lease_runs_out_and_the_job_is_pulled_again(self, data: st.DataObject, fail: bool) -> None:
        """Jump past one job's lease, pull its queue again, and settle it with the old token
        (which must be refused if the job was handed out again)."""
        job_id = data.draw(st.sampled_from(self.leased_jobs()), label="job")
        job = self.jobs[job_id]
        old_token = job.token
        left_ms = job.pulled_at_ms + job.lease_ms - self.now_ms
        self.advance(max(left_ms, 0) / 1000 + 0.5)
        self.pull(0, job.queue, 5_000, 3)
        if job.active and job.token != old_token and old_token is not None:
            self.settle_with_stale_token(job_id, old_token, settlement(job_id, fail, False))

    @precondition(lambda self: self.active_jobs())
    @rule(data=st.data(), stale=st.booleans(), fail=st.booleans(), unrecoverable=st.booleans())
    def settle(self, data: st.DataObject, stale: bool, fail: bool, unrecoverable: bool) -> None:
        """ACK or FAIL a handed-out job, with its current token or one of its stale ones."""
        job_id = data.draw(st.sampled_from(self.active_jobs()), label="job")
        job = self.jobs[job_id]
        command = settlement(job_id, fail, unrecoverable)
        if stale and job.stale_tokens:
            token = data.draw(st.sampled_from(job.stale_tokens), label="stale token")
            self.settle_with_stale_token(job_id, token, command)
            return
        reply = self.call(0, id=job_id, token=job.token, **command)
        if not job.may_redeliver:  # nothing could have taken the job away from its holder
            assert reply["ok"] is True, f"settling {job_id} with its live token: {reply}"
        if reply["ok"]:
            job.acked = not fail
            job.may_redeliver = fail
            if job.token is not None:
                job.stale_tokens.append(job.token)
            job.active, job.token = False, None

    def settle_with_stale_token(self, job_id: str, token: str, command: dict[str, Any]) -> None:
        """A stale token is refused and changes nothing."""
        before = self.state_of(job_id)
        reply = self.call(0, id=job_id, token=token, **command)
        assert reply["ok"] is False, f"a stale token settled {job_id}: {reply}"
        assert self.state_of(job_id) == before, f"a stale token moved {job_id}"

    # -- queues, dead letters ----------------------------------------------------------------

    @rule(
        queue=st.sampled_from(QUEUES),
        action=st.sampled_from(["Pause", "Resume", "RetryDlq", "PurgeDlq"]),
    )
    def queue_admin(self, queue: str, action: str) -> None:
        """Pause or resume a queue; retry its dead letters (back to waiting) or purge them."""
        failed = self.listed(queue)["failed"]
        reply = self.call(2, cmd=action, queue=queue)
        assert reply["ok"] is True, reply
        for job_id in failed if action in ("RetryDlq", "PurgeDlq") else ():
            self.jobs[job_id].purged |= action == "PurgeDlq"
            self.jobs[job_id].may_redeliver = True

    # -- time, connections, restarts ----------------------------------------------------------

    @rule(seconds=st.sampled_from([0.3, 1.0, 4.0, 31.0]))
    def advance(self, seconds: float) -> None:
        """Jump the clock; leases that ran out may requeue their jobs."""
        self.engine.advance(seconds)
        self.now_ms += seconds * 1000
        for job in self.jobs.values():
            if job.active and job.pulled_at_ms + job.lease_ms <= self.now_ms:
                job.may_redeliver = True

    @rule(session=st.integers(0, 2))
    def disconnect(self, session: int) -> None:
        """A client leaves (a new one takes its place); what it held may be requeued."""
        index = session % len(self.sessions)
        leaving = self.sessions[index]
        self.engine.disconnect(leaving)
        self.sessions[index] = self.engine.session()
        for job in self.jobs.values():
            if job.holder is leaving:
                job.may_redeliver = True

    @rule()
    def restart(self) -> None:
        """Restart on the same store: every job comes back as it was; a job held by a
        connection alone is requeued, a leased one stays active (its worker may settle it)."""
        before = self.all_states()
        self.engine.restart()
        self.sessions = [self.engine.session() for _ in range(3)]
        after = self.all_states()
        for job_id, state in before.items():
            job = self.jobs[job_id]
            if state == "active" and job.token is None:
                assert after.get(job_id) in QUEUED | {"failed"}, (job_id, after.get(job_id))
            elif state in READY:
                assert after.get(job_id) in READY, (job_id, state, after.get(job_id))
            else:
                assert after.get(job_id) == state, f"{job_id} was {state}, reloaded {after}"
        for job in self.jobs.values():
            if job.active and job.token is None:
                job.may_redeliver = True

    # -- observations and invariants ----------------------------------------------------------

    def state_of(self, job_id: str) -> str:
        """GetState of one job."""
        return self.call(2, cmd="GetState", id=job_id)["state"]

    def listed(self, queue: str) -> dict[str, list[str]]:
        """The ids GetJobs lists in each state of `queue`."""
        reply = self.call(2, cmd="GetJobs", queue=queue, state=list(STATES), limit=10_000)
        assert reply["ok"] is True, reply
        by_state: dict[str, list[str]] = {state: [] for state in STATES}
        for job in reply["jobs"]:
            by_state[job["state"]].append(job["id"])
            if job["state"] == "delayed":
                assert job["runAt"] > 1_800_000_000_000 + self.now_ms, f"timer missed: {job}"
        return by_state

    def all_states(self) -> dict[str, str]:
        """Every listed job's state, over both queues."""
        return {i: s for q in QUEUES for s, ids in self.listed(q).items() for i in ids}

    @invariant()
    def counts_agree_with_the_jobs_and_no_job_is_in_two_states(self) -> None:
        """GetJobCounts matches the listings; each job is listed once; none is lost."""
        seen: dict[str, str] = {}
        for queue in QUEUES:
            listed = self.listed(queue)
            counts = self.call(2, cmd="GetJobCounts", queue=queue)["counts"]
            assert ready_as_one(
                {s: len(ids) for s, ids in listed.items()}) == ready_as_one(counts), (
                queue, counts, {s: len(ids) for s, ids in listed.items()})  # fmt: skip
            for state, ids in listed.items():
                for job_id in ids:
                    assert job_id not in seen, f"{job_id} is {seen.get(job_id)} and {state}"
                    seen[job_id] = state
        for job_id, job in self.jobs.items():
            if not job.purged:
                assert job_id in seen, f"{job_id} was lost"
            if job.acked:
                assert seen.get(job_id) == "completed", f"acked {job_id} is {seen.get(job_id)}"


class EngineModelOnSqlite(EngineModel):
    """The same machine, restarting through the SQLite store."""

    store_kind = "sqlite"


RUN_SEED = int(os.environ.get("TRIOQ_STATEFUL_SEED", random.randrange(2**32)))
MODEL_SETTINGS = settings(
    max_examples=STATEFUL_EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    database=None,
    print_blob=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.mark.parametrize("machine", [EngineModel, EngineModelOnSqlite], ids=["memory", "sqlite"])
def test_the_engine_agrees_with_the_model(machine: type[EngineModel]) -> None:
    """Run the machine; on failure say which seed found it (Hypothesis prints the steps)."""
    seeded = use_seed(RUN_SEED)(machine)
    try:
        run_state_machine_as_test(seeded, settings=MODEL_SETTINGS)
    except BaseException as error:
        error.add_note(f"TRIOQ_STATEFUL_SEED={RUN_SEED} reruns this search")
        raise
