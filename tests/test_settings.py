"""Settings declared once (issue 19): everything derived from `config.SETTINGS` and
`server.config.SERVER_SETTINGS` agrees with them, and the environment is read where the
docs say."""

from __future__ import annotations

import ast
import inspect
import json
import os
import re
import subprocess
import sys
import warnings
from dataclasses import fields
from pathlib import Path

import pytest
import typer.main

import xlacache
from tests.cli_helpers import assert_one_line_error, cache_keys, cli_json, make_cache, run
from xlacache import config, variables
from xlacache.cli.main import app
from xlacache.errors import ConfigError
from xlacache.lazy_settings import LAZY_SETTINGS, lazy_setting
from xlacache.server.config import SERVER_SETTINGS, ServerConfig, load_config
from xlacache.units import parse_duration, parse_size

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def _warn_afresh(monkeypatch):
    """Each test sees the warnings its settings give (they are given once per process)."""
    monkeypatch.setattr(config, "_warned", set())


# A valid environment text per kind, and what it parses to.
SAMPLES = {
    "text": ("writer", "writer"),
    "writer|reader": ("Reader", "reader"),
    "host:port": ("10.0.0.1:8476", "10.0.0.1:8476"),
    "number": ("0.25", 0.25),
    "path": ("/some/dir", "/some/dir"),
    "file": ("/etc/k.pem", "/etc/k.pem"),
    "bool": ("yes", True),
    "count": ("7", 7),
    "size": ("3GiB", 3 * 1024**3),
    "duration": ("2m", 120.0),
    "list": ("a.pub, b.pub", ("a.pub", "b.pub")),
}


def test_initialize_cache_takes_exactly_the_settings():
    params = inspect.signature(xlacache.initialize_cache).parameters
    assert list(params) == ["path", "readonly"] + [
        s.name for s in config.SETTINGS if s.name not in ("path", "readonly")
    ]
    doc = xlacache.initialize_cache.__doc__
    for s in config.SETTINGS:
        assert f"    {s.name} (" in doc and s.env[0] in doc, s.name
    with pytest.raises(TypeError, match="unexpected keyword argument 'max_sise'"):
        xlacache.initialize_cache("/tmp/x", max_sise="1GB")


def test_cache_config_has_a_field_per_setting():
    names = [f.name for f in fields(config.CacheConfig)]
    assert names == [s.name for s in config.SETTINGS] + ["role_origin"]


@pytest.mark.parametrize("setting", config.SETTINGS, ids=lambda s: s.name)
def test_every_variable_of_every_setting_is_parsed(setting, tmp_path):
    text, value = SAMPLES[setting.kind.name]
    for variable in setting.env:
        assert config.from_env({variable: text}) == {setting.name: value}
    if setting.env_file:
        path = tmp_path / "value"
        path.write_text(f"{text}\n")
        assert config.from_env({setting.env_file: str(path)}) == {setting.name: value}


@pytest.mark.fallback  # a bad value: a warning and the default
def test_a_bad_value_names_its_variable():
    with pytest.warns(config.SettingWarning, match="XLACACHE_PREFETCH='many' is not a whole"):
        assert config.from_env({"XLACACHE_PREFETCH": "many"}) == {}
    with pytest.warns(config.SettingWarning, match="XLACACHE_MAX_SIZE: invalid size 'lots'"):
        assert config.from_env({"XLACACHE_MAX_SIZE": "lots"}) == {}
    with pytest.raises(ConfigError, match="lease_ttl: invalid duration '-1s'"):
        config.resolve("/tmp/x", lease_ttl="-1s")  # an argument: the caller's error, raised


@pytest.mark.parametrize("setting", config.SETTINGS, ids=lambda s: s.name)
def test_every_setting_is_documented_where_its_row_says(setting):
    text = (REPO / setting.doc).read_text()
    assert setting.env[0] in text or f"{setting.name}=" in text, (setting.name, setting.doc)


def test_serve_options_are_the_server_settings():
    serve = typer.main.get_command(app).commands["serve"]
    options = {p.name: p for p in serve.params}
    assert set(options) == {s.name for s in SERVER_SETTINGS} | {"config", "no_fsync"}
    for s in SERVER_SETTINGS:
        flag = (s.option or f"--{s.name.replace('_', '-')}").split("/")[0]
        assert flag in options[s.name].opts, s.name
    assert [f.name for f in fields(ServerConfig)] == [s.name for s in SERVER_SETTINGS]


