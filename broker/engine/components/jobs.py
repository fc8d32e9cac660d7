"""Jobs: PUSH, PUSHB, ACK, ACKB, FAIL, job heartbeats and the job queries (a component).

Each handler checks everything first, then mutates EngineState, then returns the reply (a dict
without `reqId`; the engine adds it). Handlers raise EngineError for a refused command.
Owns nothing: the jobs, queues and keys are EngineState's; admission checks shared with PUSHF
are in admission.py, the settling checks in leases.py.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterable, Sequence
from functools import partial
from operator import attrgetter
from typing import Any, cast

import msgspec

from broker.engine import errors
from broker.engine.components.bulk import BulkRunner
from broker.engine.components.bulk_jobs import AckBulk, PushBulk
from broker.engine.errors import EngineError
from broker.engine.routing import Routes
from broker.engine.rules.admission import check_group_room, check_id_reuse, check_repeat, find_cycle
from broker.engine.rules.deadlines import settle_failure
from broker.engine.rules.leases import active_job, is_late
from broker.engine.rules.schedule import first_occurrence
from broker.engine.sink import ReplySink
from broker.engine.state.engine_state import NOT_STARTED, EngineState
from broker.engine.state.ids import uuid7, uuid7s
from broker.engine.state.keys import DEBOUNCE, UNIQUE
from broker.engine.state.model import (
    ACTIVE,
    COMPLETED,
    COUNTED_STATES,
    PRIORITIZED,
    UNKNOWN,
    WAITING,
    WAITING_CHILDREN,
    Job,
    job_from_push,
)
from protocol import commands as cmd
from protocol.jobspec import JobFields

Reply = dict[str, Any]
_options_given = attrgetter("optionsGiven")
_custom_id = attrgetter("customId")
_state_of = attrgetter("state")
_lock_token_of = attrgetter("lock_token")


def first_run(repeat: dict[str, Any], run_at: float) -> float:
    """The first occurrence of a repeating job (its own delay counts as the earliest)."""
    if repeat.get("pattern") is None and repeat.get("every") is None:
        return run_at
    first = first_occurrence(repeat, run_at)
    return run_at if first is None else first


def already_finalized() -> Reply:
    """The answer to a late ACK/FAIL: a successful no-op, not a retryable error."""
    return {"ok": True, "data": {"applied": False, "reason": "already-finalized"}}


class JobCommands:
    """PUSH, PUSHB, ACK, ACKB, FAIL, JobHeartbeat(B), GetJob, GetState, GetResult, GetJobCounts and
    Count, over EngineState."""

    def __init__(self, state: EngineState, bulks: BulkRunner) -> None:
        self.state = state
        self.bulks = bulks  # large PUSHB and ACKB go there (bulk_jobs.py)
        bulks.resume[PushBulk.kind] = partial(PushBulk.resumed, self)
        bulks.resume[AckBulk.kind] = AckBulk.resumed

    def routes(self) -> Routes:
        """The commands this component answers."""
        routes = Routes()
        routes.add(cmd.Push, self.push)
        routes.add(cmd.PushBatch, self.push_batch)
        routes.add(cmd.Ack, self.ack)
        routes.add(cmd.AckBatch, self.ack_batch)
        routes.add(cmd.Fail, self.fail)
        routes.add(cmd.JobHeartbeat, self.job_heartbeat)
        routes.add(cmd.JobHeartbeatB, self.job_heartbeat_batch)
        routes.add(cmd.GetJob, self.get_job)
        routes.add(cmd.GetState, self.get_state)
        routes.add(cmd.GetResult, self.get_result)
        routes.add(cmd.GetJobCounts, self.get_job_counts)
        routes.add(cmd.Count, self.count)
        return routes

    def push(self, session: ReplySink, command: cmd.Push, now: float) -> Reply:
        """PUSH: idempotent on jobId, deduplicated on uniqueKey/debounceId (keys.py),
        dependencies must exist."""
        if command.queue not in self.state.queues:  # a new queue: within --max-queues?
            self.state.queues.admit((command.queue,), self.state.now)
        if command.optionsGiven or command.jobId is not None:  # a plain job has nothing to check
            existing = self._admit(command, now)
            if existing is not None:
                return {"ok": True, "id": existing}
        job = self._new_job(command.queue, command, command.jobId, now)
        self.state.add(job, now)
        return {"ok": True, "id": job.id}

    def _admit(self, command: cmd.Push, now: float) -> str | None:
        """Check a PUSH's options; returns the id of the job it duplicates, if any."""
        if command.jobId is not None and command.jobId in (command.dependsOn or ()):
            raise errors.self_dependency(command.jobId)
        self.check_dependencies(command.dependsOn or (), ())
        check_id_reuse(self.state, command.jobId)
        check_repeat(command.repeat, now)
        self._check_replace(command.queue, command, {})
        check_group_room(self.state, command.queue, [command])
        return self._settle_duplicate(command.queue, command, command.jobId, now)

    def push_batch(self, session: ReplySink, command: cmd.PushBatch, now: float) -> Reply | None:
        """PUSHB: every item checked first (dependsOn may name customIds of the batch). A
        large one is checked and added in slices, answered once all are (bulk_jobs.py)."""
        if command.large:
            bulk = PushBulk(self, session, command.reqId, command.queue, command.raw_jobs)
            self.bulks.start(bulk)
            return None
        items = command.jobs
        queue = command.queue
        # Plain jobs (no option, no customId) cannot fail a check: a batch of only those skips
        # them all (customIds are never empty: an empty one is None).
        if any(map(_options_given, items)) or any(map(_custom_id, items)):
            self._check_items(queue, items, now)
        self.state.queues.admit((queue,), self.state.now)
        return {"ok": True, "ids": self.add_batch(queue, items, now)}

    def _check_items(self, queue: str, items: list[cmd.PushItem], now: float) -> None:
        """A PUSHB's checks, item by item and then across the batch."""
        batch_ids = {item.customId for item in items if item.customId is not None}
        earlier_keys: dict[str, str | None] = {}  # uniqueKey -> customId of its first item
        for index, item in enumerate(items):
            if not item.optionsGiven and item.customId is None:
                continue  # a plain job: nothing to check
            try:
                if item.customId is not None and item.customId in (item.dependsOn or ()):
                    raise errors.self_dependency(item.customId)
                self.check_dependencies(item.dependsOn or (), batch_ids)
                check_id_reuse(self.state, item.customId)
                check_repeat(item.repeat, now)
                self._check_replace(queue, item, earlier_keys, items, items[:index])
            except EngineError as exc:
                raise EngineError(f"jobs[{index}]: {exc}") from None
            if item.uniqueKey is not None:
                earlier_keys.setdefault(item.uniqueKey, item.customId)
        self._check_batch_cycles(items)
        check_group_room(self.state, queue, items, batch=True)

    def add_batch(self, queue: str, items: list[cmd.PushItem], now: float) -> list[str]:
        """Add a checked batch's items in order; returns the id each item stands for (a new
        job's, or the one it duplicates)."""
        # A dependency on a later item of the batch is simply not completed yet when the earlier
        # job is added, so adding in input order already gives "any order" chains.
        state = self.state
        ids: list[str] = []
        created: list[Job] = []
        taken: dict[str, str] = {}
        # One id made alone costs half of a batch of one (an SDK's AddBatcher sends many such).
        fresh = iter(uuid7s(len(items)) if len(items) > 1 else (uuid7(),))
        for item in items:
            if not item.optionsGiven and item.customId is None:  # a plain job: no duplicate
                job = job_from_push(item, queue, next(fresh), None, now)
                created.append(job)
                ids.append(job.id)
                continue
            existing = self._settle_duplicate(queue, item, item.customId, now)
            if existing is None and item.customId is not None:
                existing = taken.get(item.customId)
            if existing is None and item.uniqueKey is not None:
                existing = taken.get("\0" + item.uniqueKey)
                if existing is not None and item.dedup["replace"]:
                    # As PUSH does: the earlier job of the batch (not started) is replaced.
                    created = [job for job in created if job.id != existing]
                    existing = None
            if existing is not None:
                ids.append(existing)
                continue
            job = job_from_push(item, queue, item.customId or next(fresh), item.customId, now)
            if item.customId is not None:
                taken[item.customId] = job.id
            if item.uniqueKey is not None:
                taken["\0" + item.uniqueKey] = job.id
            created.append(job)
            ids.append(job.id)
        for job in created:
            state.add(job, now)
        return ids

    def _settle_duplicate(
        self, queue: str, fields: JobFields, custom_id: str | None, now: float
    ) -> str | None:
        """The existing job this push is a duplicate of (None: add it), applying dedup's
        `extend` (restart the key's window) and `replace` (drop a job not yet started)."""
        state = self.state
        if custom_id is not None and custom_id in state.jobs:
            return custom_id
        key = fields.uniqueKey
        owner = None if key is None else state.keys.owner((UNIQUE, queue, key), now)
        if key is not None and owner is not None:
            dedup = fields.dedup
            held = state.jobs.get(owner)
            if dedup["replace"] and held is not None and held.state in NOT_STARTED:
                state.remove(held)
                return None
            ttl = dedup["ttl"]
            if dedup["extend"] and ttl:
                state.keys.take((UNIQUE, queue, key), owner, now + ttl)
            return owner
        debounce = fields.debounceId
        if debounce is not None:
            return state.keys.owner((DEBOUNCE, queue, debounce), now)
        return None

    def check_dependencies(self, depends_on: Iterable[str], batch_ids: Container[str]) -> None:
        """Every dependency is a job the broker holds, one that completed (even if it was
        removed since), or a job of the same batch."""
        jobs = self.state.jobs
        done = self.state.deps.done_ids
        for dep_id in depends_on:
            if dep_id not in jobs and dep_id not in batch_ids and dep_id not in done:
                raise errors.dependency_missing(dep_id)

    def _check_batch_cycles(self, items: list[cmd.PushItem]) -> None:
        """Jobs of one batch must not wait for each other in a circle (none could ever run).
        Jobs already held only wait for jobs that existed before them, so a cycle can only
        run through the batch's own custom ids."""
        edges = {item.customId: item.dependsOn or () for item in items if item.customId}
        cycle = find_cycle(edges)
        if cycle is not None:
            index = next(i for i, item in enumerate(items) if item.customId == cycle[0])
            raise EngineError(f"jobs[{index}]: Dependency cycle: {' -> '.join(cycle)}")

    def _check_replace(
        self,
        queue: str,
        fields: JobFields,
        earlier_keys: dict[str, str | None],
        batch: Sequence[JobFields] = (),
        earlier: Sequence[JobFields] = (),
    ) -> None:
        """dedup `replace` may not drop a job that other live jobs wait for: they would wait
        forever. Those are the jobs held waiting for it, the new job itself when it names it
        in `dependsOn`, and the `earlier` items of its batch that do (the reference's rule);
        a job of the same batch may not be replaced while any item of the batch names it.
        Checked before anything changes (the replacement itself happens later)."""
        key = fields.uniqueKey
        if key is None or not fields.dedup["replace"]:
            return
        if key in earlier_keys:  # replaces an earlier job of the same batch
            custom_id = earlier_keys[key]
            if custom_id is None:  # an item without a customId: no dependsOn can name it
                return
            if any(custom_id in (item.dependsOn or ()) for item in batch):
                raise errors.replace_blocked(custom_id)
            return
        named = [fields, *earlier]  # the new job and the batch's items admitted before it
        self.check_held_replace(
            queue, key, lambda job_id: any(job_id in (item.dependsOn or ()) for item in named)
        )

    def check_held_replace(self, queue: str, key: str, named: Callable[[str], bool]) -> None:
        """dedup `replace` of the job holding `key` now: refused while live jobs wait for it,
        or the batch's items up to the replacing one name it (`named(id)`)."""
        state = self.state
        owner = state.keys.owner((UNIQUE, queue, key), state.now)
        held = state.jobs.get(owner) if owner is not None else None
        if held is None or held.state not in NOT_STARTED:
            return
        jobs = state.jobs
        waiting = any(
            dep_id in jobs and jobs[dep_id].state == WAITING_CHILDREN
            for dep_id in state.deps.dependents.get(held.id, ())
        )
        if waiting or named(held.id):
            raise errors.replace_blocked(held.id)

    def _new_job(self, queue: str, fields: JobFields, custom_id: str | None, now: float) -> Job:
        job = job_from_push(fields, queue, custom_id or uuid7(), custom_id, now)
        if job.opts.repeat is not None:
            job.run_at = first_run(job.opts.repeat, job.run_at)
        return job

    def ack(self, session: ReplySink, command: cmd.Ack, now: float) -> Reply:
        """ACK: complete an active job (token required when it is leased)."""
        job = self.state.jobs.get(command.id)
        token = command.token
        # An active job without a lease, acked without a token, passes both checks below:
        # that case is tested inline first (every ACK).
        if job is None or job.state != ACTIVE or token is not None or job.lock_token is not None:
            if is_late(self.state, command.id, token):
                return already_finalized()
            job = active_job(self.state, command.id, token)
        remove = command.removeOnComplete or job.opts.remove_on_complete
        self.state.complete(job, now, command.result, remove)
        return {"ok": True}

    def ack_batch(self, session: ReplySink, command: cmd.AckBatch, now: float) -> Reply | None:
        """ACKB: every job and token checked before any job completes; the jobs no longer
        active (a late settle, a repeated id) are ignored and reported. A large one is
        checked and settled in slices, answered once all are (bulk_jobs.py)."""
        if command.large:
            raw = command.raw_ids, command.raw_results, command.raw_tokens
            bulk = AckBulk(session, command.reqId, *raw)
            self.bulks.start(bulk)
            return None
        ids = command.ids
        tokens = command.tokens or [None] * len(ids)
        jobs = self.state.jobs
        settling: list[Job | None] = list(map(jobs.get, ids))  # the job at each position
        ignoring = False
        # The usual batch, checked in C: every job found, active, and `tokens` its lease
        # tokens (None for a job without a lease). Then each position passes the checks below.
        if not (
            all(settling)
            and list(map(_state_of, settling)).count(ACTIVE) == len(ids)
            and list(map(_lock_token_of, settling)) == tokens
        ):
            settling = []  # None where ignored
            for job_id, token in zip(ids, tokens, strict=True):  # every position: a repeated
                job = jobs.get(job_id)  # id with one wrong token rejects the batch
                # An active job acked with its lease's token (or none, without a lease) passes.
                if job is None or job.state != ACTIVE or token != job.lock_token:
                    if is_late(self.state, job_id, token):
                        ignoring, job = True, None
                    else:
                        job = active_job(self.state, job_id, token)
                settling.append(job)
        if len(set(ids)) < len(ids):  # a repeated id: its first position settles the job
            seen: set[str] = set()
            for index, job_id in enumerate(ids):
                if job_id in seen:
                    ignoring, settling[index] = True, None
                seen.add(job_id)
        results = command.results or [None] * len(ids)
        if not ignoring:  # then no position is None
            self.state.complete_many(cast(list[Job], settling), results, now)
            return {"ok": True}
        ignored = [index for index, job in enumerate(settling) if job is None]
        self.state.complete_many(
            [job for job in settling if job is not None],
            [result for job, result in zip(settling, results, strict=True) if job is not None],
            now,
        )
        return {
            "ok": True,
            "data": {"ignoredIds": [ids[index] for index in ignored], "ignoredIndices": ignored},
        }

    def fail(self, session: ReplySink, command: cmd.Fail, now: float) -> Reply:
        """FAIL: retry after the backoff while attempts remain, else to the dead-letter queue."""
        if is_late(self.state, command.id, command.token):
            return already_finalized()
        job = active_job(self.state, command.id, command.token)
        if command.stack:  # none or no line at all: the stack of an earlier attempt stays
            limit = max(int(job.opts.stack_trace_limit), 0)
            lines = [line.strip() for line in command.stack if line.strip()]
            job.stacktrace = lines[:limit] or None  # as the reference: trimmed, no blank line
        reason = command.error if command.error is not None else "Job failed"
        remove = command.removeOnFail or job.opts.remove_on_fail
        settle_failure(
            self.state, job, now, reason, unrecoverable=command.unrecoverable, remove=remove
        )
        return {"ok": True}

    def job_heartbeat(self, session: ReplySink, command: cmd.JobHeartbeat, now: float) -> Reply:
        """JobHeartbeat: note the job is alive; with its token, renew the lease too."""
        if not self._beat(command.id, command.token, command.duration, now):
            raise EngineError("Job not found or not active (or invalid token)")
        return {"ok": True, "data": {"ok": True}}

    def job_heartbeat_batch(
        self, session: ReplySink, command: cmd.JobHeartbeatB, now: float
    ) -> Reply:
        """JobHeartbeatB: heartbeat many jobs; answers how many were alive."""
        tokens = command.tokens or [None] * len(command.ids)
        count = sum(
            self._beat(job_id, token, None, now)
            for job_id, token in zip(command.ids, tokens, strict=False)
        )
        return {"ok": True, "data": {"ok": True, "count": count}}

    def _beat(self, job_id: str, token: str | None, duration: float | None, now: float) -> bool:
        job = self.state.jobs.get(job_id)
        if job is None or job.state != ACTIVE:
            return False
        if token is not None and token != job.lock_token:
            return False  # a stale worker's beat must not keep the job looking alive
        job.last_heartbeat = now
        if token is not None:
            self.state.renew_lease(job, now, job.lock_ttl if duration is None else duration)
        return True

    def get_job(self, session: ReplySink, command: cmd.GetJob, now: float) -> Reply:
        """GetJob: the job with its state, or `Job not found`."""
        job = self.state.jobs.get(command.id)
        if job is None:
            raise EngineError(errors.JOB_NOT_FOUND)
        return {"ok": True, "job": job.to_wire_with_state()}

    def get_state(self, session: ReplySink, command: cmd.GetState, now: float) -> Reply:
        """GetState: the job's state, `unknown` when the broker does not know it."""
        job = self.state.jobs.get(command.id)
        return {"ok": True, "id": command.id, "state": UNKNOWN if job is None else job.state}

    def get_result(self, session: ReplySink, command: cmd.GetResult, now: float) -> Reply:
        """GetResult: the result a completed job was acknowledged with (nil otherwise)."""
        job = self.state.jobs.get(command.id)
        result = None
        if job is not None and job.state == COMPLETED and job.result is not None:
            result = msgspec.Raw(job.result)
        return {"ok": True, "id": command.id, "result": result}

    def get_job_counts(self, session: ReplySink, command: cmd.GetJobCounts, now: float) -> Reply:
        """GetJobCounts: jobs of the queue by state; a paused queue's ready jobs (waiting and
        prioritized) count as `paused` instead, as GetJobs lists them."""
        return {"ok": True, "counts": self.counts_of(command.queue)}

    def counts_of(self, name: str) -> dict[str, int]:
        """The queue's jobs by state, as GetJobCounts shows them."""
        queue = self.state.queues.get(name)
        counts = dict(queue.counts) if queue else dict.fromkeys(COUNTED_STATES, 0)
        counts["paused"] = 0
        if queue is not None and queue.paused:
            counts["paused"] = counts[WAITING] + counts[PRIORITIZED]
            counts[WAITING] = counts[PRIORITIZED] = 0
        return counts

    def count(self, session: ReplySink, command: cmd.Count, now: float) -> Reply:
        """Count: waiting + prioritized + delayed jobs of the queue."""
        queue = self.state.queues.get(command.queue)
        if queue is None:
            return {"ok": True, "count": 0}
        counts = queue.counts
        return {"ok": True, "count": counts["waiting"] + counts["prioritized"] + counts["delayed"]}
