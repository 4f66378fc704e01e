"""The status page: one server-rendered HTML document from a status dict (server/overview.py).

No script, no external asset: charts are inline SVG (`charts`), styles inline, and a
meta tag reloads the page every REFRESH_SECONDS, so it works on a machine with no
internet. Every figure is also an element's `data-value` (or a chart's data
attributes), equal to the number /status.json gives, which is what the browser test
checks. Every text that came from a client (labels, token names, miss details) is
escaped.
"""

from __future__ import annotations

import time
from datetime import datetime
from html import escape

from xlacache.server.charts import BYTES, SECONDS, line_chart, meter
from xlacache.units import format_duration, format_size

REFRESH_SECONDS = 15
REASON_COLORS = {
    "versions": "#7c3aed",
    "devices": "#2563eb",
    "flags": "#ea580c",
    "options": "#0d9488",
    "new_program": "#64748b",
    "unusable": "#dc2626",
    "load_rejected": "#b91c1c",
}

CSS = """
:root{--fg:#0f172a;--muted:#64748b;--line:#e2e8f0;--card:#fff;--bg:#f1f5f9;--accent:#2563eb}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);
 font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
header{background:#0f172a;color:#e2e8f0;padding:14px 28px;display:flex;flex-wrap:wrap;
 align-items:baseline;gap:6px 22px}
header h1{font-size:19px;margin:0;color:#fff;letter-spacing:.2px}
header .meta{color:#94a3b8;font-size:13px}
.pill{display:inline-block;padding:1px 9px;border-radius:999px;font-size:12px;font-weight:600;
 background:#334155;color:#e2e8f0}
.pill.serving{background:#16a34a;color:#fff}.pill.draining,.pill.stopped{background:#dc2626}
main{padding:20px 28px 32px;max-width:1500px;margin:0 auto}
.cards{display:grid;grid-template-columns:repeat(auto-fit,minmax(160px,1fr));gap:14px}
.card,.panel{background:var(--card);border:1px solid var(--line);border-radius:10px;
 box-shadow:0 1px 2px rgba(15,23,42,.05)}
.card{padding:14px 16px}
.card .label{color:var(--muted);font-size:12px;text-transform:uppercase;letter-spacing:.6px}
.card .value{font-size:26px;font-weight:650;margin:2px 0 2px;white-space:nowrap}
.card .sub{color:var(--muted);font-size:12.5px}
.grid2{display:grid;grid-template-columns:repeat(auto-fit,minmax(460px,1fr));gap:14px;
 margin-top:14px}
.panel{padding:12px 16px 10px}
.panel h2{font-size:14px;margin:0 0 6px;font-weight:650}
.panel h2 .note{color:var(--muted);font-weight:400;font-size:12.5px;margin-left:6px}
svg.chart{width:100%;height:auto;display:block}
svg.chart .grid{stroke:#e2e8f0;stroke-width:1}
svg.chart .tick{fill:#64748b;font-size:11px}
svg.chart .line{fill:none;stroke-width:2;stroke-linejoin:round;stroke-linecap:round}
svg.chart .area{opacity:.12;stroke:none}
svg.chart .limit{stroke:#dc2626;stroke-width:1.5;stroke-dasharray:5 4}
svg.chart .limit-label{fill:#dc2626;font-size:11px}
svg.chart .empty{fill:#94a3b8;font-size:13px}
svg.meter{width:100%;height:7px;display:block;margin:6px 0 4px}
svg.meter .meter-bg{fill:#e2e8f0}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:5px 8px;border-bottom:1px solid var(--line);vertical-align:top}
th{color:var(--muted);font-weight:600;font-size:12px;text-transform:uppercase;letter-spacing:.4px}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.mono{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
td.why{color:#334155;font-size:12.5px;max-width:640px;overflow-wrap:anywhere}
.bar{height:6px;border-radius:3px;background:var(--accent);opacity:.75;margin-top:3px}
.badge{display:inline-block;padding:0 7px;border-radius:999px;color:#fff;font-size:11.5px;
 font-weight:600;white-space:nowrap}
.chips{display:flex;flex-wrap:wrap;gap:6px;margin:0 0 8px}
.muted{color:var(--muted)}.nowrap{white-space:nowrap}
footer{color:var(--muted);font-size:12.5px;padding:0 28px 24px;max-width:1500px;margin:0 auto}
footer a{color:var(--accent)}
details summary{cursor:pointer;color:var(--muted);margin:6px 0}
"""


