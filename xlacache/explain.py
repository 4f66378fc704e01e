"""Why did I miss? A miss compared, component by component, with the nearest stored entry.

Every entry's header records the digest of each key component (`xlacache.key`) and a
readable summary of it. On a miss, `Explainer` looks for stored entries with the same
label (the module name), else the most recent ones, picks the nearest (the same HLO
first, then the fewest differing components), and names what differs, with values
where they are readable::

    xlacache: miss jit_step 3f2a9c01d4e7: flags: XLA flags: `--xla_cpu_enable_fast_math=true`
    added (nearest 9be0417c22aa, 2 compared)

Off unless XLACACHE_EXPLAIN=1: nothing here runs on a hit, and without an explainer
nothing runs on a miss either. A writable process records each explained miss in a
capped JSON-lines file in its local cache directory (`MISS_LOG`) and reports it to its
shared store (a server or a bucket: `Store.report_miss`, rate-limited here), where
`xlacache explain PATH|URL` shows them; `xlacache diff PATH KEY1 KEY2` compares two
entries. Records and their files are `xlacache.misslog`'s.
"""

from __future__ import annotations

import difflib
import logging
import os
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from xlacache import counters, entry, misslog
from xlacache.errors import PermissionDeniedError, ReadOnlyError, ServerBusyError
from xlacache.key import COMPONENTS, Identity
from xlacache.misslog import MAX_LOG_BYTES, Difference, MissRecord
from xlacache.misslog import MISS_LOG as MISS_LOG  # re-exported: a cache directory's miss log
from xlacache.rates import Rate, RateLimiter

log = logging.getLogger("xlacache.explain")

MAX_CANDIDATES = 32  # stored entries compared per miss
REPORTS_PER_SECOND = 2.0  # misses one process reports to shared stores, on average
REPORT_BURST = 100  # ... and at once (a cold start)
MAX_SHOWN_LINES = 3  # differing module lines shown per side

NAMES = {
    "format": "entry format",
    "hlo": "HLO",
    "compile_options": "compile options",
    "jaxlib": "jaxlib",
    "platform": "platform",
    "devices": "devices",
    "xla_flags": "XLA flags",
}
# What a differing component says about the miss, and which reason wins when several
# differ (a new jaxlib or device set also changes HLO and options; flags change alone).
REASON_OF = {
    "format": "versions",
    "jaxlib": "versions",
    "platform": "versions",
    "devices": "devices",
    "xla_flags": "flags",
    "compile_options": "options",
    "hlo": "new_program",
}
REASON_ORDER = ("versions", "devices", "flags", "options", "new_program")
# Readable names of summary fields, by (component, field).
FIELD_NAMES = {
    ("format", "version"): "entry format",
    ("jaxlib", "version"): "jaxlib",
    ("platform", "name"): "platform",
    ("platform", "version"): "platform version",
    ("devices", "count"): "device count",
    ("devices", "kinds"): "device kinds",
    ("devices", "processes"): "process count",
    ("devices", "global_devices"): "devices in the job",
}


@dataclass(frozen=True)
class Side:
    """One compilation as explain sees it: a stored entry or the miss at hand."""

    key: str
    label: str
    components: Mapping[str, str]
    summary: Mapping[str, Mapping]
    module_text: Callable[[], str | None] = field(default=lambda: None, compare=False)
    # the program's canonical text (every entry of format 3 keeps it; see `jax_portable`)
    program_text: Callable[[], str | None] = field(default=lambda: None, compare=False)

    @classmethod
    def of_header(
        cls,
        header: entry.Header,
        module_text: Callable[[], str | None] | None = None,
        program_text: Callable[[], str | None] | None = None,
    ) -> Side:
        return cls(
            header.key,
            header.label,
            header.components,
            header.summary,
            module_text or (lambda: None),
            program_text or (lambda: None),
        )

    @classmethod
    def of_identity(cls, identity: Identity) -> Side:
        text, program = identity.module_text, identity.program
        return cls(
            identity.key,
            identity.label,
            identity.components,
            identity.summary(),
            text if text is not None else (lambda: None),
            (lambda: program()[0].decode()) if program is not None else (lambda: None),
        )


