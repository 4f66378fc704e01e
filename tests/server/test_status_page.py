"""The status page in a real browser: headless Chromium loads it from a server with traffic.

The rendered DOM must hold the charts (inline SVG, drawn from the server's samples)
and the same numbers /status.json gives, which in turn must be what the traffic
made: hits, misses, compile seconds saved, store size against the cap, the top
programs, the misses clients reported, the clients by token name. Text that came
from clients (labels, miss details) is shown as text, never as markup.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from pathlib import Path

import pytest
from browser import dump_dom, parse, screenshot
from srvutil import READ_TOKEN, WRITE_TOKEN, make_key, start_server, write_tokens

from tests.waiting import wait_for
from xlacache import entry
from xlacache.server.charts import BYTES, SECONDS, line_chart, nice_top
from xlacache.stores.remote import GrpcStore

pytestmark = pytest.mark.timeout(240)

PROGRAMS = {"jit_train_step": 12.0, "jit_eval_step": 4.0, "jit_<b>bold</b>": 1.0}
GETS = {"jit_train_step": 3, "jit_eval_step": 2, "jit_<b>bold</b>": 1}
SAVED = sum(PROGRAMS[label] * n for label, n in GETS.items())  # 45 s
CAP = 10_000_000


def status_json(srv) -> dict:
    """/status.json with a token, as a server with a token file wants it."""
    url = f"http://127.0.0.1:{srv.http_port}/status.json"
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {READ_TOKEN}"})
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())


def miss(n: int, reason: str, detail: str) -> dict:
    return {"time": time.time(), "key": make_key(f"missed-{n}"), "label": "jit_train_step",
            "reason": reason, "differences": [{"component": "xla_flags", "details": [detail]}],
            "nearest": make_key("jit_train_step"), "compared": 1}  # fmt: skip


@pytest.fixture(scope="module")
def busy_server(tmp_path_factory):
    """A server with tokens, a cap and a sample every 0.3 s, after some real traffic."""
    tmp = tmp_path_factory.mktemp("status")
    srv = start_server(
        tmp, "--tokens", str(write_tokens(tmp / "tokens")), "--metrics-listen", "127.0.0.1:0",
        "--max-size", f"{CAP}B", "--sample-interval", "0.3s",
    )  # fmt: skip
    trainer = GrpcStore(srv.url, token=WRITE_TOKEN, timeout=10)
    worker = GrpcStore(srv.url, token=READ_TOKEN, readonly=True, timeout=10)
    for label, seconds in PROGRAMS.items():
        key = make_key(label)
        trainer.put(key, entry.encode(key, os.urandom(200_000), compile_seconds=seconds,
                                      label=label))  # fmt: skip
    for phase in (0, 1):  # two rounds, a few samples apart: hit rates of two intervals
        for label, n in GETS.items():
            for _ in range(n // 2 if phase == 0 else n - n // 2):
                assert worker.get(make_key(label)) is not None
        assert worker.get(make_key(f"absent-{phase}")) is None
        time.sleep(1.0)
    worker.report_miss(miss(1, "flags", "`--xla_a=true` added"))
    worker.report_miss(miss(2, "devices", "device count 8 -> 4"))
    worker.report_miss(miss(3, "flags", "`--xla_b=<i>x</i>` added"))
    # Until the hits reached the index and a few samples were taken after the traffic.

    def shown() -> bool:
        status = status_json(srv)
        history = status["history"]
        quiet = history["saved_seconds"][-3:] == [SAVED] * 3 and history["entries"][-1] == 3
        return status["saved_seconds"] == SAVED and quiet

    wait_for(shown, 60, "the status page to show the traffic", interval=0.2)
    yield srv
    srv.stop(signal.SIGKILL)


def known(values: list) -> list:
    return [v for v in values if v is not None]


@pytest.mark.slow
def test_status_json_counts_the_traffic(busy_server):
    status = status_json(busy_server)
    assert (status["hits"], status["misses"], status["hit_rate"]) == (6, 2, "75.0%")
    assert status["saved_seconds"] == SAVED
    store = status["store"]
    assert store["entries"] == 3 and store["max_bytes"] == CAP
    assert store["fill"] == round(store["bytes"] / CAP, 4) and 600_000 < store["bytes"] < CAP
    by_compile = [(p["label"], p["hits"]) for p in status["programs"]["by_compile_seconds"]]
    assert by_compile == [("jit_train_step", 3), ("jit_eval_step", 2), ("jit_<b>bold</b>", 1)]
    assert [p["label"] for p in status["programs"]["by_hits"]] == [p for p, _ in by_compile]
    assert [r["reason"] for r in status["recent_misses"]] == ["flags", "devices", "flags"]
    assert {r["client"] for r in status["recent_misses"]} == {"worker"}
    assert status["miss_reasons"] == {"flags": 2, "devices": 1}
    clients = {c["name"]: c for c in status["clients"]}
    assert set(clients) == {"trainer", "worker"}
    assert clients["trainer"]["methods"] == {"Put": 3}
    assert clients["worker"]["methods"] == {"Get": 8, "ReportMiss": 3}
    history = status["history"]
    assert len(history["time"]) >= 4 and max(known(history["hit_rate"])) > 0
    assert history["store_bytes"][-1] == store["bytes"]


def test_the_browser_renders_charts_and_the_numbers_of_status_json(busy_server, tmp_path):
    url = f"http://ops:{READ_TOKEN}@127.0.0.1:{busy_server.http_port}/"  # basic auth
    before = status_json(busy_server)
    dom = dump_dom(url)
    after = status_json(busy_server)
    assert dom.find_all("meta", http_equiv="refresh"), "the page reloads itself"
    assert not dom.find_all("script"), "no script needed"

    def value(element_id: str) -> str:
        return dom.by_id(element_id).attrs["data-value"]

    assert float(value("saved-total")) == after["saved_seconds"] == SAVED
    assert int(value("hits")) == after["hits"] and int(value("misses")) == after["misses"]
    assert float(value("hit-rate")) == 0.75
    assert int(value("entries")) == after["store"]["entries"]
    assert int(value("store-bytes")) == after["store"]["bytes"]
    assert float(dom.by_id("store-meter").attrs["data-fraction"]) == after["store"]["fill"]
    assert int(value("client-count")) == len(after["clients"])

    # Four charts, each drawn from the samples /status.json lists.
    series = {"chart-saved": "saved_seconds", "chart-hit-rate": "hit_rate",
              "chart-store": "store_bytes", "chart-requests": "request_rate"}  # fmt: skip
    charts = {svg.attrs["id"]: svg for svg in dom.find_all("svg", class_="chart")}
    assert set(charts) == set(series)
    for chart_id, name in series.items():
        svg = charts[chart_id]
        points = int(svg.attrs["data-points"])
        assert len(known(before["history"][name])) <= points <= len(known(after["history"][name]))
        assert points >= 2 and svg.find_all("polyline"), chart_id
        # the page drew the samples taken until it rendered: the first `points` of those
        # listed after it (a sample may come between; the ring of 720 does not turn here)
        assert float(svg.attrs["data-last"]) == known(after["history"][name])[points - 1], chart_id
    assert charts["chart-store"].find_all("line", class_="limit"), "the cap is drawn"
    assert float(charts["chart-saved"].attrs["data-last"]) == SAVED

    # Tables: the same rows, in the same order, as /status.json.
    for table_id, rows in (("top-by-compile", after["programs"]["by_compile_seconds"]),
                           ("top-by-hits", after["programs"]["by_hits"])):  # fmt: skip
        shown = dom.by_id(table_id).find_all("tr")[1:]
        assert [(r.attrs["data-label"], int(r.attrs["data-hits"])) for r in shown] == [
            (p["label"], p["hits"]) for p in rows
        ]
    misses = dom.by_id("recent-misses").find_all("tr")[1:]
    assert [(r.attrs["data-key"], r.attrs["data-reason"]) for r in misses] == [
        (m["key"], m["reason"]) for m in after["recent_misses"]
    ]
    assert "worker" in misses[0].all_text() and "`--xla_b=<i>x</i>` added" in misses[0].all_text()
    chips = dom.by_id("miss-reasons").find_all("span")
    counts = {c.attrs["data-reason"]: int(c.attrs["data-count"]) for c in chips
              if "data-count" in c.attrs}  # fmt: skip
    assert counts == after["miss_reasons"]
    clients = dom.by_id("clients").find_all("tr")[1:]
    assert {r.attrs["data-client"]: int(r.attrs["data-requests"]) for r in clients} == {
        c["name"]: c["requests"] for c in after["clients"]
    }
    # What clients sent is text on the page, never markup.
    assert not dom.find_all("b") and not dom.find_all("i")
    assert "jit_<b>bold</b>" in dom.by_id("top-by-hits").all_text()

    size = screenshot(url, tmp_path / "status.png")
    assert size == (1400, 1900) and (tmp_path / "status.png").stat().st_size > 30_000


def test_a_chart_leaves_gaps_for_missing_values_and_rounds_its_axis():
    svg = parse(
        line_chart(
            "c",
            "Hit <rate>",
            [0.0, 1.0, 2.0, 3.0, 4.0],
            [0.5, None, 0.75, 1.0, None],
            lambda v: f"{v:.0%}",
            top=1.0,
        )  # fmt: skip
    ).by_id("c")
    lines = svg.find_all("polyline")
    assert [len(p.attrs["points"].split()) for p in lines] == [1, 2]  # split at the gap
    assert svg.attrs["data-points"] == "3" and svg.attrs["data-last"] == "1.0"
    assert svg.find_all("title")[0].all_text() == "Hit <rate>"
    assert nice_top(22.9 * 2**20, BYTES) == 24 * 2**20  # 0, 6, 12, 18, 24 MiB
    assert nice_top(5000, SECONDS) == 1.6 * 3600  # 0, 0.4, ... 1.6 h
    empty = parse(line_chart("e", "x", [], [], str)).by_id("e")
    assert empty.attrs["data-points"] == "0" and "collecting" in empty.all_text()


def test_ci_installs_the_browser_and_refuses_to_skip():
    ci = (Path(__file__).resolve().parents[2] / ".ci" / "run").read_text()
    assert "apt-get install" in ci and "chromium" in ci and 'export CI="${CI:-true}"' in ci
    commands = [line for line in ci.splitlines() if line and not line.startswith("#")]
    makes = [line for line in commands if line.startswith("make ")]
    assert makes[0] == "make test"  # the README's test command first, then the version ends
    assert {m.split()[1] for m in makes[1:]} == {"compat", "compat-torch"}
