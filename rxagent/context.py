"""Who a run is for: the runtime context passed to every part of a run (tools, permissions, middleware)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rxagent.messages import new_id

__all__ = ["RuntimeContext"]


@dataclass(frozen=True, slots=True)
class RuntimeContext:
    """Identity and attributes of one run.

    Attributes:
        user_id: the end user the run acts for (tools and permissions may depend on it).
        session_id: the conversation the run belongs to.
        trace_id: correlates every event, log line and request of the run.
        attributes: free-form application data (tenant, locale, feature flags, …).
    """

    user_id: str | None = None
    session_id: str | None = None
    trace_id: str = field(default_factory=lambda: new_id("trace"))
    attributes: Mapping[str, Any] = field(default_factory=lambda: {})
