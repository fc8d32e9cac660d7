"""PULL and PULLB: claiming ready jobs now, or parking a long poll until one comes.

A claim respects, in order: a paused queue (nothing), the queue's concurrency and rate
limits (stop), and group limits, PULL's and stored ones (pass the job over, keep looking).
Parked polls are served in arrival order whenever their queue gets a ready job or a freed
slot, and answered empty when their time is up. A repeating job that starts adds its next
occurrence.

Where PULL's group limit lives: here, in `Pulls._group_is_full` (and `_claim`), applying the
rule that QueueState holds (queues.py: `group_options` merges the PULL's `group` options with
the group's stored settings, `group_admits` checks concurrency, rate window and pause,
`record_start` counts a start, `group_frees_at` says when to wake parked polls). The stored
settings are written by groups.py; PUSH's groupMaxSize is admission.py's.

What it may touch: it owns the parked polls (each QueueState's `waiters`; a poll holds its
ReplySink and is skipped once the sink is closed). It reads QueueState's limits, takes ready
entries from and puts them back into its queue's heap, moves a job to active only through
EngineState.claim, adds a repeating job's next occurrence through EngineState.add, and arms
GROUP_WAKE and POLL timers on the wheel. Nothing else.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from broker.engine.routing import Routes
from broker.engine.rules.deadlines import GROUP_WAKE, POLL, QUEUE_SWEEP
from broker.engine.rules.schedule import next_occurrence
from broker.engine.sink import ReplySink
from broker.engine.state.engine_state import EngineState
from broker.engine.state.ids import uuid7
from broker.engine.state.model import ACTIVE, Job, next_occurrence_of
from broker.engine.state.queues import JOB, QueueState, Waiter
from broker.engine.state.wireform import wire_job, wire_jobs
from protocol import commands as cmd

Reply = dict[str, Any]


def drop_answered(waiters: Any) -> None:
    """Remove answered (or orphaned) long polls from the front of a queue's waiters."""
    while waiters and (waiters[0].done or waiters[0].session.closed):
        waiters.popleft()


