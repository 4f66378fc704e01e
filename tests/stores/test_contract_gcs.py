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
