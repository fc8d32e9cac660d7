"""`make mutation` goes on where the last session stopped: verdicts kept in the record come back
for unchanged functions, and survivors are tried again."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.support import mutation_record
from tests.support.mutation_record import recorded_results, seed
from tests.support.mutation_score import tally
from tests.support.time_limits import real_time_limit_s

SOURCE = "store/sqlite.py"
PREFIX = "store.sqlite."


def write_meta(root: Path, hashes: dict[str, str], codes: dict[str, int | None]) -> None:
    """A `.meta` file as mutmut leaves it after a run."""
    meta = {
        "exit_code_by_key": {PREFIX + key: code for key, code in codes.items()},
        "hash_by_function_name": hashes,
        "type_check_error_by_key": {},
        "durations_by_key": {},
        "estimated_durations_by_key": {},
    }
    path = root / (SOURCE + ".meta")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta), encoding="utf-8")


def read_codes(root: Path) -> dict[str, int | None]:
    meta = json.loads((root / (SOURCE + ".meta")).read_text(encoding="utf-8"))
    return {key.removeprefix(PREFIX): code for key, code in meta["exit_code_by_key"].items()}


@pytest.fixture
def record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A record file of its own, a tree holding SOURCE, and no equivalents listed but
    `commit__mutmut_3`."""
    monkeypatch.setattr(
        mutation_record, "equivalent_mutants", lambda: {f"{PREFIX}commit__mutmut_3"}
    )
    (tmp_path / "tree" / SOURCE).parent.mkdir(parents=True)
    (tmp_path / "tree" / SOURCE).write_text("")
    return tmp_path / "record.json"


def save(roots: list[Path], record: Path) -> int:
    """Save into `record` against the fixture's tree."""
    return mutation_record.save(roots, record, tree=record.parent / "tree")


def test_a_new_run_gets_every_verdict_back_but_the_unlisted_survivors(
    tmp_path: Path, record: Path
) -> None:
    first = tmp_path / "first"
    codes = {"commit__mutmut_1": 1, "commit__mutmut_2": 0, "commit__mutmut_3": 0,
             "commit__mutmut_4": None, "commit__mutmut_5": 33, "load__mutmut_1": -24}
    write_meta(first, {"commit": "aa", "load": "bb"}, codes)
    save([first], record)

    second = tmp_path / "second"
    assert seed(second, record) == 1
    # the survivor _2 and _5 ("no tests") are tried again; the listed one (_3) and the kills
    # stand; _4 was never run
    assert read_codes(second) == {"commit__mutmut_1": 1, "commit__mutmut_3": 0,
                                  "load__mutmut_1": -24}


def test_a_run_replaces_a_changed_function_and_keeps_what_it_did_not_reach(
    tmp_path: Path, record: Path
) -> None:
    first = tmp_path / "first"
    write_meta(first, {"commit": "aa", "load": "bb", "gone": "cc"},
               {"commit__mutmut_1": 1, "commit__mutmut_2": 0, "load__mutmut_1": 1,
                "gone__mutmut_1": 1})
    save([first], record)

    second = tmp_path / "second"
    # load's text changed (new hash): its old verdict no longer holds; commit's _2 not reached
    write_meta(second, {"commit": "aa", "load": "b2"},
               {"commit__mutmut_1": 1, "commit__mutmut_2": None, "load__mutmut_1": None,
                "load__mutmut_2": 0})
    save([second], record)

    [(source, verdicts)] = list(recorded_results(record))
    assert source == SOURCE
    assert verdicts == {PREFIX + "commit__mutmut_1": 1, PREFIX + "commit__mutmut_2": 0,
                        PREFIX + "load__mutmut_1": None, PREFIX + "load__mutmut_2": 0}


def test_the_score_counts_the_recorded_verdicts(tmp_path: Path, record: Path) -> None:
    run = tmp_path / "run"
    write_meta(run, {"commit": "aa"},
               {"commit__mutmut_1": 1, "commit__mutmut_2": 0, "commit__mutmut_3": 0,
                "commit__mutmut_4": None})
    save([run], record)

    counts = tally(recorded_results(record), {f"{PREFIX}commit__mutmut_3"})
    assert dict(counts["store"]) == {"killed": 1, "survived": 1, "equivalent": 1,
                                     "not checked": 1}


def test_pending_lists_what_a_run_would_test(tmp_path: Path, record: Path) -> None:
    run = tmp_path / "run"
    write_meta(run, {"commit": "aa", "load": "bb"},
               {"commit__mutmut_1": 1, "commit__mutmut_2": 0, "commit__mutmut_3": 0,
                "commit__mutmut_4": None, "load__mutmut_1": None})
    save([run], record)

    assert mutation_record.pending("store.sqlite.commit*", record) == [
        PREFIX + "commit__mutmut_2", PREFIX + "commit__mutmut_4"]


@pytest.mark.parametrize(
    ("mutant", "nodeid", "limit"),
    [
        ("broker.engine.components.pulls.x_answer__mutmut_5", "tests/engine/test_x.py::t", 30.0),
        (
            "broker.engine.components.pulls.x_answer__mutmut_5",
            "tests/model/test_engine_model.py::t",
            60.0,
        ),
        ("", "tests/engine/test_x.py::t", 60.0),  # mutmut's clean run
        (None, "tests/engine/test_x.py::t", 60.0),  # make test
    ],
)
def test_a_mutant_that_hangs_a_test_is_killed_in_half_the_time(
    monkeypatch: pytest.MonkeyPatch, mutant: str | None, nodeid: str, limit: float
) -> None:
    if mutant is None:
        monkeypatch.delenv("MUTANT_UNDER_TEST", raising=False)
    else:
        monkeypatch.setenv("MUTANT_UNDER_TEST", mutant)
    assert real_time_limit_s(SimpleNamespace(nodeid=nodeid)) == limit  # type: ignore[arg-type]


def test_a_source_file_gone_from_the_tree_leaves_the_record(
    tmp_path: Path, record: Path
) -> None:
    run = tmp_path / "run"
    write_meta(run, {"commit": "aa"}, {"commit__mutmut_1": 1})
    save([run], record)
    (record.parent / "tree" / SOURCE).unlink()
    save([], record)
    assert list(recorded_results(record)) == []


def test_seeding_needs_a_new_mutants_directory(tmp_path: Path, record: Path) -> None:
    run = tmp_path / "run"
    write_meta(run, {"commit": "aa"}, {"commit__mutmut_1": 1})
    save([run], record)
    with pytest.raises(SystemExit, match="exists"):
        seed(run, record)  # its mutated files would be reused as they are


def test_a_record_from_another_mutmut_seeds_nothing(
    tmp_path: Path, record: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    write_meta(run, {"commit": "aa"}, {"commit__mutmut_1": 1})
    monkeypatch.setattr(mutation_record, "mutmut_version", lambda: "3.8.1")
    save([run], record)
    monkeypatch.setattr(mutation_record, "mutmut_version", lambda: "4.0.0")
    assert seed(tmp_path / "fresh", record) == 0
    assert not (tmp_path / "fresh").exists()
