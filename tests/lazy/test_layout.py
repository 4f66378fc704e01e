"""The lazy runtime's layout: imports run one way (no cycles); module size: tests/test_layers.py."""

from __future__ import annotations

import ast
from pathlib import Path

import xlacache.lazy

PKG = Path(xlacache.lazy.__file__).parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(parts) or "__init__"


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The package modules that ``path`` imports, anywhere in the file (functions too)."""
    here = _module_name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    if package == ["__init__"]:
        package = []
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom) or not node.level:
            continue
        if node.level > len(package) + 1:
            continue  # above xlacache.lazy
        base = package[: len(package) - (node.level - 1)]
        target = ".".join([*base, *(node.module.split(".") if node.module else [])])
        for alias in node.names:
            sub = f"{target}.{alias.name}" if target else alias.name
            if sub in modules:
                out.add(sub)
            elif target in modules:
                out.add(target)
            elif not target:
                out.add("__init__")
    out.discard(_module_name(path))
    return out


def _graph() -> dict[str, set[str]]:
    files = sorted(PKG.rglob("*.py"))
    modules = {_module_name(f) for f in files}
    return {_module_name(f): _imports(f, modules) for f in files}


def test_no_import_cycles():
    graph = _graph()
    assert "tensor" in graph and "lowering.registry" in graph and len(graph) > 15
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        if state.get(m) == 2:
            return
        assert state.get(m) != 1, "import cycle: " + " -> ".join([*path, m])
        state[m] = 1
        for dep in sorted(graph[m]):
            visit(dep, [*path, m])
        state[m] = 2

    for m in sorted(graph):
        visit(m, [])


def test_one_way_layers():
    graph = _graph()
    # the tensor class and the lowering tables know nothing of dispatch, recording or barriers
    assert graph["tensor"] <= {"_device", "metrics", "graph", "state", "torch_internals"}, graph[
        "tensor"
    ]
    assert not graph["state"], graph["state"]  # the runtime's state sits below every module
    # so does the table of torch's private APIs (and their adapters)
    assert not graph["torch_internals"], graph["torch_internals"]
    lowering = {m for m in graph if m.startswith("lowering")}
    for m in lowering:
        assert graph[m] <= lowering | {"torch_internals"}, (m, graph[m])
    assert not {"dispatch", "special", "executor"} & graph["record"], graph["record"]
    assert "__init__" not in set().union(*graph.values())
    # compat (torch_xla-shaped names) sits above the public API: nothing below imports it
    runtime = {m: deps for m, deps in graph.items() if not m.startswith("compat")}
    assert not any(d.startswith("compat") for d in set().union(*runtime.values()))
    assert not any("lazy.compat" in f.read_text() for f in PKG.glob("*.py"))
