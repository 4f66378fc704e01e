"""Public API behaviour in-process: settings, re-initialization, figures."""

import pytest

import xlacache
from xlacache import config
from xlacache.errors import ConfigError
from xlacache.units import parse_duration, parse_size


def test_second_call_same_settings_is_fine_other_settings_is_an_error(tmp_path):
    xlacache.initialize_cache(tmp_path / "a")
    xlacache.initialize_cache(tmp_path / "a")
    with pytest.raises(ConfigError, match="already initialized"):
        xlacache.initialize_cache(tmp_path / "b")
    with pytest.raises(ConfigError):
        xlacache.initialize_cache(tmp_path / "a", readonly=True)


def test_path_is_required(monkeypatch):
    for name in ("XLACACHE_DIR", "XLA_PERSISTENT_CACHE_PATH"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError, match="needs a path"):
        xlacache.initialize_cache()


@pytest.mark.fallback  # a bad XLACACHE_READONLY: a warning and a reader
def test_environment_and_arguments(monkeypatch, tmp_path):
    monkeypatch.setenv("XLACACHE_DIR", str(tmp_path / "env"))
    monkeypatch.setenv("XLACACHE_MAX_SIZE", "2GiB")
    monkeypatch.setenv("XLACACHE_MAX_AGE", "7d")
    monkeypatch.setenv("XLA_PERSISTENT_CACHE_READ_ONLY", "1")
    got = config.resolve()
    assert got.path == str(tmp_path / "env") and got.readonly
    assert got.max_size == 2 * 1024**3 and got.max_age == 7 * 86400
    assert config.resolve(tmp_path / "arg", readonly=False).path == str(tmp_path / "arg")
    monkeypatch.setenv("XLACACHE_READONLY", "maybe")  # a bad value: a warning, the safe side
    with pytest.warns(config.SettingWarning, match="XLACACHE_READONLY='maybe' is not a boolean"):
        assert config.resolve().readonly


def test_token_is_never_shown(tmp_path):
    c = config.resolve(tmp_path, remote="grpc://h:1", token="s3cret")
    assert "s3cret" not in c.describe()


@pytest.mark.parametrize(
    "text, expected",
    [("10GB", 10 * 1000**3), ("512MiB", 512 * 1024**2), ("4096B", 4096), ("0", 0), (" 2 gb", 2e9)],
)
def test_sizes(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text, expected", [("7d", 604800), ("12h", 43200), ("90s", 90), ("1.5m", 90), ("0", 0)]
)
def test_durations(text, expected):
    assert parse_duration(text) == expected


@pytest.mark.parametrize("bad", ["ten", "10XB", "-1GB", ""])
def test_bad_sizes_are_config_errors(bad):
    with pytest.raises(ConfigError, match="invalid size"):
        parse_size(bad)


def test_stats_has_stable_fields():
    figures = xlacache.stats()
    for name in ("hits", "misses", "writes", "bytes_read", "bytes_written",
                 "compile_seconds_saved", "errors"):  # fmt: skip
        assert name in figures
    assert figures["errors"] == {}
