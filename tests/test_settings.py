"""Settings declared once (issue 19): everything derived from `config.SETTINGS` and
`server.config.SERVER_SETTINGS` agrees with them, and the environment is read where the
docs say."""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import fields
from pathlib import Path

import pytest
import typer.main

import xlacache
from xlacache import config
from xlacache.cli.main import app
from xlacache.errors import ConfigError
from xlacache.server.config import SERVER_SETTINGS, ServerConfig, load_config

REPO = Path(__file__).resolve().parents[1]

# A valid environment text per kind, and what it parses to.
SAMPLES = {
    "text": ("writer", "writer"),
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


def test_a_bad_value_names_its_variable():
    with pytest.raises(ConfigError, match="XLACACHE_PREFETCH='many' is not a whole number"):
        config.from_env({"XLACACHE_PREFETCH": "many"})
    with pytest.raises(ConfigError, match="lease_ttl must be a duration of 0 or more|invalid"):
        config.resolve("/tmp/x", lease_ttl="-1s")


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
