"""Observability: Prometheus metrics, OpenTelemetry traces (the ``otel`` extra), run-scoped
logs. See ``docs/observability.md``."""