def _num(value, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.0f}%"


def _card(card_id: str, label: str, value: str, data_value, sub: str = "", extra: str = "") -> str:
    return (
        f'<div class="card"><div class="label">{escape(label)}</div>'
        f'<div class="value" id="{card_id}" data-value="{escape(str(data_value))}">'
        f'{escape(value)}</div>{extra}<div class="sub">{sub}</div></div>'
    )


def _ago(ts: float, now: float) -> str:
    return "never" if not ts else f"{format_duration(max(0.0, now - ts))} ago"


def _cards(status: dict) -> str:
    store = status["store"]
    hits, misses = status["hits"], status["misses"]
    rate = hits / (hits + misses) if hits + misses else None
    cap = store["max_bytes"]
    fill = f"of {format_size(cap)}, {_pct(store['fill'])} full · " if cap else "no size limit · "
    clients = status["clients"]
    return '<section class="cards">' + "".join(
        [
            _card("saved-total", "Compile time saved", format_duration(status["saved_seconds"]),
                  status["saved_seconds"],
                  f"{_num(store['hits'])} hits × each entry's compile time"),
            _card("hit-rate", "Hit rate", "n/a" if rate is None else f"{rate:.1%}",
                  "" if rate is None else round(rate, 6),
                  f'<span id="hits" data-value="{hits}">{_num(hits)}</span> hits · '
                  f'<span id="misses" data-value="{misses}">{_num(misses)}</span> misses '
                  "since start"),
            _card("store-bytes", "Store", format_size(store["bytes"]), store["bytes"],
                  f'{fill}<span id="entries" data-value="{store["entries"]}">'
                  f"{_num(store['entries'])}</span> entries" + _versions(store["by_jaxlib"]),
                  meter("store-meter", store["fill"])),
            _card("compile-held", "Compile time held", format_duration(store["compile_seconds"]),
                  store["compile_seconds"], "to compile every stored entry again"),
            _card("traffic", "Served", format_size(status["bytes_sent"]), status["bytes_sent"],
                  f"received {format_size(status['bytes_received'])}"),
            _card("client-count", "Clients", str(len(clients)), len(clients),
                  f"{status['active_rpcs']:.0f} calls running now"),
        ]
    ) + "</section>"  # fmt: skip


def _versions(versions: list[dict]) -> str:
    """Entries and bytes by jaxlib version (`xlacache prune --stale` removes old ones)."""
    rows = "".join(
        f'<div data-jaxlib="{escape(v["jaxlib"])}" data-entries="{v["entries"]}">'
        f"jaxlib {escape(v['jaxlib'] or 'not recorded')}: {_num(v['entries'])} entries, "
        f"{format_size(v['bytes'])}"
        + (f", {_num(v['rewarmed'])} rewarmed" if v.get("rewarmed") else "")
        + "</div>"
        for v in versions
    )
    return f'<div id="by-jaxlib">{rows}</div>'


def _charts(status: dict) -> str:
    h = status["history"]
    times = h["time"]
    cap = status["store"]["max_bytes"]
    every = format_duration(h["interval"])
    panels = [
        ("Compile time saved", "cumulative",
         line_chart("chart-saved", "Compile time saved", times, h["saved_seconds"],
                    format_duration, color="#16a34a", units=SECONDS)),
        ("Hit rate", f"per {every}",
         line_chart("chart-hit-rate", "Hit rate", times, h["hit_rate"], _pct, top=1.0,
                    area=False)),
        ("Store size", "against its cap" if cap else "no cap set",
         line_chart("chart-store", "Store size", times, h["store_bytes"], format_size,
                    color="#7c3aed", units=BYTES, limit=cap, limit_label="cap")),
        ("Requests", "per second",
         line_chart("chart-requests", "Requests per second", times, h["request_rate"],
                    lambda v: f"{v:.3g}", color="#ea580c", area=False)),
    ]  # fmt: skip
    return (
        '<section class="grid2">'
        + "".join(
            f'<div class="panel"><h2>{escape(title)}<span class="note">{escape(note)}</span></h2>'
            f"{svg}</div>"
            for title, note, svg in panels
        )
        + "</section>"
    )


