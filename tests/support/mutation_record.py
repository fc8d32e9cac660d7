"""Keep `make mutation`'s verdicts from one session to the next (tests/mutation_record.json).

mutmut keeps each verdict in `mutants/<source>.meta`, beside a hash of every mutated function, and
a later `mutmut run` (given no mutant names) tests only the mutants it has no verdict for: those of
new functions, of functions whose hash changed, and those not reached yet. `mutants/` itself is not
kept (it is a mutated copy of the tree), and a run over every module takes longer than one session,
so the verdicts are kept here instead:

- `seed` writes a `.meta` file for every recorded source file into a new `mutants/`, before
  `mutmut run`. Only kills and survivors listed in tests/mutation_equivalents.md are written, so
  each run tries the other survivors (and "no tests" verdicts) again against the current tests.
- `save [DIR ...]` merges the `.meta` files under each DIR (default `mutants`) into the record: a
  function's verdicts are replaced when its hash changed, a function no longer in its file is
  dropped, and so is a source file no longer in the tree.
- `pending GLOB` lists the mutants matching GLOB that a run would test.

A recorded verdict stands only while its function's text is unchanged (mutmut itself compares the
hashes) and only for the mutmut version that made it (the record names it). A kill is not
re-checked when tests change, so after deleting or weakening a test run `make mutation
FRESH=yes`, which tests every mutant again (the record then takes its verdicts).
"""

from __future__ import annotations

import fnmatch
import importlib.metadata
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

from tests.support.mutation_score import KILLED_CODES, equivalent_mutants

RECORD_FILE = Path("tests/mutation_record.json")
MUTANT_KEY = re.compile(r"^(?P<function>.+)__mutmut_(?P<number>\d+)$")
SURVIVED = 0

Verdicts = list[int | None]
"""A function's verdicts by mutant number (index 0 is `__mutmut_1`); None: not tested yet."""
FileRecord = dict[str, tuple[str, Verdicts]]
"""A source file's functions (mutmut's names), each with its hash and its verdicts."""


def mutmut_version() -> str | None:
    """The installed mutmut's version (mutant numbers are only comparable within one)."""
    try:
        return importlib.metadata.version("mutmut")
    except importlib.metadata.PackageNotFoundError:
        return None


def recorded_version(path: Path = RECORD_FILE) -> str | None:
    """The mutmut version the record's verdicts came from."""
    if not path.exists():
        return None
    return json.loads(path.read_text(encoding="utf-8")).get("mutmut")


def stands(key: str, code: int | None, equivalents: set[str]) -> bool:
    """Whether a recorded verdict is kept for the next run: a kill, or a survivor listed as
    equivalent. Anything else (a survivor, "no tests", an interrupted run) is tried again."""
    return code in KILLED_CODES or (code == SURVIVED and key in equivalents)


def module_prefix(source: str) -> str:
    """The dotted module name mutmut puts before each mutant of `source` (`store/sqlite.py` ->
    `store.sqlite.`; a package's `__init__.py` is the package itself)."""
    return source.removesuffix(".py").removesuffix("/__init__").replace("/", ".") + "."


def load_record(path: Path = RECORD_FILE) -> dict[str, FileRecord]:
    """The recorded verdicts by source file (empty when there is no record yet)."""
    if not path.exists():
        return {}
    files = json.loads(path.read_text(encoding="utf-8"))["files"]
    return {
        source: {name: (entry[0], entry[1]) for name, entry in functions.items()}
        for source, functions in files.items()
    }


def recorded_results(path: Path = RECORD_FILE) -> Iterator[tuple[str, dict[str, int | None]]]:
    """Each recorded source file's verdicts by mutant name, as mutmut names them."""
    for source, functions in sorted(load_record(path).items()):
        prefix = module_prefix(source)
        yield source, {
            f"{prefix}{name}__mutmut_{number}": code
            for name, (_, verdicts) in functions.items()
            for number, code in enumerate(verdicts, start=1)
        }