class Pulls:
    """PULL, PULLB and the long polls they park (see the module docstring)."""

    def __init__(self, state: EngineState) -> None:
        self.state = state

    def routes(self) -> Routes:
        """The commands this component answers."""
        routes = Routes()
        routes.add(cmd.Pull, self.pull)
        routes.add(cmd.PullBatch, self.pull)
        return routes

    def answer_empty(self, waiters: Iterable[Waiter]) -> None:
        """Answer these parked polls with no job (those not answered and still connected)."""
        for waiter in waiters:
            if not waiter.done and not waiter.session.closed:
                waiter.done = True
                waiter.session.stage_reply(self._answer(waiter, [], []), waiter.req_id)

    def poll_timed_out(self, waiter: Waiter) -> None:
        """A parked poll's time is up: answer it with no job, unless it was answered."""
        if not waiter.done:
            waiter.done = True
            waiter.session.stage_reply(self._answer(waiter, [], []), waiter.req_id)
            # Answered polls leave the queue's deque from the front (timeouts expire
            # roughly in arrival order), so an idle queue polled forever stays small; a
            # queue made for polls alone is forgotten once they are answered.
            queue = self.state.queues.get(waiter.command.queue)
            if queue is not None:
                drop_answered(queue.waiters)
                if not any(queue.counts.values()):
                    self.state.queues.note_emptied(queue, self.state.now)

    def answer_parked(self) -> None:
        """Answer every parked long poll with no job (the broker is shutting down)."""
        # Answered polls stay in their deques until `drop_answered` or a serve skips them.
        for queue in self.state.queues.values():
            self.answer_empty(queue.waiters)

    def pull(self, session: ReplySink, command: cmd.Pull, now: float) -> Reply | None:
        """PULL/PULLB: claim ready jobs now, or park until one arrives or the timeout passes."""
        if isinstance(command, cmd.PullBatch):
            batch, count = True, command.count
        else:
            batch, count = False, 1
        state = self.state
        queue = state.queues.get(command.queue)
        if queue is None:  # nothing to claim: answer empty now, or make the queue to park
            if not command.timeout:
                return self._pulled(command, batch, [], [])
            state.queues.admit((command.queue,), state.now)
            queue = state.queues.make(command.queue)
        if queue.has_ready():
            jobs, tokens = self._claim(queue, session, command, count, now)
        else:
            jobs, tokens = [], []
        if jobs or not command.timeout:
            return self._pulled(command, batch, jobs, tokens)
        # Only a poll that parks becomes a Waiter (most PULLs of a busy queue are served now).
        waiter = Waiter(session, command.reqId, command, count, batch)
        queue.park(waiter)
        state.wheel.schedule(now + command.timeout, POLL, waiter)
        return None

    def _claim(
        self, queue: QueueState, session: ReplySink, command: Any, count: int, now: float
    ) -> tuple[list[Job], list]:
        """Claim up to `count` ready jobs for `session`'s `command`, passing over groups at
        their limit."""
        holder = session if command.owner is None and not command.detach else None
        groups = command.group
        if queue.paused:
            return [], []
        limited = queue.concurrency is not None or queue.rate_limit is not None
        if not limited and groups is None and not queue.group_settings:
            return self._claim_unlimited(queue, count, now, command, holder)
        jobs: list[Job] = []
        tokens: list[str | None] = []
        passed_over: list[tuple[Any, ...]] = []
        full_groups: set[str] = set()
        # Read once per claim, not per job (a PULLB takes up to 1000).
        claim, owner, lock_ttl = self.state.claim, command.owner, command.lockTtl
        while len(jobs) < count:
            entry = queue.pop_entry()
            if entry is None:
                break
            job = entry[JOB]
            group = job.opts.group_id
            if group is not None and self._group_is_full(queue, group, groups, now, full_groups):
                passed_over.append(entry)
                continue
            # The queue's limits come last: a start passed over for its group spends no token.
            if limited and not self._queue_admits(queue, now):
                queue.put_back(entry)
                break
            if group is not None:
                options = queue.group_options(group, groups)
                if options is not None:
                    queue.record_start(group, options, now)
            tokens.append(claim(job, now, owner, lock_ttl, holder))
            jobs.append(job)
            if job.opts.repeat is not None:
                self._add_next_occurrence(job, now)
        for entry in passed_over:
            queue.put_back(entry)
        return jobs, tokens

    def _claim_unlimited(
        self, queue: QueueState, count: int, now: float, command: Any, holder: ReplySink | None
    ) -> tuple[list[Job], list]:
        """`_claim` where no limit can pass a job over (no queue limit, no group option, PULL's
        or stored): the jobs are popped, then claimed together (`EngineState.claim_many`). A
        repeating job's next occurrence is added before the next pop, as one at a time."""
        jobs: list[Job] = []
        tokens: list[str | None] = []
        pop = queue.pop_entry
        while len(jobs) < count:
            popped: list[Job] = []
            wanted = count - len(jobs)
            while len(popped) < wanted:
                entry = pop()
                if entry is None:
                    break
                job = entry[JOB]
                popped.append(job)
                if job.opts.repeat is not None:
                    break
            if not popped:
                break
            if len(popped) == 1:  # a PULL: the one-job form (one call less)
                tokens.append(
                    self.state.claim(popped[0], now, command.owner, command.lockTtl, holder)
                )
            else:
                tokens += self.state.claim_many(
                    queue, popped, now, command.owner, command.lockTtl, holder
                )
            jobs += popped
            if popped[-1].opts.repeat is None:
                break  # the count is reached, or the heap is empty
            self._add_next_occurrence(popped[-1], now)
        return jobs, tokens

    def _add_next_occurrence(self, job: Job, now: float) -> None:
        """A repeating job started: its next occurrence waits on the timer wheel, at the time
        its schedule gives (not when this one finishes)."""
        repeat = job.opts.repeat or {}
        if "count" not in repeat or repeat.get("nextCreated"):
            return
        run_at = next_occurrence(repeat, job.run_at, now)
        repeat["nextCreated"] = True  # only once, even if this occurrence runs again
        self.state.touch(job)
        if run_at is not None:
            self.state.add(next_occurrence_of(job, uuid7(), run_at, now), now)

    def _queue_admits(self, queue: QueueState, now: float) -> bool:
        """The queue's concurrency limit and rate limit allow one more start."""
        if queue.concurrency is not None and queue.counts[ACTIVE] >= queue.concurrency:
            return False
        wait_until = queue.take_token(now)
        if wait_until is not None:
            self.state.wheel.schedule(wait_until, GROUP_WAKE, queue)
            return False
        return True

    def _group_is_full(
        self, queue: QueueState, group: str, groups: Any, now: float, full: set[str]
    ) -> bool:
        """Whether the job's group is at a limit, the PULL's or its stored settings' (then
        the job is passed over)."""
        options = queue.group_options(group, groups)
        if options is None or queue.group_admits(group, options, now):
            return False
        if group not in full:
            full.add(group)
            self._wake_when_group_frees(queue, group, options)
        return True

    def _wake_when_group_frees(self, queue: QueueState, group: str, options: Any) -> None:
        # The pull that met the limit may be about to park: wake the queue's parked pulls
        # when the window lets the group start again.
        frees_at = queue.group_frees_at(group, options)
        if frees_at is not None:
            self.state.wheel.schedule(frees_at, GROUP_WAKE, queue)

    def _answer(self, waiter: Waiter, jobs: list[Job], tokens: list) -> Reply:
        """The reply to a parked poll."""
        return self._pulled(waiter.command, waiter.batch, jobs, tokens)

    def _pulled(self, command: Any, batch: bool, jobs: list[Job], tokens: list) -> Reply:
        leased = command.owner is not None
        if batch:
            reply: Reply = {"ok": True, "jobs": wire_jobs(jobs)}
            if leased:
                reply["tokens"] = tokens
            return reply
        reply = {"ok": True, "job": wire_job(jobs[0]) if jobs else None}
        if leased:
            reply["token"] = tokens[0] if tokens else None
        return reply

    def serve_waiters(self, queue: QueueState, now: float) -> None:
        """Serve the queue's parked polls, in arrival order, while it has ready jobs (those whose
        jobs all belong to groups at their limit keep waiting)."""
        waiters = queue.waiters
        while waiters and queue.has_ready():
            waiter = waiters.popleft()
            if waiter.done or waiter.session.closed:
                continue
            jobs, tokens = self._claim(queue, waiter.session, waiter.command, waiter.count, now)
            if not jobs:  # what is ready belongs to groups at their limit: keep waiting
                waiters.appendleft(waiter)
                return  # at the front, not answered: nothing for drop_answered
            waiter.done = True
            reply = self._pulled(waiter.command, waiter.batch, jobs, tokens)  # `_answer`, inline
            waiter.session.stage_reply(reply, waiter.req_id)
        if waiters:  # `drop_answered`'s first check, inline: the served poll left the deque
            drop_answered(waiters)
        # The served polls' timers, when they are next due (as under a steady stream of
        # long polls): gone now, the actor sleeps until a live deadline instead of waking for
        # each of them and the heap stays small.
        self.state.wheel.drop_done(POLL, over=QUEUE_SWEEP)
