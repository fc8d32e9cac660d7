"""The webhook target policy on IPv6 forms that carry an IPv4 address: the refusal names what
the carried address is."""

from __future__ import annotations

from broker.engine.rules.webhook_policy import refused_target


def test_nat64_and_teredo_forms_are_judged_by_the_ipv4_address_they_carry() -> None:
    loopback = "Webhook URL cannot point to loopback IP"
    assert refused_target("http://[64:ff9b::7f00:1]/", False) == loopback  # NAT64 of 127.0.0.1
    # Teredo: server 10.0.0.1, client 127.0.0.1 (stored inverted in the last 32 bits).
    assert refused_target("http://[2001:0:a00:1::80ff:fffe]/", False) == loopback


def test_local_and_metadata_names_and_a_missing_host_are_refused() -> None:
    assert refused_target("http:///hook", False) == "Invalid URL format"
    assert refused_target("http:///hook", True) == "Invalid URL format"
    local = "Webhook URL cannot point to localhost"
    assert refused_target("http://app.localhost/", False) == local
    metadata = "Webhook URL cannot point to cloud metadata endpoints"
    for host in ("metadata", "instance-data", "METADATA"):
        assert refused_target(f"http://{host}/", False) == metadata, host
