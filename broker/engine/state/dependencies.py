"""Dependencies: which jobs wait for which, and the ids of jobs known to have completed.

`dependents` maps a job id to the ids of the jobs waiting for it (`dependsOn`); `done_ids`
remembers, oldest first and up to KEEP_DONE_IDS, the ids of completed jobs the broker no
longer holds (removeOnComplete, retention), which still satisfy a later `dependsOn`.
EngineState decides when a job waits or is released; this object only keeps the edges.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping

from broker.engine.state.model import COMPLETED, Job

# Ids of completed jobs the broker no longer holds that still satisfy a later `dependsOn`; the
# oldest are dropped past this many (memory only).
KEEP_DONE_IDS = 50_000


class Dependencies:
    """The waiting edges between jobs and the remembered completed ids."""

    def __init__(self, jobs: Mapping[str, Job]) -> None:
        self._jobs = jobs  # the live jobs (EngineState's), read to tell a completed one
        self.dependents: dict[str, list[str]] = {}
        # Oldest first. An OrderedDict drops its oldest in O(1); a dict's next(iter()) walks
        # over the holes its front deletions leave, which grows with every eviction.
        self.done_ids: OrderedDict[str, None] = OrderedDict()

    def completed_once(self, job_id: str) -> bool:
        """Whether `job_id` completed (held now, or forgotten since): a satisfied dependency."""
        job = self._jobs.get(job_id)
        return job.state == COMPLETED if job is not None else job_id in self.done_ids

    def remember_done(self, job_id: str, keep: int = KEEP_DONE_IDS) -> None:
        """A completed job is forgotten: its id still satisfies a `dependsOn` (the newest
        `keep` ids are remembered)."""
        done = self.done_ids
        done[job_id] = None
        if len(done) > keep:
            done.popitem(last=False)

    def remember_done_jobs(self, jobs: Iterable[Job], keep: int = KEEP_DONE_IDS) -> None:
        """`remember_done` for the ids of many jobs (the oldest past the cap dropped after)."""
        done = self.done_ids
        for job in jobs:
            done[job.id] = None
        while len(done) > keep:
            done.popitem(last=False)

    def live_again(self, job_id: str) -> None:
        """A job is pushed under `job_id` (a reused custom id): it no longer counts as done."""
        if self.done_ids:
            self.done_ids.pop(job_id, None)

    def wait(self, job_id: str, dep_id: str) -> None:
        """`job_id` waits for `dep_id` to complete (once, however often it is asked)."""
        waiting = self.dependents.setdefault(dep_id, [])
        if job_id not in waiting:
            waiting.append(job_id)

    def stop_waiting(self, job_id: str, dep_id: str) -> bool:
        """`job_id` no longer waits for `dep_id`; False when it was not waiting for it."""
        waiting = self.dependents.get(dep_id)
        if not waiting or job_id not in waiting:
            return False
        waiting.remove(job_id)
        return True

    def take_waiting(self, dep_id: str) -> list[str]:
        """The ids of the jobs that waited for `dep_id`, which just completed (the edges go)."""
        return self.dependents.pop(dep_id, [])
