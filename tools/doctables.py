"""Regenerate the tables the docs derive from the code (a dev tool, `make docs`).

    python tools/doctables.py           # rewrite the tables in README.md and docs/
    python tools/doctables.py --check   # exit 1 if one is stale (tests/test_docs.py)

A generated table sits between ``<!-- generated: NAME -->`` and ``<!-- end: NAME -->``
in a Markdown file; NAME picks the function below that renders it from the one place
the code declares it: `xlacache.counters.FIELDS` (`stats()`), `xlacache.config.SETTINGS`
(`initialize_cache`'s settings), `xlacache.server.config.SERVER_SETTINGS` (`serve`),
`xlacache.lazy_settings.LAZY_SETTINGS` (the lazy runtime's variables).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ("README.md", "docs/cli.md", "docs/pods.md", "docs/gcs.md", "docs/lazy.md",
         "deploy/README.md")  # fmt: skip
_REGION = re.compile(r"(<!-- generated: ([\w-]+) -->\n)(.*?)(<!-- end: \2 -->)", re.S)


def _row(*cells: str) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |\n"


def stats_table() -> str:
    from xlacache.counters import FIELDS

    rows = [_row("key", "counts"), _row("---", "---")]
    rows += [_row(f"`{name}`", text) for name, text in FIELDS.items()]
    rows.append(_row("`errors`", 'cache failures absorbed, by kind (`{"corrupt": 1}`)'))
    rows.append(_row("`misses_by_reason`", "explained misses by reason (`explain=True`)"))
    rows.append(_row("`initialized`", "whether `initialize_cache` ran in this process"))
    return "".join(rows)


def client_settings_table() -> str:
    from xlacache.config import SETTINGS

    rows = [_row("argument", "type", "default", "environment", "what", "more in"),
            _row(*["---"] * 6)]  # fmt: skip
    for s in SETTINGS:
        env = ", ".join(f"`{v}`" for v in s.variables())
        rows.append(_row(f"`{s.name}`", s.kind.name, _default(s), env, s.help, f"`{s.doc}`"))
    return "".join(rows)


def _default(setting, bools: tuple[str, str] = ("False", "True")) -> str:
    """A default as it is written: `30s`, `20GB`, `1024` (sizes and durations with their
    unit, as they must be), a boolean as `bools` spells it."""
    from xlacache.config import DURATION, SIZE
    from xlacache.units import compact_size

    value = setting.default
    if value is None:
        return ""
    if setting.kind is SIZE or setting.kind.name == "size":
        return f"`{compact_size(value)}`"
    if setting.kind is DURATION or setting.kind.name == "duration":
        return f"`{value:g}s`" if value else "`0`"
    if isinstance(value, bool):
        return f"`{bools[value]}`"
    return f"`{value!r}`"


def lazy_settings_table() -> str:
    from xlacache.lazy_settings import LAZY_SETTINGS

    rows = [_row("variable", "type", "default", "what", "more in"), _row(*["---"] * 5)]
    for s in LAZY_SETTINGS:
        env = ", ".join(f"`{v}`" for v in s.variables())
        rows.append(_row(env, s.kind.name, _default(s, ("0", "1")), s.help, f"`{s.doc}`"))
    return "".join(rows)


def server_settings_table() -> str:
    from xlacache.server.config import SERVER_SETTINGS, show_default

    rows = [_row("flag", "environment / config file key", "default", "what"),
            _row(*["---"] * 4)]  # fmt: skip
    for s in SERVER_SETTINGS:
        flag = s.option or f"--{s.name.replace('_', '-')}"
        default = show_default(s)
        rows.append(_row(f"`{flag}`", f"`{s.env[0]}` / `{s.name}`",
                         f"`{default}`" if default else "", s.help))  # fmt: skip
    return "".join(rows)


TABLES: dict[str, Callable[[], str]] = {
    "stats": stats_table,
    "client-settings": client_settings_table,
    "server-settings": server_settings_table,
    "lazy-settings": lazy_settings_table,
}


def render(text: str) -> str:
    """`text` with every generated region redrawn."""

    def redraw(match: re.Match) -> str:
        name = match.group(2)
        if name not in TABLES:
            raise KeyError(f"no generated table named {name!r}")
        return match.group(1) + TABLES[name]() + match.group(4)

    return _REGION.sub(redraw, text)


def stale_files() -> list[str]:
    """The files whose generated tables differ from what the code declares."""
    return [name for name in FILES if (text := (ROOT / name).read_text()) != render(text)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a table is stale")
    options = parser.parse_args()
    stale = stale_files()
    if options.check:
        for name in stale:
            print(f"stale: {name} (run: make docs)", file=sys.stderr)
        return 1 if stale else 0
    for name in stale:
        path = ROOT / name
        path.write_text(render(path.read_text()))
        print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
