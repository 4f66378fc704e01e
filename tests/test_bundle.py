"""Bundles: members are streamed under a size cap and verified as they stream."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import forge_header, make_blob, make_key, run_python
from xlacache import entry

MEMORY_LIMIT = 400 * 1024 * 1024  # bytes of peak RSS the import may reach


def _sparse_bundle(tmp: Path, key: str, size: int, head: bytes = b"") -> Path:
    """A tiny tar (GNU sparse member) whose one entry claims `size` bytes, mostly holes."""
    src = tmp / "src"
    member = src / "entries" / key[:2] / f"{key}.xlac"
    member.parent.mkdir(parents=True)
    with open(member, "wb") as f:
        f.write(head)
        f.truncate(size)
    manifest = {
        "format": "xlacache-bundle",
        "format_version": 1,
        "entries": [{"key": key, "size": size, "sha256": "0" * 64}],
    }
    (src / "manifest.json").write_text(json.dumps(manifest))
    bundle = tmp / "sparse.tar"
    subprocess.run(["tar", "-S", "-cf", bundle, "-C", src, "manifest.json", "entries"], check=True)
    assert bundle.stat().st_size < 100_000
    return bundle


# Peak RSS from VmHWM: getrusage's ru_maxrss keeps the forking parent's peak across exec.
IMPORT_MEASURED = """
import os, sys
from xlacache.cli.main import main
sys.argv[0] = "xlacache"
try:
    main()
finally:
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
    with open(os.environ["PEAK_RSS_FILE"], "w") as f:
        f.write(str(peak))
"""


def _import_in_child(bundle: Path, dest: Path, *flags: str) -> tuple[dict, int]:
    """Run `xlacache import` in a fresh process; (its JSON, that process's peak RSS in bytes)."""
    peak_file = dest.with_name("peak_rss")
    proc = run_python(
        IMPORT_MEASURED, "import", str(bundle), str(dest), "--json", *flags,
        env={"PEAK_RSS_FILE": str(peak_file)},
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return json.loads(proc.stdout), int(peak_file.read_text())


def test_sparse_two_gib_member_is_refused_in_bounded_memory(tmp_path):
    key = make_key(1)
    bundle = _sparse_bundle(tmp_path, key, 2 * 1024**3)
    doc, peak = _import_in_child(bundle, tmp_path / "dest")
    assert doc["corrupt_keys"] == [key] and doc["imported"] == 0
    assert peak < MEMORY_LIMIT, f"import peaked at {peak / 1e6:.0f} MB"


def test_member_with_a_valid_header_but_forged_body_is_verified_while_streaming(tmp_path):
    # A real header claiming a 200 MB body: the member streams through the digest check
    # (in chunks) and is refused at its end, never held whole.
    key, blob = make_blob(2)
    header = entry.read_header(blob)
    size = entry.header_length(blob[: entry.PRELUDE_SIZE])
    body = 200 * 1024 * 1024
    head = forge_header(blob, body_size=body)[:size]
    bundle = _sparse_bundle(tmp_path, key, size + body, head=head)
    doc, peak = _import_in_child(bundle, tmp_path / "dest")
    assert doc["corrupt_keys"] == [key]
    assert peak < MEMORY_LIMIT, f"import peaked at {peak / 1e6:.0f} MB"
    assert header.key == key
    assert not list((tmp_path / "dest" / "tmp").iterdir())


@pytest.mark.slow
def test_member_over_the_size_cap_is_refused_unread(tmp_path):
    key = make_key(3)
    bundle = _sparse_bundle(tmp_path, key, 64 * 1024 * 1024)
    doc, _ = _import_in_child(bundle, tmp_path / "dest", "--max-entry-size", "1MiB")
    assert doc["corrupt_keys"] == [key]
    assert os.path.exists(tmp_path / "dest")
