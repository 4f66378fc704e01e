"""Helpers for the CLI tests: real caches with real entries, and run/check shortcuts."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import time
from pathlib import Path

from typer.testing import CliRunner

from xlacache import entry
from xlacache.cli.main import app
from xlacache.stores.local import LocalStore

DAY = 86400.0


def key_for(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def put_entry(
    store: LocalStore,
    name: str,
    *,
    payload: bytes | None = None,
    compile_seconds: float = 1.0,
    label: str = "",
    age: float = 0.0,
) -> str:
    """Store an entry created `age` seconds ago; returns its key."""
    key = key_for(name)
    payload = payload if payload is not None else (name.encode() * 500)
    blob = entry.encode(
        key,
        payload,
        compile_seconds=compile_seconds,
        label=label or f"jit_{name}",
        created=time.time() - age,
    )
    store.put(key, blob)
    return key


def make_cache(root: Path, names: list[str], age_step: float = DAY) -> list[str]:
    """A cache with one entry per name, each `age_step` older than the one before."""
    with LocalStore(root) as store:
        return [
            put_entry(store, name, compile_seconds=i + 0.5, age=i * age_step)
            for i, name in enumerate(names)
        ]


def cache_keys(root: Path) -> set[str]:
    with LocalStore(root, readonly=True) as store:
        return {info.key for info in store.list()}


def run(*args: str, env: dict[str, str] | None = None):
    """Invoke the CLI in-process; returns click's Result (stdout and stderr apart)."""
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def cli_json(*args: str) -> dict:
    """Run the CLI with `--json` in-process; it must succeed. Its parsed output."""
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def assert_one_line_error(result, code: int | None = None) -> str:
    """The command failed with one `xlacache: error:` line on stderr and no traceback."""
    assert result.exit_code != 0, result.output
    if code is not None:
        assert result.exit_code == code, (result.exit_code, result.output)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("xlacache: error: "), lines[0]
    assert "Traceback" not in result.output
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), repr(result.exception)
    return lines[0]


def write_bundle(path: Path, manifest: object | None, members: dict[str, bytes]) -> Path:
    """A hand-made tar: manifest.json (unless None) plus raw members."""
    with tarfile.open(path, "w") as tar:
        items = dict(members)
        if manifest is not None:
            items["manifest.json"] = json.dumps(manifest).encode()
        for name, data in items.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def read_bundle(path: Path) -> tuple[dict, dict[str, bytes]]:
    """The manifest and the member bytes of a bundle."""
    with tarfile.open(path) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    return json.loads(members.pop("manifest.json")), members
