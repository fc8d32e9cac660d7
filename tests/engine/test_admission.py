"""Dependency cycles among the jobs of one flow or batch (`find_cycle`)."""

from __future__ import annotations

from broker.engine.rules.admission import find_cycle


def test_a_cycle_is_found_after_roots_already_explored() -> None:
    edges = {"a": ["b"], "b": [], "c": ["d"], "d": ["c"]}
    assert find_cycle(edges) == ["c", "d", "c"]


def test_a_cycle_that_does_not_pass_through_its_root_is_found() -> None:
    assert find_cycle({"a": ["b"], "b": ["c"], "c": ["b"]}) == ["b", "c", "b"]


def test_a_diamond_is_no_cycle() -> None:
    assert find_cycle({"a": ["b", "c"], "b": ["d"], "c": ["d"], "d": ["outside"]}) is None


def test_shared_dependencies_are_explored_once() -> None:
    # 40 diamonds in a row: 2**40 paths, so only a search that skips finished ids ends.
    edges: dict[str, list[str]] = {}
    for layer in range(40):
        edges[f"n{layer}"] = [f"l{layer}", f"r{layer}"]
        edges[f"l{layer}"] = edges[f"r{layer}"] = [f"n{layer + 1}"]
    edges["n40"] = []
    assert find_cycle(edges) is None
