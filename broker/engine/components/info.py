"""What the engine knows of the broker around it: when it started, and how to render the
Prometheus exposition (set by the app: the engine knows no HTTP or metrics library)."""

from __future__ import annotations

from collections.abc import Callable

import attrs


@attrs.define
class BrokerInfo:
    """Set by the actor (`started_ms`) and the app (`prometheus`); read by admin and the
    dashboard."""

    started_ms: float = 0.0
    prometheus: Callable[[], str] | None = None
