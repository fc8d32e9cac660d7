"""The HTTP port's one route table (broker/server/routes.py): pages and command routes side by
side, each request answered by exactly one of them."""

from __future__ import annotations

import re

import trio

from broker.node.app import App
from broker.server.routes import PAGES, TABLE, Page, Route, match
from tests.support.http import http

PARAMETER = re.compile(r"\(\?P<\w+>\[\^/\]\+\)")


def example_path(route: Route | Page) -> str:
    """A path the route answers, each path parameter filled in."""
    return PARAMETER.sub("q", route.pattern.pattern)


def test_each_route_of_the_table_answers_its_own_paths_only() -> None:
    # The table is searched in order: were a page and a command route to share a method and a
    # path, the one behind would never answer.
    for route in TABLE:
        found = match(route.method, example_path(route))
        assert found is not None and found[0] is route, (route, found)


async def test_every_page_is_answered_by_the_http_server(app: App, nursery: trio.Nursery) -> None:
    # Each page names its answer by the `Pages` method's name: one the server lacks would fail.
    for page in PAGES:
        status, _, body = await http(app, nursery, page.method, example_path(page))
        assert status == 200, (page, body)
