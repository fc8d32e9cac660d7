"""When a broker may take a live lease over at once: only from a holder it can prove is its own
dead predecessor (broker/node/identity.py); and what the lease row says of its holder."""

from __future__ import annotations

import os

import attrs
import pytest

from broker.node.identity import (
    UNKNOWN,
    Holder,
    process_alive,
    proven_gone,
    start_time,
    this_process,
)

ME = Holder(
    host="box", boot="boot-1", netns="4026531833", pidns="4026531836", pid=2000, start="900",
    listen=("127.0.0.1:6801",), nonce="me",
)  # fmt: skip
PREDECESSOR = attrs.evolve(ME, pid=1000, start="500", nonce="old")


def dead(pid: int, start: str) -> bool:
    return False


def running(pid: int, start: str) -> bool:
    return True


def test_a_predecessor_on_the_same_address_machine_and_namespace_that_is_not_running_is_gone():
    assert proven_gone(PREDECESSOR.text(), ME, alive=dead) is True


@pytest.mark.parametrize(
    "difference",
    [
        {"host": "other-box"},  # another machine (or a name clash across machines)
        {"boot": "boot-0"},  # a boot id differs: another machine
        {"netns": "4026530000"},  # another network namespace: its 127.0.0.1 is not ours
        {"listen": ("127.0.0.1:6802",)},  # it listened elsewhere: its listener may be open
        {"listen": ()},
        {"nonce": "me"},  # this very process
    ],
)
def test_a_holder_is_not_proven_gone_when_anything_of_the_proof_differs(difference) -> None:
    holder = attrs.evolve(PREDECESSOR, **difference)
    assert proven_gone(holder.text(), ME, alive=dead) is False


def test_a_holder_still_running_in_our_pid_namespace_is_not_gone_whatever_the_bind_says():
    assert proven_gone(PREDECESSOR.text(), ME, alive=running) is False


def test_a_holder_in_another_pid_namespace_is_judged_by_the_address_alone() -> None:
    # Its pid means another process here: whether that one runs tells nothing.
    holder = attrs.evolve(PREDECESSOR, pidns="4026530001")
    assert proven_gone(holder.text(), ME, alive=running) is True


def test_nothing_is_proven_where_the_boot_or_network_namespace_cannot_be_read() -> None:
    for blind in ({"boot": UNKNOWN}, {"netns": UNKNOWN}):
        me, holder = attrs.evolve(ME, **blind), attrs.evolve(PREDECESSOR, **blind)
        assert proven_gone(holder.text(), me, alive=dead) is False


@pytest.mark.parametrize("recorded", [None, "", "3f9a0c1d2e4b5a6c", "trioq/1 host=box", "x y"])
def test_holders_that_name_no_identity_are_never_proven_gone(recorded) -> None:
    # No holder, an older trioq's random id, a damaged row: wait for the expiry.
    assert proven_gone(recorded, ME, alive=dead) is False


def test_a_holder_id_is_one_line_an_operator_can_read_and_it_parses_back() -> None:
    holder = attrs.evolve(ME, listen=("0.0.0.0:6801", "[::]:6801"))
    text = holder.text()
    assert text == (
        "trioq/1 host=box boot=boot-1 netns=4026531833 pidns=4026531836 pid=2000 start=900 "
        "listen=0.0.0.0:6801,[::]:6801 nonce=me"
    )
    assert Holder.parse(text) == holder
    assert Holder.parse(text.replace("pid=2000", "pid=two")) is None


def test_this_process_is_named_by_its_own_pid_start_time_and_listeners() -> None:
    me = this_process(["127.0.0.1:2", "127.0.0.1:1"])
    assert (me.pid, me.listen) == (os.getpid(), ("127.0.0.1:1", "127.0.0.1:2"))
    assert me.start == start_time(os.getpid()) != UNKNOWN
    assert UNKNOWN not in (me.boot, me.netns, me.pidns)
    assert this_process([]).nonce != me.nonce
    assert process_alive(me.pid, me.start) is True
    assert process_alive(me.pid, str(int(me.start) + 1)) is False  # the pid, reused later
    assert process_alive(2**22 + 1, UNKNOWN) is False  # beyond Linux's largest pid
