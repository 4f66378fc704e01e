"""The store contract on LocalStore: a cache directory with its SQLite index."""

from __future__ import annotations

import pytest

from tests.stores.backends import flip_body_byte, tree_snapshot
from tests.stores.contract import StoreContract
from xlacache.stores.local import LocalStore


class TestLocalStore(StoreContract):
    @pytest.fixture
    def store(self, tmp_path):
        with LocalStore(tmp_path / "cache") as s:
            yield s

    def readonly_view(self, store):
        return LocalStore(store.root, readonly=True)

    def corrupt(self, store, key):
        flip_body_byte(store.entry_path(key))

    def snapshot(self, store):
        # SQLite's lock file: a reader beside a live writer keeps its read marks there.
        return tree_snapshot(store.root, exclude=("index.sqlite-shm",))

    def child_store_code(self, store):
        code = "from xlacache.stores.local import LocalStore\n"
        return code + f"store = LocalStore({str(store.root)!r})", {}