@pytest.mark.parametrize("setting", SERVER_SETTINGS, ids=lambda s: s.name)
def test_every_server_setting_reads_its_variable(setting):
    if setting.name == "store":
        return
    text = {"address": "127.0.0.1:7171", "always|background|off": "always", "keys": "",
            "file": "", "text": "DEBUG"}.get(setting.kind.name)  # fmt: skip
    text = text if text is not None else SAMPLES[setting.kind.name][0]
    if text == "":  # files must exist; a value it parses is enough to see it read
        assert setting.env == (f"XLACACHE_SERVE_{setting.name.upper()}",)
        return
    env = {"XLACACHE_SERVE_STORE": "/srv/c", setting.env[0]: text}
    overrides = {"workers": "8", "max_streams": "16", "upload_memory": "8GiB"}
    cli = {k: v for k, v in overrides.items() if k != setting.name}
    try:
        loaded = load_config(cli, env=env)
    except ConfigError as exc:  # a value that is read but refused by a check is read too
        assert setting.name.replace("_", "-") in str(exc) or setting.name in str(exc), exc
        return
    default = getattr(ServerConfig(), setting.name)
    assert getattr(loaded, setting.name) != default, setting.name


# -- who reads the environment ----------------------------------------------------------


def _documented_readers() -> set[str]:
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text.split("## Who reads the environment", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"`(xlacache/[\w/]+\.py)`", section))


@pytest.mark.slow
def test_the_environment_is_read_where_architecture_md_says():
    readers = set()
    for path in (REPO / "xlacache").rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and node.attr in ("environ", "getenv")
                and isinstance(node.value, ast.Name)
                and node.value.id == "os"
            ):
                readers.add(str(path.relative_to(REPO)))
    assert readers == _documented_readers()
    # On each side, settings come from one module.
    assert "xlacache/config.py" in readers and "xlacache/server/config.py" in readers
    assert "xlacache/api.py" not in readers and "xlacache/cli/common.py" not in readers


# -- sizes and durations need a unit (issue 27, 1) ---------------------------------------


@pytest.mark.parametrize(
    "parse, text",
    [
        (parse_size, "10"),
        (parse_size, "4096"),
        (parse_duration, "7"),
        (parse_duration, "1.5"),
    ],  # fmt: skip
)
def test_a_bare_number_is_no_size_or_duration(parse, text):
    with pytest.raises(ConfigError, match=rf"--x: invalid \w+ '{text}': a \w+ needs its unit, "):
        parse(text, "--x")
    assert parse("0") == 0 and parse(" 0 ") == 0  # zero is zero in every unit


def test_the_cli_refuses_bare_numbers_and_shows_the_forms(tmp_path):
    root = tmp_path / "c"
    keys = make_cache(root, ["a", "b", "c"], age_step=60)  # minutes old, not days
    bundle = tmp_path / "b.tar"
    for args in (["prune", root, "--older-than", "7", "--dry-run"],
                 ["prune", root, "--unused-for", "3"], ["prune", root, "--max-size", "10"],
                 ["import", bundle, tmp_path / "d", "--max-entry-size", "100"]):  # fmt: skip
        line = assert_one_line_error(run(*args), 2)
        assert "needs its unit" in line and "as in" in line and " or 0" in line, line
    assert cache_keys(root) == set(keys)
    assert run("prune", root, "--older-than", "7d").exit_code == 0  # with the unit: days
    assert cache_keys(root) == set(keys)
    help_text = run("prune", "--help").stdout
    assert "10GB, 512MiB" in help_text and "90s, 30m, 12h, 7d" in help_text


@pytest.mark.fallback  # a bad value: a warning and the default
def test_settings_with_bare_numbers_are_dropped_with_a_warning(tmp_path):
    with pytest.warns(config.SettingWarning, match="XLACACHE_MAX_AGE: invalid duration '30'"):
        settings = config.from_env({"XLACACHE_MAX_AGE": "30", "XLACACHE_MAX_SIZE": "20GB"})
    assert settings == {"max_size": 20 * 10**9}  # the other setting stands
    with pytest.raises(ConfigError, match="max_size: invalid size '10': a size needs its unit"):
        config.resolve(tmp_path, max_size="10")
    assert config.resolve(tmp_path, max_size=10).max_size == 10  # a Python int: bytes


