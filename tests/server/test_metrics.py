"""The server's figures: one table (`FIGURES`) feeds Prometheus and the plain numbers."""

from __future__ import annotations

import ast
from pathlib import Path

from prometheus_client import generate_latest

from xlacache import counters
from xlacache.server import metrics as metrics_mod
from xlacache.server.metrics import FIGURES, PROCESS_FIGURES, ServerMetrics
from xlacache.stores.base import StoreSummary

SERVER = Path(metrics_mod.__file__).parent


def _scraped(metrics: ServerMetrics) -> dict[str, float]:
    """The registry's samples by name (with labels), as a scrape shows them."""
    samples = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


def test_every_figure_counted_once_lands_in_prometheus_and_the_plain_numbers_alike():
    metrics = ServerMetrics(StoreSummary, None)
    for i, (name, figure) in enumerate(FIGURES.items(), start=1):
        labels = tuple(f"{label}-x" for label in figure.labels)
        metrics.add(name, i, *labels)
    plain, scraped = metrics.plain(), _scraped(metrics)
    for i, (name, figure) in enumerate(FIGURES.items(), start=1):
        suffix = "" if figure.gauge else "_total"
        labels = ",".join(f'{label}="{label}-x"' for label in sorted(figure.labels))
        prometheus = f"xlacache_{name}{suffix}" + (f"{{{labels}}}" if labels else "")
        assert scraped[prometheus] == i, name
        assert plain[".".join((name, *(f"{la}-x" for la in figure.labels)))] == i, name


def test_process_figures_are_scraped_and_plain():
    counters.add("lease_polls", 3)
    counters.add("evictions", 2)
    metrics = ServerMetrics(StoreSummary, None)
    plain, text = metrics.plain(), generate_latest(metrics.registry).decode()
    for name in PROCESS_FIGURES:
        assert f"xlacache_{name}_total" in text and name in plain
    assert plain["lease_polls"] == 3 and "xlacache_evictions_total 2.0" in text


def test_no_server_module_counts_a_prometheus_metric_by_hand():
    """Every count goes through ServerMetrics.add (so it cannot land in one place only)."""
    by_hand = []
    for path in sorted(SERVER.glob("*.py")):
        if path.name == "metrics.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module == "prometheus_client":
                kinds = {a.name for a in node.names} & {"Counter", "Gauge", "Histogram"}
                by_hand += [f"{path.name} imports {kind}" for kind in sorted(kinds)]
            if isinstance(node, ast.Attribute) and node.attr in ("inc", "dec", "labels"):
                by_hand.append(f"{path.name}:{node.lineno} .{node.attr}")
    assert not by_hand, by_hand
