"""The store commands of the `xlacache` CLI against real caches on disk."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from cli_helpers import (
    DAY,
    assert_one_line_error,
    cache_keys,
    cli_json,
    key_for,
    make_cache,
    put_entry,
    read_bundle,
    run,
    write_bundle,
)

from xlacache import entry
from xlacache.cli import common
from xlacache.stores.local import LocalStore

ENTRY_FIELDS = {
    "key",
    "label",
    "size",
    "payload_size",
    "compile_seconds",
    "created",
    "last_used",
    "hits",
    "format_version",
    "jaxlib",
    "platform",
    "rewarmed_from",
}


@pytest.fixture
def cache(tmp_path: Path) -> tuple[Path, list[str]]:
    """Three entries: a (newest), b (1 day old), c (2 days old)."""
    root = tmp_path / "cache"
    return root, make_cache(root, ["a", "b", "c"])


# -- inspect and stats -----------------------------------------------------------------


def test_inspect_table_lists_entries_newest_first(cache):
    root, (ka, kb, kc) = cache
    with LocalStore(root) as store:
        store.get(kc)  # one hit for the oldest entry
    result = run("inspect", root)
    assert result.exit_code == 0, result.output
    out = result.stdout
    positions = [out.index(k[:12]) for k in (ka, kb, kc)]
    assert positions == sorted(positions)
    assert ka not in out  # short keys only
    assert "jit_a" in out and "jit_c" in out
    row_c = next(line for line in out.splitlines() if kc[:12] in line)
    row_a = next(line for line in out.splitlines() if ka[:12] in line)
    assert "never" in row_a and "never" not in row_c
    assert row_c.rstrip(" │|").endswith("1")


def test_inspect_json_shape_and_limit(cache):
    root, keys = cache
    doc = cli_json("inspect", root)
    assert set(doc) == {"store", "total", "entries"}
    assert doc["total"] == 3
    assert [e["key"] for e in doc["entries"]] == keys  # full keys, newest first
    for item in doc["entries"]:
        assert set(item) == ENTRY_FIELDS
        assert item["size"] > 0 and item["payload_size"] == 500
    assert doc["entries"][2]["compile_seconds"] == 2.5
    limited = cli_json("inspect", root, "--limit", "1")
    assert limited["total"] == 3 and [e["key"] for e in limited["entries"]] == keys[:1]


def test_stats_json_and_table(cache):
    root, keys = cache
    with LocalStore(root) as store:
        store.get(keys[0])
        sizes = sum(store.stat(k).size for k in keys)
    doc = cli_json("stats", root)
    assert doc["entries"] == 3
    assert doc["bytes"] == sizes
    assert doc["payload_bytes"] == 1500
    assert doc["compile_seconds"] == pytest.approx(0.5 + 1.5 + 2.5)
    assert doc["hits"] == 1
    table = run("stats", root)
    assert table.exit_code == 0
    assert "entries" in table.stdout and "4.5" in table.stdout


# -- prune -----------------------------------------------------------------------------


@pytest.fixture
def aged(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """old_hit: 10 days old, used now; old: 10 days old, never used; new: created now."""
    root = tmp_path / "aged"
    with LocalStore(root) as store:
        keys = {
            "old_hit": put_entry(store, "old_hit", age=10 * DAY),
            "old": put_entry(store, "old", age=10 * DAY),
            "new": put_entry(store, "new"),
        }
        store.get(keys["old_hit"])
    return root, keys


def _pruned(root: Path, *flags: str) -> set[str]:
    doc = cli_json("prune", root, *flags)
    assert doc["count"] == len(doc["removed"])
    assert doc["bytes"] == sum(e["size"] for e in doc["removed"])
    return {e["key"] for e in doc["removed"]}


def test_prune_unused_for_spares_recently_used(aged):
    root, keys = aged
    assert _pruned(root, "--unused-for", "3d") == {keys["old"]}
    assert cache_keys(root) == {keys["old_hit"], keys["new"]}


def test_prune_older_than_ignores_use(aged):
    root, keys = aged
    assert _pruned(root, "--older-than", "7d") == {keys["old"], keys["old_hit"]}
    assert cache_keys(root) == {keys["new"]}


def test_prune_max_size_evicts_least_recently_used(aged):
    root, keys = aged
    with LocalStore(root, readonly=True) as store:
        keep = store.stat(keys["old_hit"]).size
    assert _pruned(root, "--max-size", f"{keep}B") == {keys["old"], keys["new"]}
    assert cache_keys(root) == {keys["old_hit"]}


def test_prune_dry_run_removes_nothing(aged):
    root, keys = aged
    doc = cli_json("prune", root, "--older-than", "7d", "--unused-for", "1h", "--dry-run")
    assert doc["dry_run"] is True
    assert {e["key"] for e in doc["removed"]} == {keys["old"], keys["old_hit"]}
    assert cache_keys(root) == set(keys.values())
    human = run("prune", root, "--max-size", "0", "--dry-run")
    assert human.exit_code == 0 and "would remove 3 entries" in human.stdout
    assert cache_keys(root) == set(keys.values())


# -- verify ----------------------------------------------------------------------------


def _damage(root: Path, flip: str, truncate: str) -> None:
    with LocalStore(root) as store:
        flipped, truncated = store.entry_path(flip), store.entry_path(truncate)
    data = bytearray(flipped.read_bytes())
    data[-1] ^= 0xFF
    flipped.write_bytes(bytes(data))
    truncated.write_bytes(truncated.read_bytes()[:-10])


def test_verify_finds_flipped_byte_and_truncation(cache):
    root, (ka, kb, kc) = cache
    assert run("verify", root).exit_code == 0
    _damage(root, flip=ka, truncate=kc)
    result = run("verify", root, "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["checked"] == 3 and sorted(doc["corrupt"]) == sorted([ka, kc])
    assert doc["repaired"] is False
    assert "2 corrupt entries" in assert_one_line_error(result, 1)
    assert cache_keys(root) == {ka, kb, kc}  # a check alone removes nothing


def test_verify_repair_removes_corrupt_entries(cache):
    root, (ka, kb, kc) = cache
    _damage(root, flip=ka, truncate=kc)
    repaired = run("verify", root, "--repair")
    assert repaired.exit_code == 0, repaired.output
    assert "corrupt: " + ka in repaired.stdout
    with LocalStore(root, readonly=True) as store:
        assert not store.contains(ka) and not store.contains(kc) and store.contains(kb)
    again = cli_json("verify", root)
    assert again["corrupt"] == [] and again["checked"] == 1


def test_verify_repair_removes_a_stray_file(cache):
    root, keys = cache
    stray = root / "entries" / keys[0][:2] / "stray.xlac"
    stray.write_bytes(b"junk")
    found = run("verify", root, "--json")
    assert found.exit_code == 1 and json.loads(found.stdout)["corrupt"] == ["stray"]
    assert run("verify", root, "--repair").exit_code == 0
    assert not stray.exists()
    assert cli_json("verify", root)["corrupt"] == []


# -- rm --------------------------------------------------------------------------------


def test_rm_existing_keys_and_prefix(cache):
    root, (ka, kb, kc) = cache
    doc = cli_json("rm", root, ka, kb[:10])
    assert doc["removed"] == [ka, kb] and doc["missing"] == []
    assert cache_keys(root) == {kc}


def test_rm_unknown_key_fails_but_removes_the_others(cache):
    root, (ka, kb, kc) = cache
    unknown = key_for("never stored")
    result = run("rm", root, ka, unknown)
    line = assert_one_line_error(result, 2)
    assert unknown in line
    assert cache_keys(root) == {kb, kc}


def test_rm_ambiguous_prefix_removes_nothing(tmp_path):
    root = tmp_path / "cache"
    keys = ["abcdef01" + digit * 56 for digit in "01"]
    with LocalStore(root) as store:
        for key in keys:
            store.put(key, entry.encode(key, b"x" * 100, compile_seconds=1.0))
    line = assert_one_line_error(run("rm", root, "abcdef01"), 2)
    assert "ambiguous" in line
    assert cache_keys(root) == set(keys)
    assert cli_json("rm", root, keys[1][:9])["removed"] == [keys[1]]


def test_rm_malformed_key_removes_nothing(cache):
    root, keys = cache
    assert_one_line_error(run("rm", root, keys[0], "not-a-key"), 2)
    assert cache_keys(root) == set(keys)


# -- export and import -----------------------------------------------------------------


def test_export_import_round_trip(cache, tmp_path):
    root, keys = cache
    bundle = tmp_path / "cache.tar"
    exported = cli_json("export", root, bundle)
    assert exported["exported"] == 3 and exported["corrupt"] == []
    manifest, members = read_bundle(bundle)
    assert manifest["format"] == "xlacache-bundle" and manifest["xlacache_version"]
    assert {e["key"] for e in manifest["entries"]} == set(keys)
    assert set(members) == {f"entries/{k[:2]}/{k}.xlac" for k in keys}

    fresh = tmp_path / "fresh"
    imported = cli_json("import", bundle, fresh)
    assert (imported["imported"], imported["skipped"], imported["corrupt"]) == (3, 0, 0)
    assert cache_keys(fresh) == set(keys)
    with LocalStore(root, readonly=True) as a, LocalStore(fresh, readonly=True) as b:
        assert all(a.get(k) == b.get(k) for k in keys)
    assert cli_json("verify", fresh)["corrupt"] == []
    again = cli_json("import", bundle, fresh)
    assert (again["imported"], again["skipped"]) == (0, 3)


def test_export_leaves_out_corrupt_entries(cache, tmp_path):
    root, (ka, kb, kc) = cache
    _damage(root, flip=ka, truncate=kc)
    bundle = tmp_path / "partial.tar"
    result = run("export", root, bundle, "--json")
    assert_one_line_error(result, 1)
    assert sorted(json.loads(result.stdout)["corrupt"]) == sorted([ka, kc])
    manifest, _ = read_bundle(bundle)
    assert [e["key"] for e in manifest["entries"]] == [kb]


def test_import_skips_corrupt_member(cache, tmp_path):
    root, keys = cache
    bundle = tmp_path / "b.tar"
    assert run("export", root, bundle).exit_code == 0
    manifest, members = read_bundle(bundle)
    name = f"entries/{keys[1][:2]}/{keys[1]}.xlac"
    damaged = bytearray(members[name])
    damaged[-1] ^= 0x01
    members[name] = bytes(damaged)
    write_bundle(bundle, manifest, members)
    result = run("import", bundle, tmp_path / "dest", "--json")
    assert_one_line_error(result, 1)
    doc = json.loads(result.stdout)
    assert doc["imported"] == 2 and doc["corrupt_keys"] == [keys[1]]
    assert cache_keys(tmp_path / "dest") == {keys[0], keys[2]}


def test_import_never_extracts_by_member_path(cache, tmp_path):
    root, keys = cache
    bundle = tmp_path / "b.tar"
    run("export", root, bundle)
    manifest, members = read_bundle(bundle)
    good = members.pop(f"entries/{keys[0][:2]}/{keys[0]}.xlac")
    members[f"../{keys[0]}.xlac"] = good  # the listed entry only under an escaping name
    members["../../escape.txt"] = b"owned"
    write_bundle(bundle, manifest, members)
    with tarfile.open(bundle, "a") as tar:  # and a symlink where an entry should be
        link = tarfile.TarInfo(f"entries/{keys[1][:2]}/{keys[1]}.xlac")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    dest = tmp_path / "work" / "dest"
    result = run("import", bundle, dest, "--json")
    assert result.exit_code == 1
    assert sorted(json.loads(result.stdout)["corrupt_keys"]) == sorted(keys[:2])
    assert cache_keys(dest) == {keys[2]}
    assert not (tmp_path / "work" / f"{keys[0]}.xlac").exists()
    assert not (tmp_path / "escape.txt").exists()


# -- read-only opening, remote URLs, progress ------------------------------------------


def _spy_open_store(monkeypatch, root: Path) -> list[tuple[str, dict]]:
    """Record open_store calls; any URL opens the local cache at `root`."""
    calls: list[tuple[str, dict]] = []

    def fake_open_store(url, **kwargs):
        calls.append((url, kwargs))
        return LocalStore(root, readonly=kwargs["readonly"], create=kwargs["create"])

    monkeypatch.setattr(common, "open_store", fake_open_store)
    return calls


@pytest.mark.parametrize(
    ("args", "readonly"),
    [
        (["inspect"], True),
        (["stats"], True),
        (["verify"], True),
        (["prune", "--older-than", "1d", "--dry-run"], True),
        (["verify", "--repair"], False),
        (["prune", "--older-than", "1d"], False),
    ],
)
def test_commands_open_read_only_when_they_only_read(cache, monkeypatch, args, readonly):
    root, _ = cache
    calls = _spy_open_store(monkeypatch, root)
    result = run(args[0], root, *args[1:])
    assert result.exit_code == 0, result.output
    assert calls == [(str(root), {"readonly": readonly, "create": False})]


def test_export_opens_read_only(cache, monkeypatch, tmp_path):
    root, _ = cache
    calls = _spy_open_store(monkeypatch, root)
    assert run("export", root, tmp_path / "b.tar").exit_code == 0
    assert calls[0][1] == {"readonly": True, "create": False}


def test_token_goes_only_to_remote_urls(cache, monkeypatch):
    root, _ = cache
    calls = _spy_open_store(monkeypatch, root)
    url = "grpc://cache.example:7070"
    assert run("stats", url, "--token", "s3cret").exit_code == 0
    assert run("inspect", url, env={"XLACACHE_TOKEN": "from-env"}).exit_code == 0
    assert run("stats", root, "--token", "ignored").exit_code == 0
    assert [c[1].get("token") for c in calls] == ["s3cret", "from-env", None]
    assert "token" not in calls[2][1]


@pytest.mark.parametrize("command", ["export", "import", "verify"])
def test_progress_goes_to_stderr_not_json_stdout(cache, monkeypatch, tmp_path, command):
    root, _ = cache
    bundle = tmp_path / "b.tar"
    assert run("export", root, bundle).exit_code == 0
    monkeypatch.setattr(common, "MANY_ENTRIES", 1)  # "many entries": progress without a TTY
    args = {
        "export": ["export", root, bundle],
        "import": ["import", bundle, tmp_path / "dest"],
        "verify": ["verify", root],
    }[command]
    result = run(*args, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["store"]
    assert {"export": "exporting", "import": "importing", "verify": "verifying 3 entries"}[
        command
    ] in result.stderr


def test_no_progress_for_few_entries_without_tty(cache, tmp_path):
    root, _ = cache
    result = run("export", root, tmp_path / "b.tar")
    assert result.exit_code == 0 and result.stderr == ""


# -- bad input -------------------------------------------------------------------------


def _bad_inputs(root: Path, tmp: Path) -> dict[str, list]:
    (tmp / "empty").mkdir()
    (tmp / "occupied").mkdir()
    (tmp / "occupied" / "notes.txt").write_text("mine")
    (tmp / "text.tar").write_text("not a tar at all\n")
    write_bundle(tmp / "nomanifest.tar", None, {"entries/x": b"x"})
    write_bundle(tmp / "foreign.tar", {"format": "something-else"}, {})
    write_bundle(tmp / "badrows.tar", {"format": "xlacache-bundle", "format_version": 1,
                                       "entries": [{"key": "../../etc"}]}, {})  # fmt: skip
    good = tmp / "good.tar"
    run("export", root, good)
    return {
        "not a cache (missing)": ["inspect", tmp / "missing"],
        "not a cache (empty dir)": ["stats", tmp / "empty"],
        "not a cache (a file)": ["verify", tmp / "text.tar"],
        "bad size": ["prune", root, "--max-size", "10XB"],
        "bad duration": ["prune", root, "--older-than", "7 fortnights"],
        "bad unused duration": ["prune", root, "--unused-for", "-3d"],
        "no prune policy": ["prune", root],
        "unknown key": ["rm", root, key_for("unknown")],
        "unknown prefix": ["rm", root, "00000000"],
        "malformed key": ["rm", root, "xyz"],
        "short prefix": ["rm", root, "abc"],
        "missing bundle": ["import", tmp / "nope.tar", tmp / "dest"],
        "bundle is a directory": ["import", tmp / "empty", tmp / "dest"],
        "not a tar": ["import", tmp / "text.tar", tmp / "dest"],
        "no manifest": ["import", tmp / "nomanifest.tar", tmp / "dest"],
        "foreign manifest": ["import", tmp / "foreign.tar", tmp / "dest"],
        "bad manifest rows": ["import", tmp / "badrows.tar", tmp / "dest"],
        "import into occupied dir": ["import", good, tmp / "occupied"],
        "export into missing dir": ["export", root, tmp / "no" / "such" / "b.tar"],
        "missing argument": ["inspect"],
        "bad limit": ["inspect", root, "--limit", "0"],
        "unknown option": ["stats", root, "--colour"],
    }


BAD_INPUT_CASES = [
    "not a cache (missing)",
    "not a cache (empty dir)",
    "not a cache (a file)",
    "bad size",
    "bad duration",
    "bad unused duration",
    "no prune policy",
    "unknown key",
    "unknown prefix",
    "malformed key",
    "short prefix",
    "missing bundle",
    "bundle is a directory",
    "not a tar",
    "no manifest",
    "foreign manifest",
    "bad manifest rows",
    "import into occupied dir",
    "export into missing dir",
    "missing argument",
    "bad limit",
    "unknown option",
]


@pytest.mark.parametrize("case", BAD_INPUT_CASES)
def test_bad_input_is_one_line_and_exit_2(cache, tmp_path, case):
    root, keys = cache
    args = _bad_inputs(root, tmp_path)[case]
    assert_one_line_error(run(*args), 2)
    assert cache_keys(root) == set(keys)
    assert not (tmp_path / "dest").exists()  # a bad bundle creates no cache
    assert (tmp_path / "occupied").exists() and not (tmp_path / "occupied" / "entries").exists()


def test_bad_input_case_list_is_complete(cache, tmp_path):
    root, _ = cache
    assert sorted(_bad_inputs(root, tmp_path)) == sorted(BAD_INPUT_CASES)


def test_store_failure_is_one_line_exit_1(cache, monkeypatch):
    root, _ = cache

    def broken_list(self):
        raise PermissionError(13, "Permission denied", str(root / "entries"))

    monkeypatch.setattr(LocalStore, "list", broken_list)
    line = assert_one_line_error(run("inspect", root), 1)
    assert "Permission denied" in line


# -- the installed console script ------------------------------------------------------


def _console_script() -> Path:
    script = Path(sys.executable).with_name("xlacache")
    if not script.exists():
        pytest.skip("xlacache console script is not installed in this environment")
    return script


@pytest.mark.slow
def test_console_script_json_and_errors(cache, tmp_path):
    root, keys = cache
    script = _console_script()
    env = {**os.environ, "COLUMNS": "80"}
    ok = subprocess.run(
        [script, "inspect", root, "--json"], capture_output=True, text=True, env=env
    )
    assert ok.returncode == 0, ok.stderr
    assert [e["key"] for e in json.loads(ok.stdout)["entries"]] == keys
    assert ok.stderr == ""
    bad = subprocess.run(
        [script, "prune", root, "--max-size", "lots"], capture_output=True, text=True, env=env
    )
    assert bad.returncode == 2
    assert bad.stdout == ""
    assert bad.stderr.startswith("xlacache: error: --max-size: invalid size 'lots'")
    assert len(bad.stderr.splitlines()) == 1 and "Traceback" not in bad.stderr


@pytest.mark.parametrize("args", [["bogus"], ["bogus", "x", "--json"], ["--nope"]])
def test_unknown_command_or_option_is_one_line(args):
    line = assert_one_line_error(run(*args), 2)
    assert "bogus" in line or "--nope" in line


@pytest.mark.slow
def test_unknown_command_from_the_console_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "xlacache", "bogus"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "xlacache: error: no such command 'bogus' (see 'xlacache --help')"
    ]
