"""The lease contract: one mixin of tests every lease table passes (see stores/leases.py).

A backend's test class subclasses `LeaseContract` and provides a `table` fixture (a
fresh table) and, to be killed mid-lease, `child_table_code(table)`: (Python source
defining `table` over the same leases, environment) for a child process. `skew` is
what the backend adds to a ttl before a lease counts as expired; `expires` is False
for leases that live exactly as long as their holder (flock); `sees_death` is True for
backends that notice a dead holder at once (a flock, a server's connection); `pushes`
is True for backends whose waits are woken rather than polled.

No test asserts a duration: "at once" is shown by a ttl far longer than the test may
run, so only noticing the death could have ended the lease.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tests.conftest import make_key
from tests.waiting import wait_for
from xlacache import counters
from xlacache.errors import InvalidKeyError
from xlacache.stores.leases import LeaseTable, Wake

CHILD_SECONDS = 60.0
LONG_TTL = 600.0  # longer than any test runs: a lease that ends was not left to expire

_HOLDER = """
import sys, time
from xlacache.stores.leases import HeldLease
{open_code}
name, ttl, ready = sys.argv[1], float(sys.argv[2]), sys.argv[3]
grant = table.acquire(name, "child-holder", ttl)
assert grant.granted, grant
lease = HeldLease(table, name, "child-holder", ttl)  # renews every ttl/3
open(ready, "w").close()
time.sleep(300)
"""


class LeaseContract:
    skew = 0.0
    expires = True
    sees_death = False
    pushes = False
    pushes_free = False  # a wait for a free lease to be taken is woken, not polled

    def child_table_code(self, table: LeaseTable) -> tuple[str, dict[str, str]] | None:
        return None

    def test_one_holder_at_a_time(self, table):
        name = make_key(1)
        first = table.acquire(name, "holder-a", 30)
        assert first.granted and not first.taken_over and first.holder == "holder-a"
        other = table.acquire(name, "holder-b", 30)
        assert not other.granted and other.holder == "holder-a"
        assert table.holder(name) == "holder-a"
        assert table.acquire(name, "holder-a", 30).granted  # acquiring one's own: a renewal
        assert table.renew(name, "holder-a", 30)
        assert not table.renew(name, "holder-b", 30)
        table.release(name, "holder-b")  # not b's to release: nothing happens
        assert table.holder(name) == "holder-a"
        table.release(name, "holder-a")
        assert table.holder(name) is None
        again = table.acquire(name, "holder-b", 30)
        assert again.granted and not again.taken_over  # released, not taken over
        table.release(name, "holder-b")

    def test_names_are_independent(self, table):
        assert table.acquire(make_key(2), "holder-a", 30).granted
        assert table.acquire(make_key(3), "holder-b", 30).granted
        assert table.holder(make_key(4)) is None
        table.release(make_key(2), "holder-a")
        table.release(make_key(3), "holder-b")

    def test_malformed_names_are_refused(self, table):
        with pytest.raises(InvalidKeyError):
            table.acquire("../../etc/passwd", "holder-a", 30)

    def test_of_many_concurrent_acquirers_one_wins(self, table):
        name = make_key(5)
        barrier = threading.Barrier(8)
        grants = {}

        def take(i: int) -> None:
            barrier.wait(30)
            grants[i] = table.acquire(name, f"holder-{i}", 30)

        threads = [threading.Thread(target=take, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        winners = [i for i, g in grants.items() if g.granted]
        assert len(grants) == 8 and len(winners) == 1
        assert table.holder(name) == f"holder-{winners[0]}"
        table.release(name, f"holder-{winners[0]}")

    @pytest.mark.slow
    def test_an_expired_lease_is_taken_over(self, table):
        if not self.expires:
            pytest.skip("held for as long as the holder lives")
        name = make_key(6)
        assert table.acquire(name, "holder-a", 1.0).granted
        # Not renewed: it expires.
        wait_for(lambda: table.holder(name) is None, 30, "the lease to expire", interval=0.2)
        grant = table.acquire(name, "holder-b", 30)
        assert grant.granted and grant.taken_over
        assert not table.renew(name, "holder-a", 30)  # a lost it
        table.release(name, "holder-a")  # and cannot release b's
        assert table.holder(name) == "holder-b"
        table.release(name, "holder-b")

    @pytest.mark.slow
    def test_a_holder_killed_mid_lease_is_taken_over_within_its_ttl(self, table, tmp_path):
        child = self.child_table_code(table)
        if child is None:
            pytest.skip("this table lives in one process")
        open_code, env = child
        ttl = 3.0
        name = make_key(7)
        ready = tmp_path / "ready"
        code = _HOLDER.format(open_code=textwrap.dedent(open_code))
        proc = subprocess.Popen(
            [sys.executable, "-c", code, name, str(ttl), str(ready)],
            env={**os.environ, **env},
            stderr=subprocess.PIPE,
        )
        try:
            wait_for(ready.exists, CHILD_SECONDS, "the holder to take its lease", procs=[proc])
            # Alive, it renews: refused for longer than its ttl.
            alive_until = time.monotonic() + 1.5 * ttl
            while time.monotonic() < alive_until:
                grant = table.acquire(name, "waiter", ttl)
                assert not grant.granted and grant.holder == "child-holder"
                time.sleep(0.25)
            assert table.holder(name) == "child-holder"
        finally:
            proc.kill()
            proc.wait(30)
        killed = time.monotonic()
        grant = wait_for(
            lambda: g if (g := table.acquire(name, "waiter", ttl)).granted else None,
            CHILD_SECONDS,
            "the waiter to take the lease over",
            interval=0.1,
        )
        # Taken over once the lease expired: within its ttl (plus the backend's clock
        # allowance and a few polls), not after some longer timeout.
        assert grant.taken_over
        assert time.monotonic() - killed < ttl + self.skew + 5.0
        assert table.holder(name) == "waiter"
        table.release(name, "waiter")

    # -- waits ---------------------------------------------------------------------------

    def test_a_wait_ends_when_the_holder_releases(self, table):
        """Well before its deadline: released at 0.3 s, a 60 s wait (a server blocks 20 s
        a call) returns within 10 s, not once its budget is slept and one look taken."""
        name = make_key(11)
        assert table.acquire(name, "holder-a", 30).granted
        threading.Timer(0.3, table.release, args=(name, "holder-a")).start()
        start = time.monotonic()
        waited = table.wait(name, 60.0)
        assert time.monotonic() - start < 10.0
        assert waited.wake is Wake.RELEASED
        polls = counters.snapshot()["lease_polls"]
        assert waited.pushed == self.pushes and (polls == 0) == self.pushes

    def test_a_wait_on_a_live_holder_keeps_its_deadline(self, table):
        name = make_key(12)
        assert table.acquire(name, "holder-a", 30).granted
        waited = table.wait(name, 0.3)
        assert waited.wake is Wake.HELD and waited.holder == "holder-a"
        table.release(name, "holder-a")
        assert table.wait(name, 0.3).wake is Wake.RELEASED  # free: at once

    def test_a_wait_on_a_free_lease_ends_when_someone_takes_it(self, table):
        name = make_key(16)
        taker = threading.Timer(0.3, table.acquire, args=(name, "holder-a", 30))
        taker.start()
        calls = []  # a polling backend looks once per call

        def taken():
            calls.append(waited := table.wait(name, CHILD_SECONDS, free=True))
            return waited if waited.wake is Wake.HELD else None

        waited = wait_for(taken, CHILD_SECONDS, "someone to take the lease", interval=0)
        assert waited.holder == "holder-a"
        if self.pushes_free:
            assert waited.pushed and len(calls) == 1
        taker.join()  # the grant can reach the waiter before acquire returns to its caller
        table.release(name, "holder-a")

    # -- holders that die or hang ----------------------------------------------------------

    def _start_holder(self, table, name: str, ttl: float, ready) -> subprocess.Popen | None:
        child = self.child_table_code(table)
        if child is None:
            return None
        open_code, env = child
        code = _HOLDER.format(open_code=textwrap.dedent(open_code))
        proc = subprocess.Popen(
            [sys.executable, "-c", code, name, str(ttl), str(ready)],
            env={**os.environ, **env},
            stderr=subprocess.PIPE,
        )
        wait_for(ready.exists, CHILD_SECONDS, "the holder to take its lease", procs=[proc])
        return proc

    def test_a_killed_holder_ends_a_blocked_wait_and_is_taken_over(self, table, tmp_path):
        """The fast variant (make test-fast) of the killed-holder tests: a wait on a holder
        that is killed ends at once (its lease would live LONG_TTL), as abandoned, and the
        next acquire is a takeover."""
        if not self.sees_death:
            pytest.skip("a dead holder's lease ends with its ttl")
        name = make_key(17)
        proc = self._start_holder(table, name, LONG_TTL, tmp_path / "ready")
        try:
            assert table.holder(name) == "child-holder"
            threading.Timer(0.2, proc.kill).start()  # while the wait below blocks (or before)
            waited = table.wait(name, CHILD_SECONDS)
        finally:
            proc.kill()
            proc.wait(30)
        assert waited.wake is Wake.ABANDONED and waited.pushed
        grant = table.acquire(name, "waiter", 30)
        assert grant.granted and grant.taken_over
        table.release(name, "waiter")

    @pytest.mark.slow
    def test_a_killed_holder_is_noticed_at_once(self, table, tmp_path):
        if not self.sees_death:
            pytest.skip("a dead holder's lease ends with its ttl")
        name = make_key(13)
        proc = self._start_holder(table, name, LONG_TTL, tmp_path / "ready")
        try:
            assert table.wait(name, 0.5).wake is Wake.HELD  # alive: held
            proc.kill()
            proc.wait(30)
            # Its lease ends long before LONG_TTL: the backend saw the holder die.
            waited = table.wait(name, CHILD_SECONDS)
            assert waited.wake is Wake.ABANDONED and waited.pushed
            grant = table.acquire(name, "waiter", 30)
            assert grant.granted and grant.taken_over  # a takeover, not a release
        finally:
            proc.kill()
            proc.wait(30)
        table.release(name, "waiter")

    @pytest.mark.slow
    def test_a_hung_holder_is_outlasted_by_its_ttl(self, table, tmp_path):
        if not self.expires:
            pytest.skip("held for as long as the holder lives")
        name = make_key(14)
        ttl = 2.0
        proc = self._start_holder(table, name, ttl, tmp_path / "ready")
        if proc is None:
            pytest.skip("this table lives in one process")
        try:
            proc.send_signal(signal.SIGSTOP)  # alive, connected, renewing nothing
            waited = table.wait(name, CHILD_SECONDS)
            assert waited.wake is Wake.ABANDONED
            grant = table.acquire(name, "waiter", 30)
            assert grant.granted and grant.taken_over
            proc.send_signal(signal.SIGCONT)  # it wakes up to a lost lease
            assert table.holder(name) == "waiter"
        finally:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait(30)
        table.release(name, "waiter")

    @pytest.mark.slow
    def test_of_the_waiters_of_a_dead_holder_one_takes_over(self, table, tmp_path):
        name = make_key(15)
        ttl = LONG_TTL if self.sees_death else 2.0
        proc = self._start_holder(table, name, ttl, tmp_path / "ready")
        if proc is None:
            pytest.skip("this table lives in one process")
        grants: dict[int, object] = {}
        barrier = threading.Barrier(7)

        def waiter(i: int) -> None:
            def decided():
                grant = table.acquire(name, f"waiter-{i}", 30)
                if grant.granted or (table.holder(name) or "").startswith("waiter"):
                    return grant
                table.wait(name, 1.0)
                return None

            barrier.wait(30)
            grants[i] = wait_for(decided, CHILD_SECONDS, "a waiter to take over", interval=0)

        threads = [threading.Thread(target=waiter, args=(i,)) for i in range(6)]
        try:
            for t in threads:
                t.start()
            barrier.wait(30)
            time.sleep(0.3)  # every waiter is waiting on the holder
            proc.kill()
            proc.wait(30)
            for t in threads:
                t.join(CHILD_SECONDS + 30)
        finally:
            proc.kill()
            proc.wait(30)
        winners = [i for i, g in grants.items() if g.granted]
        assert len(grants) == 6 and len(winners) == 1, grants
        assert grants[winners[0]].taken_over
        assert table.holder(name) == f"waiter-{winners[0]}"
        table.release(name, f"waiter-{winners[0]}")
