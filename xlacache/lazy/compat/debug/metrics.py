"""``torch_xla.debug.metrics`` (``met``): xlacache.lazy's counters and metrics."""

from xlacache.lazy.metrics import (
    clear_all,
    clear_counters,
    clear_metrics,
    counter_names,
    counter_value,
    executed_fallback_ops,
    metric_data,
    metric_names,
    metrics_report,
    short_metrics_report,
)

__all__ = [
    "clear_all",
    "clear_counters",
    "clear_metrics",
    "counter_names",
    "counter_value",
    "executed_fallback_ops",
    "metric_data",
    "metric_names",
    "metrics_report",
    "short_metrics_report",
]
