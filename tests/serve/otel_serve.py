"""``rxagent serve`` with an OpenTelemetry SDK set up first, as ``opentelemetry-instrument`` would: spans are
written to a file as JSON lines (the SDK's console exporter, one span a line).

Run: ``python tests/serve/otel_serve.py SPANS_FILE serve …``.
"""

from __future__ import annotations

import sys

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import ConsoleSpanExporter, SimpleSpanProcessor

from rxagent.cli import main


def _line(span: ReadableSpan) -> str:
    return span.to_json(indent=None) + "\n"


if __name__ == "__main__":
    spans = open(sys.argv[1], "a", buffering=1)  # noqa: SIM115  (open for the process's whole life)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(out=spans, formatter=_line)))
    trace.set_tracer_provider(provider)
    sys.exit(main(sys.argv[2:]))
