"""The writer's W3C trace context (``traceparent``), where it had one: its events carry
it as a header, so it rides along on the broker (a STOMP header), in CloudEvents (the
``traceparent`` extension of the distributed-tracing extension) and on webhook requests
(docs/architecture.md, "Trace context").

OpenTelemetry is optional and never imported here: a writer that traces has imported
``opentelemetry.trace`` already to make its spans; one that does not has no span.
"""

from __future__ import annotations

import re
import sys

__all__ = ["TRACEPARENT", "current_traceparent", "valid_traceparent"]

TRACEPARENT = "traceparent"
"""The header (and CloudEvents extension attribute) name: lower case, no hyphen or
underscore, so a JMS selector and a CloudEvents extension name both take it."""

_FORM = re.compile(r"00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-[0-9a-f]{2}")


def valid_traceparent(value: str) -> bool:
    """Whether ``value`` is a version-00 ``traceparent`` (non-zero trace and span ids)."""
    return _FORM.fullmatch(value) is not None


def current_traceparent() -> str | None:
    """The ``traceparent`` of the OpenTelemetry span current in this thread or task, or
    None (no OpenTelemetry in use, no span, or an invalid one)."""
    trace = sys.modules.get("opentelemetry.trace")
    if trace is None:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
