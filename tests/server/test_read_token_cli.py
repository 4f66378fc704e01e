"""The read-only CLI commands over gRPC with a read token, as docs/cli.md lists them, and
tools' reads leave the server's hit counts and LRU order alone (issue 20, item 4)."""

from __future__ import annotations

import json

import pytest
from srvutil import ADMIN_TOKEN, READ_TOKEN, WRITE_TOKEN, make_entry

from tests.cli_helpers import assert_one_line_error, run
from tests.waiting import wait_for
from xlacache.stores import open_store

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]


def _hits(url: str) -> dict[str, tuple[int, float]]:
    """(hits, last_used) by key, as an admin's `inspect --json` shows them."""
    result = run("inspect", url, "--json", "--token", ADMIN_TOKEN)
    assert result.exit_code == 0, result.output
    return {e["key"]: (e["hits"], e["last_used"]) for e in json.loads(result.stdout)["entries"]}


def test_read_token_runs_the_read_only_commands_and_counts_no_use(auth_server, tmp_path):
    writer = open_store(auth_server.url, token=WRITE_TOKEN)
    keys = []
    for name in ("a", "b", "c"):
        key, blob = make_entry(name, 2000)
        writer.put(key, blob)
        keys.append(key)
    assert open_store(auth_server.url, token=READ_TOKEN).get(keys[0]) is not None  # one use
    before = _hits(auth_server.url)
    assert before[keys[0]][0] == 1 and before[keys[1]][0] == 0

    url, read = auth_server.url, ("--token", READ_TOKEN)
    for args in (
        ("inspect", url),
        ("stats", url),
        ("verify", url),
        ("prune", url, "--max-size", "0", "--dry-run"),
        ("export", url, tmp_path / "bundle.tar"),
        ("diff", url, keys[0], keys[1]),
        ("explain", url),
    ):
        result = run(*args, *read)
        assert result.exit_code == 0, (args, result.output)
    result = run("prune", url, "--max-size", "0", "--dry-run", "--json", *read)
    assert json.loads(result.stdout)["count"] == 3  # what clearing would remove, all of it
    # An audit reads every header: unsigned entries make it exit 1, never PERMISSION_DENIED.
    key_file = tmp_path / "k"
    assert run("keygen", key_file).exit_code == 0
    result = run("verify", url, "--trusted-keys", f"{key_file}.pub", *read)
    assert result.exit_code == 1 and "not signed by a trusted key" in result.stderr
    # Hits reach the index in the background: one real use, once shown, shows the rest.
    open_store(url, token=READ_TOKEN).get(keys[1])
    after = wait_for(lambda: h if (h := _hits(url))[keys[1]][0] == 1 else None, 30,
                     "the served hit to be counted", interval=0.1)  # fmt: skip
    after[keys[1]] = before[keys[1]][0], after[keys[1]][1]
    assert {k: h for k, (h, _) in after.items()} == {k: h for k, (h, _) in before.items()}
    after[keys[1]] = before[keys[1]]
    for key in keys:
        assert after[key][1] == before[key][1], "a tool's read refreshed last_used"

    # What changes the cache still needs an admin.
    for args in (
        ("verify", url, "--repair"),
        ("prune", url, "--max-size", "0"),
        ("sign", url, "--key", key_file),
    ):
        line = assert_one_line_error(run(*args, *read), 1)
        assert "this call needs" in line, line
    assert len(_hits(url)) == 3


def test_sign_over_grpc_replaces_the_servers_entries(auth_server, tmp_path):
    writer = open_store(auth_server.url, token=WRITE_TOKEN)
    for name in ("a", "b"):
        writer.put(*make_entry(name, 2000))
    key_file = tmp_path / "k"
    assert run("keygen", key_file).exit_code == 0
    url = auth_server.url
    result = run("sign", url, "--key", key_file, "--json", "--token", ADMIN_TOKEN)
    assert result.exit_code == 0, result.output
    assert len(json.loads(result.stdout)["signed"]) == 2
    result = run("verify", url, "--trusted-keys", f"{key_file}.pub", "--token", READ_TOKEN)
    assert result.exit_code == 0, result.output  # the server holds the signed entries


def test_peek_over_grpc_is_no_hit(auth_server):
    key, blob = make_entry("peeked", 2000)
    open_store(auth_server.url, token=WRITE_TOKEN).put(key, blob)
    reader = open_store(auth_server.url, token=READ_TOKEN)
    assert reader.peek(key) == blob and reader.read_header(key).key == key
    assert reader.stat(key).hits == 0
    assert reader.get(key) == blob
    assert reader.stat(key).hits == 1