@dataclass(frozen=True)
class ComponentDiff:
    """One component of two compilations: equal or not, and what differs, readably."""

    component: str
    same: bool
    old: str | None  # digests
    new: str | None
    details: tuple[str, ...] = ()

    def text(self) -> str:
        return f"{NAMES.get(self.component, self.component)}: " + "; ".join(self.details)

    def to_dict(self) -> dict:
        return {
            "component": self.component,
            "same": self.same,
            "old": self.old,
            "new": self.new,
            "details": list(self.details),
        }


def compare(old: Side, new: Side, module_lines: bool = True) -> list[ComponentDiff]:
    """Every component of `old` against `new`, in key order.

    module_lines=False leaves out the HLO's differing lines (of unrelated programs)."""
    rows = []
    for name in COMPONENTS:
        a, b = old.components.get(name), new.components.get(name)
        if a is not None and a == b:
            rows.append(ComponentDiff(name, True, a, b))
            continue
        if name == "hlo":
            details = _module_details(old, new) if module_lines else ["another program"]
        else:
            details = _summary_details(name, old.summary.get(name, {}), new.summary.get(name, {}))
        if a is None or b is None:
            details = ["not recorded in the entry", *details]
        rows.append(ComponentDiff(name, False, a, b, tuple(details or ["differs"])))
    return rows


def differences(old: Side, new: Side, module_lines: bool = True) -> list[ComponentDiff]:
    return [row for row in compare(old, new, module_lines) if not row.same]


def reason(diffs: list[ComponentDiff]) -> str:
    """The one reason a miss is counted under (misses_by_reason)."""
    found = {REASON_OF.get(d.component, "new_program") for d in diffs}
    return next((r for r in REASON_ORDER if r in found), "unusable")


# -- readable details ------------------------------------------------------------------


def _show(value) -> str:
    if value is None:
        return "unset"
    if isinstance(value, dict):  # device kinds: {"cpu": 8}
        return ", ".join(f"{n} x {k}" for k, n in sorted(value.items())) or "none"
    return str(value)


def _flag_details(old: list, new: list) -> list[str]:
    def by_name(flags):
        return {f.split("=", 1)[0]: f for f in flags}

    a, b = by_name(old), by_name(new)
    details = [f"`{b[n]}` added" for n in sorted(b.keys() - a.keys())]
    details += [f"`{a[n]}` removed" for n in sorted(a.keys() - b.keys())]
    details += [f"`{a[n]}` -> `{b[n]}`" for n in sorted(a.keys() & b.keys()) if a[n] != b[n]]
    return details


def _summary_details(component: str, old: Mapping, new: Mapping) -> list[str]:
    if component == "xla_flags":
        return _flag_details(old.get("flags", []), new.get("flags", []))
    details = []
    for name in sorted(set(old) | set(new)):
        a, b = old.get(name), new.get(name)
        if a == b:
            continue
        shown = FIELD_NAMES.get((component, name), name)
        if isinstance(a, list) and isinstance(b, list):
            details += [f"{shown}: `{v}` added" for v in b if v not in a]
            details += [f"{shown}: `{v}` removed" for v in a if v not in b]
        else:
            details.append(f"{shown} {_show(a)} -> {_show(b)}")
    return details


def _module_details(old: Side, new: Side) -> list[str]:
    """The first differing lines of the two modules: of the module text both kept
    (XLACACHE_KEEP_HLO=1), else of their programs' canonical text (entry format 3)."""
    a_text, b_text = old.module_text(), new.module_text()
    if a_text is None or b_text is None:
        a_text, b_text = old.program_text(), new.program_text()
    if a_text is None or b_text is None:
        sizes = (old.summary.get("hlo", {}).get("bytes"), new.summary.get("hlo", {}).get("bytes"))
        return [
            f"HLO differs ({_show(sizes[0])} -> {_show(sizes[1])} bytes of program text; "
            "an entry written before format 3 keeps no program to show the lines)"
        ]
    a_lines, b_lines = a_text.splitlines(), b_text.splitlines()
    matcher = difflib.SequenceMatcher(None, a_lines, b_lines, autojunk=False)
    changes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    if not changes:
        return ["HLO differs in what the text elides (large constants)"]
    count = sum(max(i2 - i1, j2 - j1) for _, i1, i2, j1, j2 in changes)
    _, i1, i2, j1, j2 = changes[0]
    lines = "1 line" if count == 1 else f"{count} lines"
    shown = [f"HLO differs: {lines} changed, first at line {i1 + 1}"]
    shown += [f"- {_clip(line)}" for line in a_lines[i1:i2][:MAX_SHOWN_LINES]]
    shown += [f"+ {_clip(line)}" for line in b_lines[j1:j2][:MAX_SHOWN_LINES]]
    return shown


