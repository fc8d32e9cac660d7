"""The import rule: `protocol` and `store` are leaves and never import `broker`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", ["protocol", "store"])
def test_leaf_packages_do_not_import_broker_or_trio(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package} has no modules"
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_modules(path) & {"broker", "trio"})
        for path in files
    }
    assert {name: bad for name, bad in offenders.items() if bad} == {}
