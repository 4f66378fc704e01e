"""Roles: who writes. Explicit settings first (arguments, then the environment); else
rank 0 writes and the other ranks read; with no rank at all, a single process writes."""

from __future__ import annotations

import pytest

from xlacache import config
from xlacache.errors import ConfigError

ROLE_VARIABLES = (
    "XLACACHE_ROLE", "XLACACHE_READONLY", "XLA_PERSISTENT_CACHE_READ_ONLY",
    "XLACACHE_WRITER_GRACE", *config.RANK_VARIABLES,
)  # fmt: skip


@pytest.fixture(autouse=True)
def no_role_settings(monkeypatch):
    for name in ROLE_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def resolve(tmp_path, **kw) -> config.CacheConfig:
    return config.resolve(tmp_path, **kw)


def test_a_process_without_rank_writes(tmp_path):
    c = resolve(tmp_path)
    assert (c.role, c.readonly, c.writer_grace) == ("writer", False, 0.0)
    assert "single process" in c.role_origin


@pytest.mark.parametrize("variable", config.RANK_VARIABLES)
def test_rank_zero_writes_and_the_other_ranks_read(tmp_path, monkeypatch, variable):
    monkeypatch.setenv(variable, "0")
    assert resolve(tmp_path).role == "writer"
    monkeypatch.setenv(variable, "3")
    c = resolve(tmp_path)
    assert (c.role, c.readonly) == ("reader", True)
    assert c.role_origin == f"rank 3 ({variable})"
    assert c.writer_grace == config.DEFAULT_WRITER_GRACE  # its writer compiles the same


def test_a_running_jax_job_gives_the_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    c = resolve(tmp_path, rank=(1, "jax.process_index()"))
    assert c.role == "reader" and c.role_origin == "rank 1 (jax.process_index())"


def test_explicit_settings_win_over_the_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "5")
    assert resolve(tmp_path, role="writer").role == "writer"
    assert resolve(tmp_path, readonly=False).role == "writer"
    monkeypatch.setenv("RANK", "0")
    reader = resolve(tmp_path, role="reader")
    assert reader.readonly and reader.writer_grace == config.DEFAULT_WRITER_GRACE
    readonly = resolve(tmp_path, readonly=True)
    assert readonly.role == "reader" and readonly.writer_grace == 0.0  # no writer expected
    monkeypatch.setenv("XLACACHE_ROLE", "reader")
    assert resolve(tmp_path).role == "reader"
    monkeypatch.setenv("XLACACHE_ROLE", "Writer")
    assert resolve(tmp_path).role == "writer"


def test_arguments_decide_over_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("XLACACHE_ROLE", "reader")
    monkeypatch.setenv("XLACACHE_READONLY", "1")
    assert resolve(tmp_path, readonly=False).role == "writer"
    assert resolve(tmp_path, role="writer").role == "writer"
    monkeypatch.delenv("XLACACHE_ROLE")
    assert resolve(tmp_path).role == "reader"  # XLACACHE_READONLY alone


@pytest.mark.parametrize(
    "arguments, environment",
    [
        ({"role": "writer", "readonly": True}, {}),
        ({"role": "reader", "readonly": False}, {}),
        ({}, {"XLACACHE_ROLE": "writer", "XLACACHE_READONLY": "1"}),
        ({"role": "boss"}, {}),
        ({}, {"RANK": "first"}),
        ({}, {"RANK": "-1"}),
    ],
)
def test_contradictions_and_nonsense_are_config_errors(
    tmp_path, monkeypatch, arguments, environment
):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError):
        resolve(tmp_path, **arguments)


def test_single_flight_settings(tmp_path, monkeypatch):
    c = resolve(tmp_path)
    assert c.single_flight and (c.lease_ttl, c.max_wait) == (30.0, 1800.0)
    monkeypatch.setenv("XLACACHE_SINGLE_FLIGHT", "0")
    monkeypatch.setenv("XLACACHE_LEASE_TTL", "1m")
    monkeypatch.setenv("XLACACHE_MAX_WAIT", "2h")
    monkeypatch.setenv("XLACACHE_WRITER_GRACE", "5s")
    c = resolve(tmp_path)
    assert not c.single_flight and (c.lease_ttl, c.max_wait, c.writer_grace) == (60, 7200, 5)
    assert resolve(tmp_path, readonly=True).writer_grace == 5  # explicit: for every reader
    with pytest.raises(ConfigError):
        resolve(tmp_path, max_wait=-1)
