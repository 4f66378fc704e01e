"""Imports run one way: cli -> server -> stores -> protocol/entry/key/errors, never back up.

Every module of the package is parsed (imports inside functions included) and each
import of another part of the package must go to a lower layer. A new top-level
module or package must be given its layer here.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "xlacache"

# Part of the package (top-level module or subpackage) -> layer. A part may import
# only parts of a lower layer (and itself).
LAYERS = {
    "_version": 0,
    "_proto": 0,
    "errors": 0,
    "counters": 1.5,  # config (above) tells it where the `strict` setting is read
    "rates": 0,
    "units": 1,
    "entry": 1,
    "protocol": 1,
    "config": 2,
    "lazy_settings": 3,
    "misslog": 0,
    "key": 2,
    "signing": 3,
    "explain": 3,
    "stores": 3,
    "flight": 4,
    "prefetch": 4,
    "aliases": 4,
    "job_recorder": 4,
    "legacy": 4.5,  # on flight, below cache
    "cache": 5,
    "bundle": 5,
    "server": 5,
    "jax_portable": 5,
    "jax_readable": 5,
    "jax_bridge": 6,
    "jax_internals": 0,
    "assemble": 6,
    "variables": 6,
    "api": 7,
    "jax_programs": 7,
    "executables": 8,
    "rewarming": 8,
    "__init__": 9,  # `import xlacache`: the public API
    "lazy": 10,
    "cli": 10,
    "__main__": 11,
}


def _part(path: Path) -> str:
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imported_parts(tree: ast.AST) -> set[str]:
    parts = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names = alias.name.split(".")
                if names[0] == "xlacache":
                    parts.add(names[1] if len(names) > 1 else "__init__")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = node.module.split(".")
            if names[0] != "xlacache":
                continue
            if len(names) > 1:
                parts.add(names[1])
            else:  # from xlacache import entry / __version__
                parts.update(
                    a.name if (PACKAGE / a.name).exists() or (PACKAGE / f"{a.name}.py").exists()
                    else "__init__"
                    for a in node.names
                )  # fmt: skip
    return parts


def _imports() -> dict[Path, set[str]]:
    return {
        path: _imported_parts(ast.parse(path.read_text(), str(path)))
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_every_part_has_a_layer():
    parts = {_part(p) for p in PACKAGE.rglob("*.py")}
    missing = parts - set(LAYERS)
    assert not missing, f"give {sorted(missing)} a layer in tests/test_layers.py"


def test_imports_only_go_down():
    wrong = []
    for path, parts in _imports().items():
        me = _part(path)
        for other in parts - {me}:
            if LAYERS.get(other, 99) >= LAYERS.get(me, -1):
                wrong.append(f"{path.relative_to(PACKAGE.parent)} imports xlacache.{other}")
    assert not wrong, "imports that go up or sideways:\n" + "\n".join(wrong)


def test_the_arrows_of_the_issue():
    """The few edges that matter most, spelled out."""
    edges = {(_part(p), other) for p, parts in _imports().items() for other in parts}
    assert ("stores", "server") not in edges and ("stores", "cli") not in edges
    assert ("server", "cli") not in edges and ("protocol", "stores") not in edges
    assert ("stores", "protocol") in edges and ("server", "protocol") in edges
    assert ("server", "stores") in edges and ("cli", "server") in edges


def test_only_the_index_speaks_sqlite():
    users = [
        str(path.relative_to(PACKAGE.parent))
        for path in PACKAGE.rglob("*.py")
        if {"sqlite3", "sqlite_utils"} & {
            alias.name.split(".")[0]
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for alias in (node.names if isinstance(node, ast.Import) else
                          [ast.alias(node.module or "")])
        }
    ]  # fmt: skip
    assert sorted(users) == ["xlacache/stores/index_db.py", "xlacache/stores/index_schema.py"]


def test_one_tier_split():
    """Only `stores.tiered.tiers` splits a store into its tiers (by isinstance)."""
    splits = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance"
        and "TieredStore" in ast.unparse(node.args[1])
    ]  # fmt: skip
    assert splits == ["xlacache/stores/tiered.py:52"], splits


def test_no_module_past_500_lines():
    """Files that do one job: no module of the package is longer than 500 lines."""
    long = {
        str(path.relative_to(PACKAGE.parent)): n
        for path in PACKAGE.rglob("*.py")
        if "_proto" not in path.parts and (n := len(path.read_text().splitlines())) > 500
    }
    assert not long, f"split these modules: {long}"
