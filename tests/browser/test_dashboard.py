"""The dashboard in a real browser: live counts, the failed-job path, pausing, auth, escaping.

Jobs are pushed, pulled and failed by a TCP client, as a user's workers would; the page must
show the effect without being reloaded.
"""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from tests.support.broker import FrameSocket
from tests.support.browser import Dashboard

NO_RELOAD_MARK = "window.__stillTheSamePage = true"


def mark_page(page: Any) -> None:
    """Mark the loaded page; `same_page` later proves nothing reloaded it."""
    page.evaluate(NO_RELOAD_MARK)


def same_page(page: Any) -> bool:
    return page.evaluate("window.__stillTheSamePage === true")


def push(client: FrameSocket, queue: str, data: Any = None, **options: Any) -> str:
    reply = client.call("PUSH", queue=queue, name="send", data=data or {}, **options)
    assert reply["ok"], reply
    return str(reply["id"])


def test_overview_shows_queues_and_counts_update_live(dashboard_factory: Any) -> None:
    dashboard: Dashboard = dashboard_factory()
    with FrameSocket(dashboard.process.address) as client:
        for n in range(2):
            push(client, "emails", {"to": f"user{n}@example.com"})
        push(client, "reports", {"month": "2026-11"})
        page = dashboard.open()
        waiting = page.locator('#queues tr[data-queue="emails"] td[data-count="waiting"]')
        expect(waiting).to_have_text("2")
        expect(page.locator("#health")).to_contain_text("store memory")
        mark_page(page)
        for n in range(3):
            push(client, "emails", {"to": f"late{n}@example.com"})
        expect(waiting).to_have_text("5")
        job = client.call("PULL", queue="emails", timeout=0)["job"]
        client.call("ACK", id=job["id"], result={"sent": True})
        expect(waiting).to_have_text("4")
        assert same_page(page)
        expect(page.locator("#live")).to_have_text("● live")
        dashboard.screenshot("overview")
    assert dashboard.errors == []


def test_a_failed_job_is_two_clicks_away_and_retried_from_the_dlq(dashboard_factory: Any) -> None:
    dashboard: Dashboard = dashboard_factory()
    with FrameSocket(dashboard.process.address) as client:
        job_id = push(client, "billing", {"invoice": 42}, maxAttempts=1)
        assert client.call("PULL", queue="billing", timeout=0)["job"]["id"] == job_id
        stack = ["Error: card declined", "    at charge (billing.py:12)"]
        client.call("FAIL", id=job_id, error="card declined", stack=stack)
        page = dashboard.open()
        page.click('#queues a[href="#/queue/billing"]')  # click 1: the queue
        dlq_row = page.locator(f'#dlq tr[data-job="{job_id}"]')
        expect(dlq_row.locator(".failure")).to_have_text("card declined")
        dashboard.screenshot("queue-with-dlq")
        dlq_row.locator("a").click()  # click 2: the job
        expect(page.locator("#job-error")).to_have_text("card declined")
        expect(page.locator("#job-stack")).to_contain_text("at charge (billing.py:12)")
        expect(page.locator("#timeline li")).to_have_count(3)
        dashboard.screenshot("failed-job")
        page.go_back()
        page.locator(f'#dlq tr[data-job="{job_id}"] button.retry').click()
        expect(page.locator("#notice")).to_contain_text("Retried")
        expect(page.locator("#dlq-empty")).to_be_visible()
        assert client.call("GetState", id=job_id)["state"] == "waiting"
    assert dashboard.errors == []


def test_pausing_a_queue_from_the_page_stops_pulls(dashboard_factory: Any) -> None:
    dashboard: Dashboard = dashboard_factory()
    with FrameSocket(dashboard.process.address) as client:
        push(client, "video", {"file": "a.mp4"})
        page = dashboard.open("#/queue/video")
        page.click("#pause")
        expect(page.locator("#confirm")).not_to_be_visible()  # pausing needs no confirmation
        expect(page.locator("#paused-badge")).to_have_text("paused")
        assert client.call("PULL", queue="video", timeout=0)["job"] is None
        page.click("#drain")
        expect(page.locator("#confirm-text")).to_contain_text("Drain")
        page.click("#confirm-ok")
        expect(page.locator("#notice")).to_contain_text("Drained: 1 job(s) affected")
        dashboard.screenshot("paused-queue")
        page.click("#resume")
        expect(page.locator("#pause")).to_be_visible()
        push(client, "video", {"file": "b.mp4"})
        assert client.call("PULL", queue="video", timeout=0)["job"] is not None
    assert dashboard.errors == []


def test_with_a_token_the_page_asks_for_it_once_per_tab(dashboard_factory: Any) -> None:
    dashboard: Dashboard = dashboard_factory("--auth-token", "tab-secret")
    page = dashboard.open()
    expect(page.locator("#auth-reason")).to_contain_text("401 Unauthorized")
    dashboard.screenshot("auth-prompt")
    page.fill("#token", "wrong")
    page.click("form.auth button")
    expect(page.locator("#auth-reason")).to_contain_text("refused this token")
    page.fill("#token", "tab-secret")
    page.click("form.auth button")
    expect(page.locator("h1")).to_have_text("Overview")
    page.reload()  # kept for the tab: no second prompt
    expect(page.locator("h1")).to_have_text("Overview")
    assert page.evaluate("sessionStorage.getItem('trioq.token')") == "tab-secret"
    assert page.evaluate("localStorage.length") == 0
    assert dashboard.errors == []


XSS_DATA = {
    "html": "<script>window.__xss = 'script'</script>",
    "img": "<img src=x onerror=\"window.__xss = 'img'\">",
}


def test_job_data_is_shown_as_text_and_never_runs(dashboard_factory: Any) -> None:
    dashboard: Dashboard = dashboard_factory()
    with FrameSocket(dashboard.process.address) as client:
        page = dashboard.open("#/events")
        expect(page.locator("#events-status")).to_have_text("showing events as they happen")
        expect(page.locator("#live")).to_have_text("● live")
        job_id = push(client, "inbox", XSS_DATA, maxAttempts=1)
        client.call("PULL", queue="inbox", timeout=0)
        client.call("FAIL", id=job_id, error="<img src=x onerror=\"window.__xss='error'\">")
        events = page.locator("#events tbody")
        for kind in ("pushed", "active", "failed"):
            expect(events).to_contain_text(kind)
        page.goto(dashboard.url + f"#/job/{job_id}")
        expect(page.locator("#job-data")).to_contain_text(
            "<script>window.__xss = 'script'</script>"
        )
        expect(page.locator("#job-error")).to_contain_text("<img src=x")
        page.goto(dashboard.url + "#/queue/inbox")
        page.click('button[data-state="failed"]')
        expect(page.locator("#jobs")).to_contain_text("<img src=x")
        expect(page.locator("#dlq .failure")).to_contain_text("<img src=x")
        dashboard.screenshot("escaped-job-data")
        assert page.evaluate("window.__xss") is None
        assert page.locator("#view img").count() == 0
        assert page.locator("#view script").count() == 0
    assert dashboard.errors == []