def _programs(table_id: str, title: str, rows: list[dict], by: str) -> str:
    if not rows:
        body = '<tr><td colspan="5" class="muted">nothing stored yet</td></tr>'
    else:
        top = max(r[by] for r in rows) or 1
        body = "".join(
            f'<tr data-label="{escape(r["label"])}" data-hits="{r["hits"]}" '
            f'data-compile-seconds="{r["compile_seconds"]}" '
            f'data-saved-seconds="{r["saved_seconds"]}">'
            f'<td class="mono">{escape(r["label"] or "(no label)")}'
            f'<div class="bar" style="width:{100 * r[by] / top:.1f}%"></div></td>'
            f'<td class="num">{_num(r["entries"])}</td><td class="num">{_num(r["hits"])}</td>'
            f'<td class="num">{format_duration(r["compile_seconds"])}</td>'
            f'<td class="num">{format_duration(r["saved_seconds"])}</td></tr>'
            for r in rows
        )
    return (
        f'<div class="panel"><h2>{escape(title)}</h2><table id="{table_id}"><tr>'
        '<th>program</th><th class="num">variants</th><th class="num">hits</th>'
        '<th class="num">compile</th><th class="num">saved</th></tr>'
        f"{body}</table></div>"
    )


def _badge(reason: str) -> str:
    color = REASON_COLORS.get(reason, "#475569")
    return f'<span class="badge" style="background:{color}">{escape(reason)}</span>'


def _misses(status: dict) -> str:
    records = status["recent_misses"]
    chips = "".join(
        f'<span data-reason="{escape(r)}" data-count="{n}">{_badge(r)} {_num(n)}</span>'
        for r, n in status["miss_reasons"].items()
    )
    if not records:
        body = (
            '<tr><td colspan="6" class="muted">none reported: clients report misses when '
            "they run with XLACACHE_EXPLAIN=1</td></tr>"
        )
    else:
        body = "".join(
            f'<tr data-key="{escape(r["key"])}" data-reason="{escape(r["reason"])}">'
            f'<td class="num">{datetime.fromtimestamp(r["time"]).strftime("%H:%M:%S")}</td>'
            f'<td class="nowrap">{escape(r.get("client", ""))}</td>'
            f'<td class="mono">{escape(r["label"])}</td>'
            f'<td class="mono">{escape(r["key"][:12])}</td><td>{_badge(r["reason"])}</td>'
            f'<td class="why">{escape(r["why"])}</td></tr>'
            for r in records
        )
    return (
        '<section class="panel" style="margin-top:14px"><h2>Recent misses'
        '<span class="note">why compiles missed, as clients explained them</span></h2>'
        f'<div class="chips" id="miss-reasons">{chips}</div><table id="recent-misses"><tr>'
        "<th>when</th><th>client</th><th>program</th><th>key</th><th>reason</th><th>why</th>"
        f"</tr>{body}</table></section>"
    )


def _most_called(methods: dict[str, int], shown: int = 4) -> str:
    ranked = sorted(methods.items(), key=lambda item: (-item[1], item[0]))[:shown]
    return ", ".join(f"{method} {count:,}" for method, count in ranked)


def _clients(status: dict, now: float) -> str:
    rows = status["clients"]
    if not rows:
        body = '<tr><td colspan="5" class="muted">no calls yet</td></tr>'
    else:
        body = "".join(
            f'<tr data-client="{escape(c["name"])}" data-requests="{c["requests"]}">'
            f'<td>{escape(c["name"])}</td><td class="num">{_num(c["requests"])}</td>'
            f'<td class="num">{_num(c["errors"])}</td>'
            f"<td>{escape(_most_called(c['methods']))}</td>"
            f'<td class="num">{_ago(c["last_seen"], now)}</td></tr>'
            for c in rows
        )
    return (
        '<div class="panel"><h2>Clients<span class="note">by token name</span></h2>'
        '<table id="clients"><tr><th>client</th><th class="num">calls</th>'
        '<th class="num">errors</th><th>most called</th><th class="num">last seen</th></tr>'
        f"{body}</table></div>"
    )


