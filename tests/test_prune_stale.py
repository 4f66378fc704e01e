"""`xlacache prune --stale` and stats by jaxlib version, on a directory, a server and a
bucket: after a JAX upgrade, what no process of the installed jaxlib can load goes."""

from __future__ import annotations

import signal

import pytest

from tests.cli_helpers import assert_one_line_error, cli_json, run
from tests.conftest import make_blob, make_key
from tests.server.srvutil import start_server
from xlacache.stores import open_store
from xlacache.stores.base import PrunePolicy, current_jaxlib
from xlacache.stores.gcs import GCSStore, entry_name

pytestmark = pytest.mark.timeout(180)

OLD = "0.6.2"
CURRENT = range(70, 73)  # entries this jaxlib wrote
STALE = range(80, 82)  # entries an older jaxlib wrote


def _fill(store) -> dict[str, int]:
    """Current and stale entries; their sizes by key."""
    sizes = {}
    for n in CURRENT:
        key, blob = make_blob(n)
        store.put(key, blob)
        sizes[key] = len(blob)
    for n in STALE:
        key, blob = make_blob(n, summary={"jaxlib": {"version": OLD}}, platform_name="cpu")
        store.put(key, blob)
        sizes[key] = len(blob)
    return sizes


@pytest.fixture(params=["dir", "grpc", "gs"])
def filled(request, tmp_path):
    """(url, sizes by key) of a store holding CURRENT and STALE entries."""
    if request.param == "dir":
        url = str(tmp_path / "cache")
        with open_store(url) as store:
            yield url, _fill(store)
    elif request.param == "grpc":
        server = start_server(tmp_path)
        try:
            with open_store(server.url, timeout=10) as store:
                yield server.url, _fill(store)
        finally:
            server.stop(signal.SIGKILL)
    else:
        gcs = request.getfixturevalue("gcs")
        store = GCSStore(gcs.url())
        sizes = _fill(store)
        # An object written before jaxlib was recorded in metadata: its header decides.
        name = entry_name(make_key(STALE[0]))
        obj = store.objects.stat(name)
        blob, _ = store.objects.read(name)
        metadata = {k: v for k, v in obj.metadata.items() if k not in ("jaxlib", "platform")}
        assert store.objects.replace(name, blob, obj.generation, metadata)
        yield store.url, sizes


def test_prune_stale_lists_then_removes_what_this_jaxlib_cannot_load(filled):
    url, sizes = filled
    stale = {make_key(n) for n in STALE}
    current = set(sizes) - stale

    stats = cli_json("stats", url)
    assert stats["by_jaxlib"][0] == {
        "jaxlib": current_jaxlib(), "entries": 3, "bytes": sum(sizes[k] for k in current),
        "rewarmed": 0,
    }  # fmt: skip
    assert stats["by_jaxlib"][1]["jaxlib"] in (OLD, "")  # gs: one object without metadata
    assert sum(v["entries"] for v in stats["by_jaxlib"]) == 5

    dry = cli_json("prune", url, "--stale", "--dry-run")
    assert {e["key"] for e in dry["removed"]} == stale and dry["dry_run"]
    assert dry["bytes"] == sum(sizes[k] for k in stale)
    table = run("prune", url, "--stale", "--dry-run")
    assert table.exit_code == 0 and "would remove 2 entries" in table.stdout
    assert cli_json("stats", url)["entries"] == 5  # a dry run removes nothing

    done = cli_json("prune", url, "--stale")
    assert {e["key"] for e in done["removed"]} == stale
    assert {e["key"] for e in cli_json("inspect", url)["entries"]} == current
    assert cli_json("prune", url, "--stale")["count"] == 0


def test_prune_needs_something_to_prune_by(tmp_path):
    result = run("prune", str(tmp_path / "cache"))
    assert_one_line_error(result)
    assert "--stale" in result.stderr


def test_a_server_prune_lists_more_entries_than_a_message_of_chunks_holds(tmp_path):
    """A Prune's reply lists every removed entry (about 140 bytes each), past the size of
    the messages a server accepts (one chunk, here 64 KiB: about 900 entries)."""
    store_dir = tmp_path / "server-store"
    with open_store(str(store_dir), fsync="off") as store:
        for n in range(1200):
            store.put(*make_blob(n, payload=n.to_bytes(4, "big")))
    server = start_server(tmp_path, "--chunk-size", "64KiB", store=store_dir)
    try:
        with open_store(server.url, timeout=30) as remote:
            assert len(remote.prune(PrunePolicy(max_size=0), dry_run=True)) == 1200
            assert len(remote.prune(PrunePolicy(max_size=0))) == 1200
            assert remote.summary().entries == 0
    finally:
        server.stop(signal.SIGKILL)
