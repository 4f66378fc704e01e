"""The lease contract on every lease table: memory, directory (flock), GCS objects, and a
server's (memory, or a bucket's) through the Lease RPCs."""

from __future__ import annotations

import fcntl
import os
import signal
import threading

import pytest

from tests.server.srvutil import start_bucket_server, start_server
from tests.stores.lease_contract import LeaseContract
from xlacache.stores.dir_leases import SKEW, DirLeases
from xlacache.stores.gcs_leases import DEFAULT_SKEW, GCSLeases
from xlacache.stores.gcs_objects import GCSObjects
from xlacache.stores.leases import MemoryLeases
from xlacache.stores.remote import GrpcStore

pytestmark = pytest.mark.timeout(180)


class TestMemoryLeases(LeaseContract):
    pushes = pushes_free = True

    @pytest.fixture
    def table(self):
        return MemoryLeases()


class TestDirLeases(LeaseContract):
    skew = SKEW
    sees_death = True
    pushes = True

    @pytest.fixture
    def table(self, tmp_path):
        leases = DirLeases(tmp_path)
        yield leases
        leases.close()

    def child_table_code(self, table):
        root = str(table.dir.parent)
        return f"from xlacache.stores.dir_leases import DirLeases\ntable = DirLeases({root!r})", {}

    def test_a_shared_lock_left_on_a_dead_holders_file_does_not_refuse_the_takeover(
        self, table, tmp_path
    ):
        """A holder dies while a wait that timed out still blocks on its lock: that waiter's
        thread takes a shared lock and lets go a moment later. An acquire in that moment is
        still a takeover, not a refusal naming the dead holder (a CI failure once)."""
        from tests.conftest import make_key

        name = make_key(21)
        dead = DirLeases(tmp_path)
        assert dead.acquire(name, "dead-holder", 30).granted
        fd, _ = dead._held.pop((name, "dead-holder"))
        os.close(fd)  # its process died: the lock is gone, its record stays
        watcher = os.open(table.dir / f"{name}.lock", os.O_RDONLY)
        fcntl.flock(watcher, fcntl.LOCK_SH)  # the woken waiter, not yet let go
        threading.Timer(0.2, os.close, [watcher]).start()
        grant = table.acquire(name, "waiter", 30)
        assert grant.granted and grant.taken_over
        assert table.holder(name) == "waiter"
        table.release(name, "waiter")


class TestGCSLeases(LeaseContract):
    skew = DEFAULT_SKEW

    @pytest.fixture
    def table(self, gcs):
        table = GCSLeases(GCSObjects(gcs.url()))
        table.gcs = gcs
        return table

    def child_table_code(self, table):
        code = (
            "from xlacache.stores.gcs_leases import GCSLeases\n"
            "from xlacache.stores.gcs_objects import GCSObjects\n"
            f"table = GCSLeases(GCSObjects({table.objects.url!r}))"
        )
        return code, table.gcs.env

    def test_a_lease_is_one_object_and_gone_once_released(self, table):
        from tests.conftest import make_key

        name = make_key(9)
        assert table.acquire(name, "holder-a", 30).granted
        assert [o.name for o in table.objects.list("leases/")] == [f"leases/{name}"]
        table.release(name, "holder-a")
        assert list(table.objects.list("leases/")) == []

    def test_a_write_whose_answer_was_lost_is_recognized_as_ones_own(self, table):
        from tests.conftest import make_key

        name = make_key(10)
        # The create lands, the client hears 503 and retries into "precondition failed".
        table.gcs.proxy.fail(503, times=1, method="POST", after=True)
        grant = table.acquire(name, "holder-a", 30)
        assert grant.granted and not grant.taken_over
        assert table.gcs.proxy.injected() == 1
        assert table.holder(name) == "holder-a"


class GrpcLeaseTable:
    """The lease table of a server, as its clients reach it."""

    @pytest.fixture
    def table(self, lease_server):
        store = GrpcStore(lease_server.url, timeout=10)
        yield store.leases()
        store.close()

    def child_table_code(self, table):
        code = (
            "from xlacache.stores.remote import GrpcStore\n"
            f"table = GrpcStore({table.store.url!r}, timeout=10).leases()"
        )
        return code, {}


@pytest.fixture(scope="module")
def memory_lease_server(tmp_path_factory):
    srv = start_server(tmp_path_factory.mktemp("lease-server"))
    yield srv
    srv.stop(signal.SIGKILL)


@pytest.fixture(scope="module")
def bucket_lease_server(tmp_path_factory, gcs_emulator):
    url = f"gs://{gcs_emulator.create_bucket()}/cache"
    env = {"STORAGE_EMULATOR_HOST": gcs_emulator.url}
    srv = start_bucket_server(tmp_path_factory.mktemp("bucket-server"), url, env)
    yield srv
    srv.stop(signal.SIGKILL)


class TestServerLeases(GrpcLeaseTable, LeaseContract):
    sees_death = True
    pushes = pushes_free = True

    @pytest.fixture
    def lease_server(self, memory_lease_server):
        return memory_lease_server

    def test_a_grant_that_arrives_after_close_ends_quietly(self, lease_server):
        """An acquire's grant reaches its thread only after the store was closed (a slow
        thread on a busy machine; a CI failure once): the hold is let go, and no background
        error is kept for strict mode."""
        from tests.conftest import make_key
        from xlacache import counters
        from xlacache._proto.v1 import cache_pb2 as pb

        store = GrpcStore(lease_server.url, timeout=10)
        table = store.leases()
        name = make_key(23)
        request = table._request(name, "holder-a", pb.LeaseRequest.ACQUIRE, 30)
        call, reply = table._open(request)  # granted on the server, not yet bound here
        assert reply.granted
        store.close()
        table._bind(name, "holder-a", call, request)
        for thread in threading.enumerate():  # a hold thread, had one started, ends at once
            if thread.name == "xlacache-lease-hold":
                thread.join(10)
        assert not call.is_active()
        assert counters.take_deferred() == []


@pytest.mark.slow  # a server in front of a bucket: seconds per test (measured)
class TestBucketServerLeases(GrpcLeaseTable, LeaseContract):
    skew = DEFAULT_SKEW
    sees_death = True
    pushes = True  # the replica polls the bucket, and answers when the lease ends

    @pytest.fixture
    def lease_server(self, bucket_lease_server):
        return bucket_lease_server
