"""Every `XLACACHE_*` variable is known: the set is derived from the settings tables
(the client's `config.SETTINGS`, the server's `server.config.SERVER_SETTINGS` and the
lazy runtime's `lazy_settings.LAZY_SETTINGS`), never listed by hand.

`check_environment()` warns once per process about each variable under the prefix that
no table declares, with the closest known name (`XLACACHE_MAXSIZE` -> did you mean
`XLACACHE_MAX_SIZE`?). `initialize_cache`, `import xlacache.lazy` and the command line
call it; a misspelled setting is otherwise silently no setting at all.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping

from xlacache.config import SETTINGS, warn_once
from xlacache.lazy_settings import LAZY_SETTINGS

PREFIX = "XLACACHE_"


def known_variables() -> frozenset[str]:
    """Every environment variable a settings table declares (any prefix)."""
    # Imported here: `import xlacache` stays free of the server's (and protobuf's) modules.
    from xlacache.server.config import CONFIG_VARIABLE, SERVER_SETTINGS

    rows = (*SETTINGS, *SERVER_SETTINGS, *LAZY_SETTINGS)
    return frozenset(v for row in rows for v in row.variables()) | {CONFIG_VARIABLE}


def unknown_variables(env: Mapping[str, str] = os.environ) -> dict[str, str | None]:
    """Each `XLACACHE_*` variable of `env` that no table declares, with the closest
    declared name (None when nothing is close)."""
    known = known_variables()
    # Compared without the prefix, which every candidate shares.
    tails = sorted(v.removeprefix(PREFIX) for v in known if v.startswith(PREFIX))

    def closest(name: str) -> str | None:
        match = difflib.get_close_matches(name.removeprefix(PREFIX), tails, n=1)
        return PREFIX + match[0] if match else None

    return {
        name: closest(name) for name in sorted(env) if name.startswith(PREFIX) and name not in known
    }


def check_environment(env: Mapping[str, str] = os.environ) -> None:
    """Warn (once per variable and process) about each unknown `XLACACHE_*` variable."""
    for name, close in unknown_variables(env).items():
        hint = f"; did you mean {close}?" if close else ""
        warn_once(f"xlacache: {name} is not a setting (ignored){hint}")
