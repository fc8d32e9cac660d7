"""The SDK benchmark's own logic: CPU time read from /proc, the client handshake, the report
table and the command line, the py-spy summaries and the names of the SDK-shaped instruction
scenarios (no servers, no SDK, no timing)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from benchmarks import loadgen, phase_instructions, stacks
from benchmarks.compare import kinds_for, with_reference
from benchmarks.sdk import (
    SDK_ROWS,
    ClientProcess,
    CpuTime,
    SdkError,
    SdkRun,
    client_command,
    cpu_now,
    describe,
    parse_args,
    parse_report,
    sdk_table,
    stat_ticks,
    tree_cpu,
)


def stat_line(pid: int, comm: str, utime: int, stime: int, cutime: int, cstime: int) -> str:
    """A /proc/<pid>/stat line with the given times (fields 14-17) and filler elsewhere."""
    before = ["S", "1", str(pid), str(pid), "0", "-1", "4194560", "10", "0", "0", "0"]
    after = ["20", "0", "3", "0", "100", "1000", "200"]
    times = [str(utime), str(stime), str(cutime), str(cstime)]
    return f"{pid} ({comm}) " + " ".join(before + times + after) + "\n"


def test_stat_ticks_adds_own_and_reaped_children_times_whatever_the_name() -> None:
    assert stat_ticks(stat_line(7, "python", 120, 30, 5, 1)) == (125, 31)  # user, system
    # A command name with spaces and parentheses must not shift the fields.
    assert stat_ticks(stat_line(8, "bun (x) y) z", 1, 2, 3, 4)) == (4, 6)


def fake_proc(root: Path, stats: dict[int, str]) -> None:
    for pid, line in stats.items():
        (root / str(pid)).mkdir()
        (root / str(pid) / "stat").write_text(line)


def test_tree_cpu_counts_the_process_and_its_children_in_seconds(tmp_path: Path) -> None:
    fake_proc(
        tmp_path,
        {
            10: stat_line(10, "trioq", 200, 100, 50, 0),
            11: stat_line(11, "child", 40, 10, 0, 0),
            99: stat_line(99, "stranger", 1000, 1000, 0, 0),
        },
    )
    cpu = tree_cpu(10, proc_root=tmp_path, children=lambda pid: [11, 12], ticks_per_second=100)
    # 250 + 40 user and 100 + 10 system ticks; 12 vanished; 99 is not in the tree
    assert cpu == pytest.approx(CpuTime(2.9, 1.1)) and cpu.total == pytest.approx(4.0)


def test_a_vanished_server_reads_as_no_time(tmp_path: Path) -> None:
    assert tree_cpu(5, proc_root=tmp_path, children=lambda pid: []) == CpuTime(0.0, 0.0)


def test_cpu_readings_of_a_real_process_only_grow() -> None:
    first = cpu_now(os.getpid())
    sum(range(200_000))
    second = cpu_now(os.getpid())
    assert first is not None and second is not None
    assert second.since(first).user >= 0 and second.since(first).system >= 0
    assert cpu_now(None) is None


def test_time_since_a_reading_never_goes_negative() -> None:
    # A child that exited but was not waited for drops out of the tree between readings.
    assert CpuTime(2.0, 0.5).since(CpuTime(2.5, 0.25)) == CpuTime(0.0, 0.25)


def test_a_run_gives_its_rate_and_the_servers_cpu_per_thousand_jobs() -> None:
    run = SdkRun(jobs=10_000, seconds=0.5, server_cpu=CpuTime(1.2, 0.3), client_cpu=None)
    assert run.rate == 20_000
    assert run.server_cpu_per_1000 == pytest.approx(0.15)
    assert describe(run).split() == ["20,000", "jobs/s", "CPU", "s:", "server", "1.50", "(sys",
                                     "20%),", "client", "-"]  # fmt: skip
    assert SdkRun(jobs=10, seconds=1.0, server_cpu=None).server_cpu_per_1000 is None


def runs(*rates_and_cpu: tuple[float, float]) -> list[SdkRun]:
    """Runs of 1,000 jobs with the given jobs/s and server CPU seconds."""
    return [SdkRun(1000, 1000 / rate, CpuTime(cpu, 0.0)) for rate, cpu in rates_and_cpu]


def test_the_table_gives_medians_spreads_cpu_and_ratios_per_mode_and_row() -> None:
    add, bulk = SDK_ROWS[0], SDK_ROWS[1]
    results = {
        ("trioq", "memory"): {
            "add": runs((60_000, 0.2), (40_000, 0.4), (50_000, 0.3)),
            "bulk": runs((30_000, 0.1)),
        },
        ("reference", "memory"): {"add": runs((25_000, 0.6)), "bulk": runs((60_000, 0.05))},
        ("trioq", "sqlite"): {"add": runs((20_000, 0.5))},
    }
    text = sdk_table(["memory", "sqlite"], ["trioq", "reference"], results, [add, bulk])
    lines = text.splitlines()
    assert lines[0].split() == [
        "SDK", "workload", "(jobs/s:", "median", "(low-high))",
        "trioq", "CPU", "s/1k", "reference", "CPU", "s/1k", "trioq/ref", "CPU", "trioq/ref",
    ]  # fmt: skip
    memory_add = lines[2].split()
    assert memory_add[-8:] == [
        "50,000", "(40,000-60,000)", "0.300",
        "25,000", "(25,000-25,000)", "0.600",
        "2.00x", "0.50x",
    ]  # fmt: skip
    assert lines[3].split()[-2:] == ["0.50x", "2.00x"]  # slower, and twice the CPU per job
    sqlite_add, sqlite_bulk = lines[4].split(), lines[5].split()
    assert sqlite_add[-5:] == ["0.500", "-", "-", "-", "-"]  # no reference run: no ratio
    assert sqlite_bulk[0:2] == ["sqlite:", "addBulk(100),"] and sqlite_bulk[-6:] == ["-"] * 6


def test_the_table_shows_unknown_cpu_as_a_dash() -> None:
    results = {("trioq", "memory"): {"add": [SdkRun(100, 1.0, None)]}}
    line = sdk_table(["memory"], ["trioq"], results, SDK_ROWS[:1]).splitlines()[2]
    assert line.split()[-2:] == ["(100-100)", "-"]


def test_a_report_must_account_for_every_job_asked_for() -> None:
    assert parse_report('{"jobs": 500, "seconds": 0.25, "pushSeconds": 0.1}', 500) == (500, 0.25)
    with pytest.raises(SdkError, match="499 jobs"):
        parse_report('{"jobs": 499, "seconds": 0.25}', 500)
    with pytest.raises(SdkError, match="not a report"):
        parse_report("Error: connection refused", 500)


def test_the_handshake_waits_for_go_and_reads_the_report() -> None:
    script = "print('ready', flush=True); input(); print('{\"jobs\": 3, \"seconds\": 0.5}')"
    with ClientProcess([sys.executable, "-c", script]) as client:
        assert client.next_line(30, "ready") == "ready"
        client.go()
        assert parse_report(client.next_line(30, "report"), 3) == (3, 0.5)
        client.finish()
        assert client.process.returncode == 0


def test_a_client_that_dies_early_fails_the_row_with_its_error_output() -> None:
    script = "import sys; sys.stderr.write('ECONNREFUSED 127.0.0.1:1\\n'); sys.exit(3)"
    with (
        ClientProcess([sys.executable, "-c", script]) as client,
        pytest.raises(SdkError, match=r"exited \(code 3\) before ready: ECONNREFUSED"),
    ):
        client.next_line(30, "ready")


def test_each_row_runs_its_own_sdk_client() -> None:
    by_key = {row.key: row for row in SDK_ROWS}
    ts = client_command(by_key["process"], "127.0.0.1", 6789, "q1", 10_000)
    assert ts[0].endswith("node_modules/.bin/bun") and ts[1:3] == ["run", ts[2]]
    assert ts[2].endswith("benchmarks/sdk_client.ts")
    assert ts[3:] == ["process", "127.0.0.1", "6789", "q1", "10000"]
    python = client_command(by_key["pyworker"], "::1", 7000, "q2", 5)
    assert python[1:] == ["-m", "benchmarks.sdk_python", "::1", "7000", "q2", "5"]


def test_the_command_line_picks_rows_in_the_order_given_and_rejects_unknown_ones() -> None:
    args = parse_args(["--rows", "pyworker,add", "--modes", "memory,postgres"])
    assert [row.key for row in args.rows] == ["pyworker", "add"]
    assert args.modes == ["memory", "postgres"] and args.jobs == 10_000 and args.repeat == 3
    with pytest.raises(SystemExit):
        parse_args(["--rows", "add,nope"])


def test_no_reference_leaves_two_trioq_builds_to_compare(tmp_path: Path) -> None:
    scripts = tmp_path / "reference"
    scripts.mkdir()
    (scripts / "start.sh").touch()
    (scripts / "stop.sh").touch()
    (tmp_path / "compiled" / "broker").mkdir(parents=True)  # another build of trioq
    build = ["--reference-dir", str(scripts), "--baseline", str(tmp_path / "compiled")]
    for parse in (parse_args, lambda argv: loadgen.parse_args(["--compare", *argv])):
        assert with_reference(parse(build))
        args = parse([*build, "--no-reference"])
        assert not with_reference(args)
        assert kinds_for("memory", 1, args, with_reference(args)) == ["before", "trioq"]
    missing = parse_args(["--reference-dir", str(tmp_path / "nowhere")])
    assert not with_reference(missing)


def test_stack_summaries_split_self_and_total_time_and_name_the_callers() -> None:
    lines = [
        "main (broker/cli.py:165);run (trio/_core/_run.py:2532);"
        "Session._send (broker/server/session.py:99);send (broker/server/tcp.py:301) 6",
        "main (broker/cli.py:165);run (trio/_core/_run.py:2532);"
        "Session._send (broker/server/session.py:101);send (broker/server/tcp.py:302) 2",
        "main (broker/cli.py:165);Engine.pull (broker/engine/core.py:40);"
        "encode (msgspec/__init__.py:1) 2",
        "not a stack line",
        "",
    ]
    profile = stacks.parse(lines)
    assert profile.samples == 10
    assert profile.self_counts.most_common(2) == [
        ("send (server/tcp.py)", 8),
        ("encode (msgspec/__init__.py)", 2),
    ]
    assert profile.total_counts["main (broker/cli.py)"] == 10  # once per stack, not per frame
    assert profile.group_counts == {"broker server": 8, "msgspec": 2}
    text = stacks.report(profile, top=2, callers=1)
    assert "  80.0%  send (server/tcp.py)" in text
    assert (
        "  80.0%  Session._send (server/session.py) < run (_core/_run.py) < main (broker/cli.py)"
        in text.split("callers of send (server/tcp.py) (self time):")[1]
    )
    assert stacks.report(stacks.parse([]), top=5) == "no samples"


def test_sdk_shaped_instruction_scenarios_name_their_batch_size_and_events() -> None:
    assert phase_instructions.sdk_scenario("spullb:20+events") == ("spullb", 20, True)
    assert phase_instructions.sdk_scenario("pushb:32") == ("pushb", 32, False)
    assert phase_instructions.sdk_scenario("pullb") is None  # the older scenarios stay as they were
    for malformed in ("pushb", "pushb:0", "sackb:x", "jhb:40+event"):
        with pytest.raises(ValueError, match="write"):
            phase_instructions.sdk_scenario(malformed)
    # Whole batches only: the count per job divides by the jobs actually sent.
    assert phase_instructions.jobs_of("pushb:32", 1000) == 1024
    assert phase_instructions.jobs_of("sackb:20", 1000) == 1000
    assert phase_instructions.jobs_of("ack", 999) == 999
