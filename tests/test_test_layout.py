"""The tests' own layout: a test file is named after what it checks, and a helper two test files
share lives in tests/support/, so no test module (nor a conftest) imports from another test module
or from a conftest."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# Words that name a file after how its tests came about, not after what they check.
HISTORY_WORDS = ("review", "fixes", "findings", "edges", "extras")


def python_files() -> Iterator[Path]:
    """Every Python file under tests/ (the TypeScript SDK's node_modules holds none of ours)."""
    for path in sorted(TESTS.rglob("*.py")):
        if "node_modules" not in path.parts:
            yield path


def imported_test_modules(path: Path) -> Iterator[str]:
    """The modules under `tests` that `path` imports, relative imports written as `.name`."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                yield "." * node.level + (node.module or "")
            elif node.module and node.module.split(".")[0] == "tests":
                yield node.module
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.split(".")[0] == "tests")


def is_support(module: str) -> bool:
    """Whether `module` is tests.support or one of its modules."""
    return module == "tests.support" or module.startswith("tests.support.")


def test_test_modules_and_conftests_import_helpers_only_from_tests_support() -> None:
    offenders = [
        f"{path.relative_to(TESTS.parent)} imports {module}"
        for path in python_files()
        for module in imported_test_modules(path)
        if not is_support(module)
    ]
    assert offenders == [], "shared helpers belong in tests/support/:\n" + "\n".join(offenders)


def test_no_test_file_is_named_after_history() -> None:
    words = re.compile("|".join(HISTORY_WORDS))
    named = [
        str(path.relative_to(TESTS.parent))
        for path in python_files()
        if path.name.startswith("test_") and words.search(path.stem)
    ]
    assert named == [], "name these after what they check: " + ", ".join(named)


def test_the_layout_checks_see_the_tests() -> None:
    # Guards the two checks above against passing on an empty or misread tree.
    files = list(python_files())
    assert TESTS / "engine" / "test_push_pull.py" in files
    assert "tests.support.engine" in set(imported_test_modules(TESTS / "engine" / "test_keys.py"))