def write_record(record: dict[str, FileRecord], path: Path = RECORD_FILE) -> None:
    """Write the record sorted, one function a line, so a diff shows what a run changed."""
    lines = ["{", f'"mutmut": {json.dumps(mutmut_version())},', '"files": {']
    for file_index, source in enumerate(sorted(record)):
        functions = record[source]
        lines.append(f"{json.dumps(source)}: {{")
        for index, name in enumerate(sorted(functions)):
            comma = "," if index < len(functions) - 1 else ""
            lines.append(f"  {json.dumps(name)}: {json.dumps(list(functions[name]))}{comma}")
        lines.append("}," if file_index < len(record) - 1 else "}")
    lines += ["}", "}"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def verdicts_by_function(exit_codes: dict[str, int | None], prefix: str) -> dict[str, Verdicts]:
    """Group a `.meta` file's exit codes by function, in mutant-number order."""
    grouped: dict[str, Verdicts] = {}
    for key, code in exit_codes.items():
        match = MUTANT_KEY.match(key.removeprefix(prefix))
        if match is None:
            continue
        verdicts = grouped.setdefault(match["function"], [])
        number = int(match["number"])
        verdicts.extend([None] * (number - len(verdicts)))
        verdicts[number - 1] = code
    return grouped


def merge_meta(old: FileRecord, meta: dict, prefix: str) -> FileRecord:
    """One source file's record after a run: the run's verdicts win, a verdict the run did not
    reach is kept while its function's hash is unchanged, and removed functions are dropped."""
    verdicts = verdicts_by_function(meta["exit_code_by_key"], prefix)
    merged: FileRecord = {}
    for name, digest in meta["hash_by_function_name"].items():
        new = verdicts.get(name, [])
        old_digest, old_verdicts = old.get(name, ("", []))
        if old_digest == digest:
            width = max(len(new), len(old_verdicts))
            new = [_first_known(new, old_verdicts, i) for i in range(width)]
        merged[name] = (digest, new)
    return merged


def _first_known(new: Verdicts, old: Verdicts, index: int) -> int | None:
    value = new[index] if index < len(new) else None
    if value is None and index < len(old):
        return old[index]
    return value


def save(roots: list[Path], path: Path = RECORD_FILE, tree: Path = Path(".")) -> int:
    """Merge every `.meta` file under `roots` into the record, and drop the source files no
    longer in `tree`; returns how many files changed."""
    record = load_record(path)
    changed = 0
    for root in roots:
        for meta_path in sorted(root.rglob("*.py.meta")):
            source = meta_path.relative_to(root).as_posix().removesuffix(".meta")
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
            merged = merge_meta(record.get(source, {}), meta, module_prefix(source))
            if merged != record.get(source):
                record[source] = merged
                changed += 1
    for source in [s for s in record if not (tree / s).exists()]:
        del record[source]
        changed += 1
    write_record(record, path)
    return changed


def seed(root: Path, path: Path = RECORD_FILE) -> int:
    """Write the verdicts that stand as mutmut's `.meta` files under `root`, a `mutants/`
    that must not exist yet (mutmut reuses an existing one's mutants as they are); returns how
    many were written. A record from another mutmut version seeds nothing."""
    if root.exists():
        raise SystemExit(f"{root}/ exists: save its verdicts and delete it before seeding")
    made_by, installed = recorded_version(path), mutmut_version()
    if made_by != installed:
        print(f"mutation record: from mutmut {made_by}, not {installed}: all mutants run again")
        return 0
    equivalents = equivalent_mutants()
    written = 0
    for source, functions in load_record(path).items():
        prefix = module_prefix(source)
        exit_codes = {}
        for name, (_, verdicts) in functions.items():
            for number, code in enumerate(verdicts, start=1):
                key = f"{prefix}{name}__mutmut_{number}"
                if stands(key, code, equivalents):
                    exit_codes[key] = code
        meta = {
            "exit_code_by_key": exit_codes,
            "hash_by_function_name": {name: digest for name, (digest, _) in functions.items()},
            "type_check_error_by_key": {},
            "durations_by_key": {},
            "estimated_durations_by_key": {},
        }
        meta_path = root / (source + ".meta")
        meta_path.parent.mkdir(parents=True, exist_ok=True)
        meta_path.write_text(json.dumps(meta, indent=1), encoding="utf-8")
        written += 1
    return written


def pending(pattern: str, path: Path = RECORD_FILE) -> list[str]:
    """The recorded mutants matching the glob `pattern` that a run would test: those whose
    verdict does not stand (`stands`). Two runs in two worktrees given disjoint
    halves of this list (`mutmut run NAME ...`) share the work out over two cores."""
    equivalents = equivalent_mutants()
    return [
        name
        for _, verdicts in recorded_results(path)
        for name, code in verdicts.items()
        if fnmatch.fnmatchcase(name, pattern) and not stands(name, code, equivalents)
    ]


def main() -> None:
    """`seed`, `save [DIR ...]` or `pending PATTERN` (see the module's docstring)."""
    command, *args = sys.argv[1:] or ["help"]
    if command == "pending" and len(args) == 1:
        print("\n".join(pending(args[0])))
    elif command == "seed":
        print(f"mutation record: {seed(Path('mutants'))} files seeded from {RECORD_FILE}")
    elif command == "save":
        roots = [Path(arg) for arg in args] or [Path("mutants")]
        print(f"mutation record: {save(roots)} files updated in {RECORD_FILE}")
    else:
        usage = "seed | save [DIR ...] | pending GLOB"
        sys.exit(f"usage: python -m tests.support.mutation_record {usage}")


if __name__ == "__main__":
    main()
