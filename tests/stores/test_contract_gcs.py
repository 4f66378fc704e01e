"""The store contract on GCSStore: gcsfs against fake-gcs-server, through a loopback proxy."""

from __future__ import annotations

import pytest

from tests.stores.backends import bucket_snapshot, corrupt_object
from tests.stores.contract import StoreContract
from xlacache.stores.gcs import GCSStore

pytestmark = pytest.mark.timeout(180)


class TestGCSStore(StoreContract):
    @pytest.fixture
    def store(self, gcs):
        with GCSStore(gcs.url()) as s:
            s.gcs = gcs
            yield s

    def readonly_view(self, store):
        return GCSStore(store.url, readonly=True)

    def corrupt(self, store, key):
        corrupt_object(store, key)

    def snapshot(self, store):
        return bucket_snapshot(store, store.gcs.proxy)

    def child_store_code(self, store):
        code = f"from xlacache.stores.gcs import GCSStore\nstore = GCSStore({store.url!r})"
        return code, store.gcs.env

    @pytest.mark.slow
    def test_eight_writer_processes_leave_one_valid_entry(self, store, tmp_path):
        store.gcs.proxy.reset_log()
        self.check_concurrent_writers(store, tmp_path, writers=8)
        statuses = sorted(s for _, path, s in store.gcs.proxy.writes() if "/upload/" in path)
        assert statuses == [200] + [412] * 7  # one created it; GCS refused the other seven
