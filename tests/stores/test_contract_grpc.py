"""The store contract on GrpcStore: a real `xlacache serve` subprocess on loopback."""

from __future__ import annotations

import signal

import pytest

from tests.server.srvutil import start_server
from tests.stores.backends import flip_body_byte, server_entry_path, tree_snapshot
from tests.stores.contract import StoreContract
from xlacache.stores.remote import GrpcStore

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def server(tmp_path):
    srv = start_server(tmp_path)
    yield srv
    srv.stop(signal.SIGKILL)


def server_snapshot(server):
    """The server's entries (its own hit bookkeeping, the index, may change on reads)."""
    return tree_snapshot(server.store, exclude=("index.sqlite",))


class TestGrpcStore(StoreContract):
    @pytest.fixture
    def store(self, server):
        with GrpcStore(server.url, timeout=10) as s:
            s.server = server
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