def _pods(status: dict) -> str:
    """Single-flight: compiles shared, dead holders noticed, waits and their wake latency."""
    pods = status["pods"]
    rows = [
        ("pod-avoided", "compiles avoided (waiters loaded another's entry)", "compiles_avoided"),
        ("pod-granted", "leases granted", "leases_granted"),
        ("pod-taken-over", "leases taken over (holder died or stalled)", "leases_taken_over"),
        ("pod-disconnected", "holders noticed dead at once", "leases_expired_on_disconnect"),
        ("pod-wait", "seconds clients waited", "wait_seconds"),
        ("pod-wake", "mean wake latency, s (entry created to loaded)", "mean_wake_seconds"),
        ("pod-blocked", "waits blocked here now", "lease_waits_blocked"),
        ("pod-coalesced", "coalesced reads", "coalesced_reads"),
        ("pod-touched", "prefetched entries used", "touched"),
    ]
    body = "".join(
        f'<tr><td>{escape(text)}</td><td class="num" id="{row_id}" '
        f'data-value="{pods[name]}">{_num(pods[name], 3 if name.endswith("seconds") else 0)}'
        "</td></tr>"
        for row_id, text, name in rows
    )
    return (
        '<div class="panel"><h2>Pods<span class="note">single-flight since start</span></h2>'
        f'<table id="pods">{body}</table></div>'
    )


def _requests(status: dict) -> str:
    rows = "".join(
        f'<tr><td class="mono">{escape(k)}</td><td class="num">{_num(v)}</td></tr>'
        for k, v in sorted(status["requests"].items())
    )
    return (
        '<div class="panel"><h2>Requests<span class="note">by method and status</span></h2>'
        '<table id="requests"><tr><th>method.status</th><th class="num">count</th></tr>'
        f"{rows}</table></div>"
    )


def render_html(status: dict) -> str:
    """The whole page for one status dict (see CacheServer.status)."""
    now = time.time()
    signing = status["signing"]
    trust = ("signed uploads only: " + ", ".join(signing["key_ids"])) if signing["required"] \
        else "unsigned uploads accepted"  # fmt: skip
    store = status["store"]
    header = (
        f'<header><h1>xlacache server</h1><span class="pill {escape(status["state"])}">'
        f'{escape(status["state"])}</span><span class="meta">{escape(status["listen"])} · '
        f"v{escape(status['version'])} · up {format_duration(status['uptime_seconds'])}</span>"
        f'<span class="meta">auth: {escape(status["auth"])} · TLS {escape(status["tls"])} · '
        f"{escape(trust)}</span></header>"
    )
    programs = status["programs"]
    body = (
        _cards(status)
        + _charts(status)
        + '<section class="grid2">'
        + _programs("top-by-compile", "Top programs by compile time",
                    programs["by_compile_seconds"], "compile_seconds")
        + _programs("top-by-hits", "Top programs by hits", programs["by_hits"], "hits")
        + "</section>"
        + _misses(status)
        + '<section class="grid2">' + _clients(status, now) + _requests(status) + "</section>"
        + '<section class="grid2">' + _pods(status) + "</section>"
    )  # fmt: skip
    updated = datetime.fromtimestamp(now).strftime("%Y-%m-%d %H:%M:%S")
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        f"<meta http-equiv='refresh' content='{REFRESH_SECONDS}'>"
        "<meta name='viewport' content='width=device-width,initial-scale=1'>"
        f"<title>xlacache · {escape(status['listen'])}</title><style>{CSS}</style></head>"
        f"<body>{header}<main>{body}</main><footer>store {escape(store['path'])} · updated "
        f"{updated}, reloads every {REFRESH_SECONDS} s · <a href='/metrics'>/metrics</a> · "
        "<a href='/status.json'>/status.json</a> · <a href='/healthz'>/healthz</a></footer>"
        "</body></html>"
    )
