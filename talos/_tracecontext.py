"""The W3C ``traceparent`` of the caller's OpenTelemetry context, for ``Producer(trace_context=True)``: a
message carries it as a header, and the server's message trace keeps it, so the message's path joins the
application's own distributed traces. ``opentelemetry-api`` is optional: without it there is none."""

from __future__ import annotations

from functools import cache
from typing import Any

__all__ = ["TRACEPARENT_HEADER", "current_traceparent"]

TRACEPARENT_HEADER = "traceparent"


@cache
def _otel_trace() -> Any:
    """The ``opentelemetry.trace`` module, imported once (only by producers that ask); None without it."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace


def current_traceparent() -> str | None:
    """``00-<trace id>-<span id>-<flags>`` of the current span, or None (no valid span, or no OpenTelemetry)."""
    trace = _otel_trace()
    if trace is None:
        return None
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