@pytest.mark.parametrize(
    "source, needle",
    [
        ("cli", "--idle-timeout: invalid duration '20'"),
        ("env", "XLACACHE_SERVE_IDLE_TIMEOUT: invalid duration '20'"),
        ("toml", "idle_timeout ("),
    ],  # fmt: skip
)
def test_server_options_need_a_unit(tmp_path, source, needle):
    cfg = tmp_path / "serve.toml"
    cfg.write_text("idle_timeout = 20\n")
    cli = {"store": "/s", "idle_timeout": "20"} if source == "cli" else {"store": "/s"}
    env = {"XLACACHE_SERVE_IDLE_TIMEOUT": "20"} if source == "env" else {}
    with pytest.raises(ConfigError, match=re.escape(needle)) as caught:
        load_config(cli, config_file=str(cfg) if source == "toml" else None, env=env)
    assert "needs its unit" in str(caught.value)
    cfg.write_text('idle_timeout = 0\nmax_size = "10GB"\n')
    loaded = load_config({}, config_file=str(cfg), env={"XLACACHE_SERVE_STORE": "/s"})
    assert (loaded.idle_timeout, loaded.max_size) == (0, 10**10)


# -- every XLACACHE_* variable is known (issue 27, 5) -------------------------------------


def test_known_variables_come_from_the_tables():
    known = variables.known_variables()
    for row in (*config.SETTINGS, *SERVER_SETTINGS, *LAZY_SETTINGS):
        assert set(row.variables()) <= known, row.name
    assert "XLACACHE_SERVE_CONFIG" in known and "XLACACHE_MAXSIZE" not in known


