"""The daemon's bounds, unit by unit: byte budget holders, slots, rate limits, the watchdog
and the idle monitor."""

from __future__ import annotations

import threading

from xlacache.rates import Rate, RateLimiter
from xlacache.server.limits import ByteBudget, IdleMonitor, Slots, Watchdog


def test_a_holder_gives_back_everything_it_took():
    seen = []
    budget = ByteBudget(100, on_change=seen.append)
    with budget.holder() as held:
        assert held.take(60, timeout=0) and held.take(30, timeout=0)
        assert not held.take(20, timeout=0)  # 110 > 100: no room, and no wait
        assert budget.used == 90 == held.held
    assert budget.used == 0 and seen[-1] == 0


def test_a_waiting_holder_gets_room_when_another_finishes():
    budget = ByteBudget(100)
    first = budget.holder()
    held = first.__enter__()
    assert held.take(80, timeout=0)
    got = []
    waiter = threading.Thread(target=lambda: got.append(budget.acquire(50, 60)))
    waiter.start()
    first.__exit__(None, None, None)
    waiter.join(60)
    assert got == [True] and budget.used == 50


def test_slots_refuse_beyond_capacity():
    slots = Slots(2)
    assert slots.try_acquire() and slots.try_acquire() and not slots.try_acquire()
    slots.release()
    assert slots.try_acquire() and slots.used == 2


def test_rate_limiter_allows_a_burst_per_caller_then_refuses():
    limiter = RateLimiter(Rate(per_second=0.001, burst=3))
    assert [limiter.allow("a") for _ in range(5)] == [True, True, True, False, False]
    assert limiter.allow("b")  # callers are limited apart


def test_rate_limiter_reserves_tokens_in_order_for_waiting_callers():
    """`reserve` (the lease polls' pacing): each caller's next token comes one spacing
    after the one before, so waits share the rate; `allow` refuses while they are owed."""
    limiter = RateLimiter(Rate(per_second=0.001, burst=1))  # a token every 1000 s
    first, second, third = (limiter.reserve() for _ in range(3))
    assert first == 0.0
    assert 990 < second <= 1000 and 1990 < third <= 2000
    assert not limiter.allow()
    assert limiter.reserve("other") == 0.0
    never = RateLimiter(Rate(per_second=0, burst=1))  # a burst, then nothing
    assert never.allow() and not never.allow() and never.reserve() > 1e9


def test_watchdog_forgets_cancelled_deadlines_long_before_they_come():
    dog = Watchdog()
    try:
        for _ in range(10_000):
            dog.cancel(dog.schedule(600.0, lambda: None))
        assert len(dog._heap) <= 200
        fired = threading.Event()
        dog.schedule(0.0, fired.set)
        assert fired.wait(60)
    finally:
        dog.stop()


def test_idle_monitor_cancels_only_calls_that_stop_moving():
    cut = []
    monitor = IdleMonitor(30.0, on_idle=lambda: cut.append("counted"))
    try:
        idle = monitor.watch(lambda: cut.append("idle"))
        moving = monitor.watch(lambda: cut.append("moving"))
        idle.last -= 31.0  # its last message was 31 s ago
        moving.last -= 31.0
        moving.touch()  # ...and this one just moved again
        assert monitor.sweep() == 1
        assert cut == ["counted", "idle"]
        assert monitor.sweep() == 0  # cancelled once
        monitor.unwatch(moving)
        assert not monitor._watched
    finally:
        monitor.stop()