def _clip(line: str, width: int = 160) -> str:
    line = line.strip()
    return line if len(line) <= width else line[: width - 3] + "..."


# -- explaining a miss -----------------------------------------------------------------


@dataclass(frozen=True)
class Explanation:
    """Why one key missed."""

    key: str
    label: str
    reason: str
    differences: tuple[ComponentDiff, ...] = ()
    nearest: str | None = None
    nearest_label: str = ""
    compared: int = 0
    note: str = ""
    time: float = field(default_factory=time.time)

    def line(self) -> str:
        """The one log line for this miss."""
        head = f"xlacache: miss {self.label or '?'} {self.key[:12]}: {self.reason}"
        if self.note:
            head += f": {self.note}"
        if self.differences:
            head += ": " + "; ".join(d.text() for d in self.differences)
        if self.nearest:
            head += f" (nearest {self.nearest[:12]}, {self.compared} compared)"
        return " ".join(head.split())

    def to_record(self) -> MissRecord:
        """The miss as every store keeps it (`xlacache.misslog`)."""
        return MissRecord(
            time=self.time,
            key=self.key,
            label=self.label,
            reason=self.reason,
            note=self.note,
            differences=tuple(Difference(d.component, d.details) for d in self.differences),
            nearest=self.nearest,
            nearest_label=self.nearest_label,
            compared=self.compared,
            host=socket.gethostname(),
            pid=os.getpid(),
        )


def explain(store, miss: Side, max_candidates: int = MAX_CANDIDATES) -> Explanation:
    """Explain why `miss` is not in `store` (anything with list() and read_header())."""
    infos = [i for i in store.list() if not i.label.startswith(entry.ALIAS_LABEL_PREFIX)]
    if any(i.key == miss.key for i in infos):
        note = "an entry with this key is stored but could not be used (see stats()['errors'])"
        return Explanation(miss.key, miss.label, "unusable", note=note)
    newest_first = sorted(infos, key=lambda i: i.created, reverse=True)
    same_label = [i for i in newest_first if i.label == miss.label]
    pool = (same_label or newest_first)[:max_candidates]
    best: entry.Header | None = None
    best_rank = (True, len(COMPONENTS) + 1)
    compared = 0
    for info in pool:
        try:
            header = store.read_header(info.key)
        except Exception:  # noqa: BLE001 - an unreadable candidate is just skipped
            continue
        if header is None:
            continue
        compared += 1
        rank = _distance(header.components, miss.components)
        if rank < best_rank:
            best, best_rank = header, rank
    if best is None:
        return Explanation(miss.key, miss.label, "new_program", note="nothing stored to compare")
    old = Side.of_header(
        best, lambda: stored_module_text(store, best), lambda: stored_program_text(store, best)
    )
    diffs = tuple(differences(old, miss, module_lines=bool(same_label)))
    note = "" if same_label else f"no entry labelled {miss.label}; nearest is {best.label}"
    why = reason(list(diffs)) if same_label else "new_program"
    return Explanation(miss.key, miss.label, why, diffs, best.key, best.label, compared, note)


def _distance(old: Mapping[str, str], new: Mapping[str, str]) -> tuple[bool, int]:
    """How far apart two keys are: the same program first, then fewest differences."""
    count = sum(old.get(c) != new.get(c) for c in COMPONENTS)
    return old.get("hlo") != new.get("hlo"), count


def stored_module_text(store, header: entry.Header) -> str | None:
    """The module text an entry kept (XLACACHE_KEEP_HLO), or None."""
    if not header.module_text_size:
        return None
    blob = store.peek(header.key)
    return None if blob is None else entry.decode(blob, header.key).module_text()