def test_an_unknown_variable_warns_once_with_the_closest_name(monkeypatch, tmp_path):
    env = {"XLACACHE_MAXSIZE": "1GB", "XLACACHE_PREFECH": "0", "XLACACHE_SERVE_MAXSIZE": "1GB",
           "XLACACHE_ZZZ": "1", "XLACACHE_MAX_SIZE": "1GB", "HOME": "/"}  # fmt: skip
    assert variables.unknown_variables(env) == {
        "XLACACHE_MAXSIZE": "XLACACHE_MAX_SIZE", "XLACACHE_PREFECH": "XLACACHE_PREFETCH",
        "XLACACHE_SERVE_MAXSIZE": "XLACACHE_SERVE_MAX_SIZE", "XLACACHE_ZZZ": None,
    }  # fmt: skip
    monkeypatch.setenv("XLACACHE_PREFECH", "0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        variables.check_environment()
        variables.check_environment()
    assert [str(w.message) for w in caught] == [
        "xlacache: XLACACHE_PREFECH is not a setting (ignored); did you mean XLACACHE_PREFETCH?"
    ]


@pytest.mark.slow
def test_the_cli_and_the_library_warn_about_misspelled_variables(tmp_path):
    env = {**os.environ, "XLACACHE_MAXSIZE": "1GB"}
    make_cache(tmp_path / "c", ["a"])
    cli = subprocess.run([sys.executable, "-m", "xlacache", "stats", str(tmp_path / "c")],
                         capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert cli.returncode == 0 and cli.stderr == (
        "xlacache: warning: XLACACHE_MAXSIZE is not a setting (ignored); did you mean "
        "XLACACHE_MAX_SIZE?\n"
    )
    code = f"import xlacache; xlacache.initialize_cache({str(tmp_path / 'lib')!r})"
    lib = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=60)  # fmt: skip
    assert lib.returncode == 0 and "did you mean XLACACHE_MAX_SIZE?" in lib.stderr


@pytest.mark.fallback  # a bad value: a warning and the default
def test_prefetch_must_be_a_count(tmp_path, monkeypatch):
    monkeypatch.setenv("XLACACHE_PREFETCH", "-3")
    with pytest.warns(config.SettingWarning, match="XLACACHE_PREFETCH='-3' is not a whole"):
        assert config.resolve(tmp_path, rank=(0, "test")).prefetch == 32
    with pytest.raises(ConfigError, match="prefetch=-3"):
        config.resolve(tmp_path, prefetch=-3)


@pytest.fixture
def _bad_prefetch(monkeypatch):
    monkeypatch.setenv("XLACACHE_PREFETCH", "-3")


@pytest.mark.fallback  # a bad value: a warning and the default
@pytest.mark.usefixtures("_bad_prefetch")
def test_would_load_agrees_with_prefetch_on_a_bad_value(tmp_path):
    make_cache(tmp_path / "c", ["a", "b"])
    with pytest.warns(config.SettingWarning):
        doc = cli_json("inspect", tmp_path / "c", "--would-load")
        worker = config.resolve(tmp_path / "c").prefetch
    assert doc["prefetch"] == worker == 32 and len(doc["entries"]) == 2


@pytest.mark.parametrize("word, value", [("false", False), ("off", False), ("No", False),
                                         ("0", False), ("on", True), ("YES", True)])  # fmt: skip
def test_booleans_read_the_same_words_everywhere(word, value):
    from xlacache.stores.durability import fsync_mode

    assert config.parse_bool(word) is value
    assert fsync_mode(word) == ("always" if value else "off")
    assert config.from_env({"XLACACHE_EXPLAIN": word}).get("explain", False) is value
    assert lazy_setting("fallback", {"XLACACHE_LAZY_FALLBACK": word}) is value
    loaded = load_config({"store": "/s"}, env={"XLACACHE_SERVE_DIRECT_IO": word})
    assert loaded.direct_io is value


@pytest.mark.slow  # imports torch
def test_torch_xla_getenv_as_reads_the_same_boolean_words(monkeypatch):
    from xlacache.lazy.compat.utils.utils import getenv_as

    for word, value in (("off", False), ("No", False), ("on", True), ("1", True)):
        monkeypatch.setenv("SOME_FLAG", word)
        assert getenv_as("SOME_FLAG", bool) is value
    monkeypatch.setenv("SOME_FLAG", "perhaps")
    with pytest.raises(ConfigError, match="SOME_FLAG='perhaps' is not a boolean"):
        getenv_as("SOME_FLAG", bool)


@pytest.mark.fallback  # a bad value: a warning and the default
def test_one_bad_value_keeps_the_others(tmp_path):
    env = {"XLACACHE_MAX_SIZE": "lots", "XLACACHE_PREFETCH": "4", "XLACACHE_ROLE": "boss"}
    with pytest.warns(config.SettingWarning) as caught:
        settings = config.from_env(env)
    assert settings == {"prefetch": 4, "role": "reader"}  # a bad role: the side that writes nothing
    assert {str(w.message).split(":")[1].strip() for w in caught} >= {"XLACACHE_MAX_SIZE"}
    assert any("XLACACHE_ROLE='boss'" in str(w.message) for w in caught)


# -- the lazy runtime's settings table (issue 26) ----------------------------------------


@pytest.mark.fallback  # a bad value: a warning and the default
@pytest.mark.parametrize("setting", LAZY_SETTINGS, ids=lambda s: s.name)
def test_every_lazy_setting_reads_its_variable(setting):
    text, value = SAMPLES[setting.kind.name]
    (variable,) = setting.env
    assert lazy_setting(setting.name, {variable: text}) == value
    assert lazy_setting(setting.name, {}) == setting.default
    with pytest.warns(config.SettingWarning, match=f"{variable}"):
        assert lazy_setting(setting.name, {variable: "-1x"}) == setting.default
    assert setting.env[0] in (REPO / setting.doc).read_text(), setting.doc


def test_lazy_read_sites_use_the_table():
    """No lazy module reads a variable of the table itself (one parser, one place)."""
    table = {v for s in LAZY_SETTINGS for v in s.env} | set(config.BY_NAME["path"].env)
    for path in (REPO / "xlacache" / "lazy").rglob("*.py"):
        text = path.read_text()
        for variable in table:
            assert f'environ.get("{variable}"' not in text, (path, variable)
            assert f'timeout_s("{variable}"' not in text, (path, variable)


@pytest.mark.fallback  # a bad value: a warning and the default
@pytest.mark.slow
def test_a_bad_lazy_value_keeps_the_cache_on(tmp_path):
    """One bad value under `import xlacache.lazy` is one warning; the cache stays on."""
    env = {**os.environ, "XLACACHE_DIR": str(tmp_path / "c"), "XLACACHE_MAX_SIZE": "lots",
           "XLACACHE_LAZY_FALLBACK": "perhaps", "XLA_COMPILATION_CACHE_SIZE": "-2"}  # fmt: skip
    code = ("import json, xlacache, xlacache.lazy as xl\n"
            "from xlacache.lazy import dispatch, executor\n"
            "print(json.dumps([xlacache.is_initialized(), dispatch._FALLBACK, "
            "executor.EXECUTABLES.capacity]))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == [True, True, 1024]
    for variable in ("XLACACHE_MAX_SIZE", "XLACACHE_LAZY_FALLBACK", "XLA_COMPILATION_CACHE_SIZE"):
        assert variable in out.stderr
    assert "cache named by the environment is off" not in out.stderr


def test_strict_mode_raises_on_a_bad_value(monkeypatch):
    """A dropped setting is a fallback: strict mode (counters.hidden) raises instead."""
    from xlacache.errors import StrictModeError

    monkeypatch.setenv("XLACACHE_STRICT", "1")
    with pytest.raises(StrictModeError, match="settings"):
        config.from_env({"XLACACHE_MAX_SIZE": "lots"})
    with pytest.raises(StrictModeError, match="lazy settings"):
        lazy_setting("gc_defer", {"XLACACHE_LAZY_GC_DEFER": "perhaps"})
