"""The broker's logger names: operators filter on them, so a module that moved keeps the name it
logged under before the move (docs/architecture.md), and one that did not move logs under its
own module name."""

from __future__ import annotations

import importlib

import pytest

# (module, the logger name its records carry: the module's name before the layers' split).
MOVED = [
    ("broker.node.app", "broker.app"),
    ("broker.node.ha", "broker.ha"),
    ("broker.node.forwarding", "broker.forwarding"),
    ("broker.services.webhooks", "broker.webhooks"),
    ("broker.engine.components.bulk", "broker.engine.bulk"),
    ("broker.engine.components.settings", "broker.engine.settings"),
    ("broker.engine.rules.deadlines", "broker.engine.deadlines"),
    # The commit pipeline's records were the actor's (broker/engine/actor.py) before the split.
    ("broker.engine.runtime.commits", "broker.engine.actor"),
]


@pytest.mark.parametrize(("module", "name"), MOVED)
def test_a_moved_module_logs_under_its_old_name(module: str, name: str) -> None:
    assert importlib.import_module(module).log.name == name


@pytest.mark.parametrize(
    "module",
    [
        "broker.engine.core",
        "broker.events",
        "broker.server.tcp",
        "broker.server.http",
        "store.sqlite",
        "store.postgres",
    ],
)
def test_a_module_that_stayed_logs_under_its_own_name(module: str) -> None:
    assert importlib.import_module(module).log.name == module