def stored_program_text(store, header: entry.Header) -> str | None:
    """The program's canonical text an entry keeps (entry format 3), or None."""
    if not header.program_size:
        return None
    blob = store.peek(header.key)
    text = None if blob is None else entry.decode(blob, header.key).program_text()
    return None if text is None else text.decode("utf-8", "replace")


class Explainer:
    """Explains misses as they happen: one log line each, counted by reason, recorded in
    `log_path` (a writable process's local cache directory) if given, and reported to
    each of `reporters` (shared stores: `Store.report_miss`), at most
    REPORTS_PER_SECOND on average; reports over that, or refused, are counted in
    `miss_reports_dropped`."""

    def __init__(
        self,
        store,
        log_path: str | os.PathLike | None = None,
        max_candidates: int = MAX_CANDIDATES,
        max_log_bytes: int = MAX_LOG_BYTES,
        reporters: Sequence = (),
    ) -> None:
        self.store = store
        self.log_path = Path(log_path) if log_path is not None else None
        self.max_candidates = max_candidates
        self.max_log_bytes = max_log_bytes
        self.reporters = tuple(reporters)
        self._report_limit = RateLimiter(Rate(REPORTS_PER_SECOND, REPORT_BURST))

    def on_miss(self, identity: Identity, rejected: str | None = None) -> Explanation | None:
        """Explain, log, count and record a miss; never raises. `rejected`: the key's
        entry was found but JAX's loader rejected it, for this reason."""
        try:
            side = Side.of_identity(identity)
            if rejected is not None:
                note = f"JAX's loader rejected the stored executable ({rejected}); replaced"
                found = Explanation(side.key, side.label, "load_rejected", note=note)
            else:
                found = explain(self.store, side, self.max_candidates)
        except Exception as exc:  # noqa: BLE001 - explaining must never cost the compile
            counters.record_error("explain", exc)
            return None
        counters.count_miss_reason(found.reason)
        log.warning("%s", found.line())
        record = found.to_record().to_dict()
        if self.log_path is not None:
            try:
                misslog.append(self.log_path, record, self.max_log_bytes)
            except OSError as exc:
                counters.record_error("explain", exc)
        if self.reporters:
            self._report(record)
        return found

    def on_rewarmed_hit(self, header: entry.Header) -> str:
        """Log that a hit was served by an entry `xlacache rewarm` compiled (its header's
        `rewarmed_from`); returns the line."""
        line = (
            f"xlacache: hit {header.label or '?'} {header.key[:12]}: rewarmed from jaxlib "
            f"{header.rewarmed_from} (compiled by xlacache rewarm for jaxlib {header.jaxlib})"
        )
        log.warning("%s", line)
        return line

    def _report(self, record: dict) -> None:
        if not self._report_limit.allow():
            counters.add("miss_reports_dropped", len(self.reporters))
            return
        for store in self.reporters:
            try:
                store.report_miss(record)
            except Exception as exc:  # noqa: BLE001 - a report is never worth the compile
                counters.add("miss_reports_dropped")
                if isinstance(exc, ServerBusyError):  # a server's own rate limit
                    continue
                counters.record_error("explain", exc)
                if isinstance(exc, (PermissionDeniedError, ReadOnlyError)):
                    # Credentials that may not write there (a bucket's objectViewer):
                    # stop asking for the rest of the process.
                    self.reporters = tuple(r for r in self.reporters if r is not store)
            else:
                counters.add("miss_reports")


def why(record: Mapping) -> str:
    """A recorded miss's note and differences on one line (tables, the status page)."""
    parts = [record["note"]] if record.get("note") else []
    for diff in record.get("differences", []):
        name = NAMES.get(diff.get("component"), diff.get("component"))
        parts.append(f"{name}: " + "; ".join(diff.get("details", [])))
    return " | ".join(parts)


def recent_misses(path: str | os.PathLike, limit: int | None = None) -> list[dict]:
    """Recorded misses of a miss log file, newest first (a torn or foreign line is skipped)."""
    return misslog.read(path, limit)
