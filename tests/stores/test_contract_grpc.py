"""The store contract on GrpcStore: a real `xlacache serve` subprocess on loopback."""

from __future__ import annotations

import signal

import pytest

from tests.server.srvutil import start_server
from tests.stores.backends import flip_body_byte, server_entry_path, tree_snapshot
from tests.stores.contract import StoreContract
from xlacache.stores.remote import GrpcStore

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="class")
def server(tmp_path_factory):
    """One server per test class; `emptied` gives each test an empty store."""
    srv = start_server(tmp_path_factory.mktemp("server"))
    yield srv
    srv.stop(signal.SIGKILL)


@pytest.fixture
def emptied(server):
    """The class's server, with every entry a test left behind deleted afterwards."""
    yield server
    with GrpcStore(server.url, timeout=10) as admin:
        for info in list(admin.list()):
            admin.delete(info.key)


def server_snapshot(server):
    """The server's entries (its own hit bookkeeping, the index, may change on reads)."""
    return tree_snapshot(server.store, exclude=("index.sqlite",))


class TestGrpcStore(StoreContract):
    readonly_reports_misses = True

    @pytest.fixture
    def store(self, emptied):
        with GrpcStore(emptied.url, timeout=10) as s:
            s.server = emptied
            yield s

    def readonly_view(self, store):
        return GrpcStore(store.url, readonly=True, timeout=10)

    def corrupt(self, store, key):
        flip_body_byte(server_entry_path(store.server, key))

    def snapshot(self, store):
        return server_snapshot(store.server)

    def child_store_code(self, store):
        code = f"from xlacache.stores.remote import GrpcStore\nstore = GrpcStore({store.url!r})"
        return code, {}
