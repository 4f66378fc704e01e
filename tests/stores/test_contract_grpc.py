"""The store contract on GrpcStore: a real `xlacache serve` subprocess on loopback."""

from __future__ import annotations

import signal

import pytest

from tests.server.srvutil import start_bucket_server, start_server
from tests.stores.backends import (
    corrupt_object,
    flip_body_byte,
    server_entry_path,
    tree_snapshot,
)
from tests.stores.contract import StoreContract
from xlacache.stores.gcs import GCSStore
from xlacache.stores.local import LocalStore
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


@pytest.fixture(scope="module")
def bucket_server(tmp_path_factory, gcs_emulator):
    """A server over a bucket of the session's emulator, with its own local directory."""
    url = f"gs://{gcs_emulator.create_bucket()}/cache"
    env = {"STORAGE_EMULATOR_HOST": gcs_emulator.url}
    srv = start_bucket_server(tmp_path_factory.mktemp("bucket-server"), url, env)
    srv.bucket = GCSStore(url, endpoint_url=gcs_emulator.url, token="anon")
    yield srv
    srv.stop(signal.SIGKILL)
    srv.bucket.close()


@pytest.mark.slow  # a server in front of a bucket: seconds per test (measured)
class TestGrpcStoreOverABucket(TestGrpcStore):
    """The same contract through a server whose store is a bucket (read-through and
    write-through over its local directory; the bucket answers queries)."""

    @pytest.fixture
    def emptied(self, bucket_server):
        yield bucket_server
        with GrpcStore(bucket_server.url, timeout=10) as admin:
            for info in list(admin.list()):
                admin.delete(info.key)

    def corrupt(self, store, key):
        local = LocalStore(store.server.cache_dir, readonly=True).entry_path(key)
        if local.exists():
            flip_body_byte(local)
        corrupt_object(store.server.bucket, key)

    def snapshot(self, store):
        local = tree_snapshot(store.server.cache_dir, exclude=("index.sqlite",))
        return local, sorted(
            (o.name, o.generation, o.metageneration, o.size)
            for o in store.server.bucket.objects.list("")
        )
