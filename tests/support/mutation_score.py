"""Print the mutation score per module (used by `make mutation`).

mutmut keeps one `mutants/<source path>.meta` JSON file per mutated source file, mapping each
mutant to the exit code of its test run; tests/support/mutation_record.py keeps those verdicts
between sessions in tests/mutation_record.json, which is what is scored unless `--mutants` is
given. A mutant counts as killed when a test failed, timed out, crashed or the type check caught
it; it counts as equivalent when `tests/mutation_equivalents.md` names it (in backquotes) with a
reason. The score is (killed + equivalent) / checked.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

MODULES = ("protocol", "store", "broker/engine")
KILLED_CODES = {1, 3, 36, 37, 24, -24, 152, 255, -11, -9}
SURVIVED_CODES = {0}
UNCHECKED = None  # not run yet (e.g. a run limited to one module)
EQUIVALENTS_FILE = Path("tests/mutation_equivalents.md")
MUTANT_NAME = re.compile(r"`([\w.ǁ]+__mutmut_\d+)`")


def equivalent_mutants(path: Path = EQUIVALENTS_FILE) -> set[str]:
    """The mutant names listed as equivalent (each with its reason) in the equivalents file."""
    if not path.exists():
        return set()
    return set(MUTANT_NAME.findall(path.read_text(encoding="utf-8")))


def module_of(source: str) -> str | None:
    """Which of MODULES a source file (`store/sqlite.py`) belongs to, or None for files outside
    them."""
    return next((m for m in MODULES if source.startswith(m + "/")), None)


def meta_results(root: Path) -> Iterator[tuple[str, dict[str, int | None]]]:
    """Each source file's exit codes by mutant, from the `.meta` files of a run under `root`."""
    for meta_path in sorted(root.rglob("*.py.meta")):
        source = meta_path.relative_to(root).as_posix().removesuffix(".meta")
        yield source, json.loads(meta_path.read_text(encoding="utf-8"))["exit_code_by_key"]


def tally(
    results: Iterable[tuple[str, dict[str, int | None]]],
    equivalents: set[str],
    by_file: bool = False,
) -> dict[str, Counter[str]]:
    """Per module (or per source file, with `by_file`): how many mutants were killed,
    equivalent, survived, untested, not checked."""
    counts: dict[str, Counter[str]] = {} if by_file else {m: Counter() for m in MODULES}
    for source, exit_codes in results:
        module = module_of(source)
        if module is None:
            continue
        if by_file:
            module = source
            counts.setdefault(module, Counter())
        for name, code in exit_codes.items():
            counts[module][classify(name, code, equivalents)] += 1
    return counts


def classify(name: str, code: int | None, equivalents: set[str]) -> str:
    """One mutant's outcome (an equivalent survivor is reported apart from a real survivor)."""
    if code is UNCHECKED:
        return "not checked"
    if code in KILLED_CODES:
        return "killed"
    if name in equivalents:
        return "equivalent"
    if code in SURVIVED_CODES:
        return "survived"
    return "no tests" if code in {5, 33} else "other"


def report(counts: dict[str, Counter[str]]) -> list[str]:
    """One line per module: the score and the counts behind it."""
    lines = []
    width = max(map(len, counts), default=0)
    for module, count in counts.items():
        checked = sum(n for outcome, n in count.items() if outcome != "not checked")
        if not checked:
            lines.append(f"{module:{width}} not run")
            continue
        score = 100.0 * (count["killed"] + count["equivalent"]) / checked
        detail = ", ".join(f"{outcome} {n}" for outcome, n in sorted(count.items()))
        lines.append(f"{module:{width}} {score:5.1f}% of {checked} mutants ({detail})")
    return lines


def main() -> None:
    """Print the per-module scores of tests/mutation_record.json (`--mutants`: of the run under
    ./mutants alone; `--files`: one line per source file)."""
    from tests.support.mutation_record import RECORD_FILE, recorded_results

    args = sys.argv[1:]
    if "--mutants" in args:
        root = Path("mutants")
        if not root.is_dir():
            sys.exit("no mutants/ directory: run `make mutation` first")
        results: Iterable[tuple[str, dict[str, int | None]]] = list(meta_results(root))
    else:
        if not RECORD_FILE.exists():
            sys.exit(f"no {RECORD_FILE}: run `make mutation` first")
        results = list(recorded_results())
    equivalents = equivalent_mutants()
    print("\n".join(report(tally(results, equivalents, "--files" in args))))
    stale = listed_but_killed(results, equivalents)
    if stale:
        print(f"listed as equivalent but killed (renumbered? fix {EQUIVALENTS_FILE}): "
              + ", ".join(stale))


def listed_but_killed(
    results: Iterable[tuple[str, dict[str, int | None]]], equivalents: set[str]
) -> list[str]:
    """Mutants the equivalents file lists that a test killed: a row whose mutant number now
    names another change (mutmut numbers a function's mutants in order)."""
    return sorted(
        name
        for _, exit_codes in results
        for name, code in exit_codes.items()
        if name in equivalents and code in KILLED_CODES
    )


if __name__ == "__main__":
    main()
