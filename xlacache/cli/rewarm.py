"""`xlacache rewarm`: compile another jaxlib's stored programs for the installed one.

The work is `xlacache.rewarming`'s (typer-free, also `xlacache.rewarm()`); this module
opens the store, shows a progress bar on stderr and prints the report.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from xlacache import rewarming
from xlacache.cli.common import (
    JsonOpt,
    OperationFailed,
    PathArg,
    StoreCommand,
    TokenOpt,
    open_cache,
    plural,
    print_json,
    remote_command,
    stdout,
)


def rewarm(
    path: PathArg,
    from_jaxlib: Annotated[
        str | None,
        typer.Option(
            "--from-jaxlib",
            metavar="VERSION",
            help="Only entries written by this jaxlib (default: every jaxlib but the "
            "installed one).",
        ),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs", "-j", min=1, help=f"Compiles at once (default {rewarming.DEFAULT_JOBS})."
        ),
    ] = None,
    as_json: JsonOpt = False,
    token: TokenOpt = None,
) -> None:
    """Compile the stored programs of another jaxlib for the installed one.

    After upgrading JAX, run it once (on one worker, or on all of a pod: each program is
    compiled by one of them) before training: every stored program that this JAX still
    lowers the same way is compiled on this machine's devices and stored under the key
    this version's processes look up, so their first step compiles nothing. Entries of
    another platform or other devices are left alone; a program this JAX reads otherwise
    is reported as changed, never stored. Safe to rerun (done programs are "present").
    Signing and trusted keys come from XLACACHE_SIGNING_KEY and XLACACHE_TRUSTED_KEYS.

    --json prints one object; exit 1 if any entry failed:
      {"store": URL, "jaxlib": VERSION, "entries": int, "counts": {STATUS: int, ...},
      "results": [{"key": KEY, "label": str, "jaxlib": VERSION, "status": STATUS,
      "new_key": KEY or "", "detail": str, "compile_seconds": float}, ...]}
    STATUS: rewarmed, present, changed, not_here, no_program, untrusted, failed.
    """
    with open_cache(path, readonly=False, token=token) as store:
        url = store.url
        cache = rewarming.cache_for(store)
        with _Bar() as bar:
            report = rewarming.rewarm_cache(
                cache, from_jaxlib=from_jaxlib, jobs=jobs, progress=bar.update
            )
    if as_json:
        print_json({"store": url, **report.to_dict()})
    else:
        _print(url, report)
    if not report.ok:
        failed = report.counts()[rewarming.FAILED]
        raise OperationFailed(f"{plural(failed, 'entry')} failed to rewarm")


class _Bar:
    """A progress bar on stderr (a terminal only), fed by `rewarm_cache`'s callback."""

    def __init__(self) -> None:
        console = Console(stderr=True)
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), console=console, transient=True,
            disable=not console.is_terminal,
        )  # fmt: skip
        self._task = None

    def __enter__(self) -> _Bar:
        self._progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._progress.__exit__(*exc)

    def update(self, total: int, result: rewarming.Rewarmed | None) -> None:
        if self._task is None:
            self._task = self._progress.add_task("rewarming", total=total)
        if result is not None:
            self._progress.update(self._task, advance=1, description=result.label[:40])


def _print(url: str, report: rewarming.RewarmReport) -> None:
    counts = report.counts()
    done = ", ".join(f"{n} {status}" for status, n in counts.items() if n)
    console = stdout()
    console.print(
        f"{url}: {plural(len(report.results), 'entry')} of other jaxlibs for jaxlib "
        f"{report.jaxlib}" + (f": {done}" if done else "")
    )
    shown = [r for r in report.results if r.status != rewarming.PRESENT]
    if not shown:
        return
    table = Table(title_justify="left")
    for name in ("key", "label", "from jaxlib", "status", "new key", "compile s"):
        table.add_column(name, no_wrap=True)
    table.add_column("detail", overflow="fold")
    for r in shown:
        seconds = f"{r.compile_seconds:.2f}" if r.compile_seconds else ""
        table.add_row(
            r.key[:12], r.label, r.jaxlib, r.status, r.new_key[:12], seconds, r.detail
        )  # fmt: skip
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("rewarm", cls=StoreCommand)(remote_command(rewarm))
