"""The store contract on TieredStore: a local directory in front of a server or a bucket.

Reads and writes go through both tiers; listing, summary, prune and verify are the
local tier's. A corrupt entry (damaged in both tiers) is a counted miss, not an error.
"""

from __future__ import annotations

import pytest

from tests.stores.backends import (
    bucket_snapshot,
    corrupt_object,
    flip_body_byte,
    server_entry_path,
    tree_snapshot,
)
from tests.stores.contract import StoreContract
from tests.stores.test_contract_grpc import emptied, server, server_snapshot  # noqa: F401
from xlacache.stores.gcs import GCSStore
from xlacache.stores.local import LocalStore
from xlacache.stores.remote import GrpcStore
from xlacache.stores.tiered import TieredStore

pytestmark = pytest.mark.timeout(180)


class TieredContract(StoreContract):
    corrupt_get_raises = False

    def open_remote(self, store, readonly: bool):
        raise NotImplementedError

    def remote_code(self, store) -> str:
        raise NotImplementedError

    def readonly_view(self, store):
        local = LocalStore(store.local.root, readonly=True)
        return TieredStore(local, self.open_remote(store, readonly=True), readonly=True)

    def settle(self, store):
        assert store.flush(60)

    def corrupt(self, store, key):
        flip_body_byte(store.local.entry_path(key))

    def snapshot(self, store):
        # SQLite's lock file: a reader beside a live writer keeps its read marks there.
        return tree_snapshot(store.local.root, exclude=("index.sqlite-shm",))

    def child_store_code(self, store):
        code = (
            "import tempfile\n"
            "from xlacache.stores.local import LocalStore\n"
            "from xlacache.stores.tiered import TieredStore\n"
            f"{self.remote_code(store)}\n"
            "store = TieredStore(LocalStore(tempfile.mkdtemp()), remote)"
        )
        return code, {}


class TestTieredOverGrpc(TieredContract):
    @pytest.fixture
    def store(self, tmp_path, emptied):  # noqa: F811
        remote = GrpcStore(emptied.url, timeout=10)
        with TieredStore(LocalStore(tmp_path / "local"), remote) as s:
            s.server = emptied
            yield s

    def open_remote(self, store, readonly):
        return GrpcStore(store.remote.url, readonly=readonly, timeout=10)

    def remote_code(self, store):
        return (
            "from xlacache.stores.remote import GrpcStore\n"
            f"remote = GrpcStore({store.remote.url!r})"
        )

    def corrupt(self, store, key):
        super().corrupt(store, key)
        flip_body_byte(server_entry_path(store.server, key))

    def snapshot(self, store):
        return super().snapshot(store), server_snapshot(store.server)


class TestTieredOverGCS(TieredContract):
    @pytest.fixture
    def store(self, tmp_path, gcs):
        with TieredStore(LocalStore(tmp_path / "local"), GCSStore(gcs.url())) as s:
            s.gcs = gcs
            yield s

    def open_remote(self, store, readonly):
        return GCSStore(store.remote.url, readonly=readonly)

    def remote_code(self, store):
        return f"from xlacache.stores.gcs import GCSStore\nremote = GCSStore({store.remote.url!r})"

    def child_store_code(self, store):
        return super().child_store_code(store)[0], store.gcs.env

    def corrupt(self, store, key):
        super().corrupt(store, key)
        corrupt_object(store.remote, key)

    def snapshot(self, store):
        return super().snapshot(store), bucket_snapshot(store.remote, store.gcs.proxy)
