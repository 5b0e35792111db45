"""The arrows between the rooms (ARCHITECTURE.md, "Layout"), read from the source with ``ast``, never imported.

Forbidden: the SDK (``talos``) importing ``server``, ``connectors`` or ``metering`` at module level (a CLI
command may, inside its function); ``server.metrics`` importing any other module of the server (modules push
into it; the broker registers its own collector); ``fencing`` importing ``server``; the partition room
(``server.partition``) importing the HTTP edge, the usage room or the broker; the usage room importing the
HTTP edge; connectors and metering importing the server; and a cycle among the module-level imports of one
package.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("talos", "server", "fencing", "connectors", "metering", "hashring")


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (a submodule when ``from package import submodule``)
    module_level: bool  # runs when the module is imported (not inside a function, not under TYPE_CHECKING)
    line: int


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))  # (.pyi: a compiled module's stub, e.g. talos/_speedups.pyi)
    return path.with_suffix(".py").is_file() or path.with_suffix(".pyi").is_file() or (path / "__init__.py").is_file()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _deferred(node: ast.AST) -> bool:
    """Whether imports under ``node`` wait for a call (a function body) or never run (``if TYPE_CHECKING``)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        return True
    return isinstance(node, ast.If) and _is_type_checking(node)


def _imports_of(path: Path) -> Iterator[Import]:
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def walk(node: ast.AST, module_level: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Import(name, alias.name, module_level, child.lineno)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: resolve against this module's package
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in child.names:
                    submodule = f"{base}.{alias.name}"
                    target = submodule if _is_module(submodule) else base
                    yield Import(name, target, module_level, child.lineno)
            elif _deferred(child):
                yield from walk(child, False)
            else:
                yield from walk(child, module_level)

    yield from walk(ast.parse(path.read_text(), str(path)), True)


@functools.cache
def _parsed() -> tuple[Import, ...]:
    found: list[Import] = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found.extend(_imports_of(path))
    return tuple(found)


def all_imports() -> list[Import]:
    """Every import in the packages (the source is read once per test session)."""
    return list(_parsed())


def _in(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def forbidden_arrows(imports: list[Import]) -> list[str]:
    """Every import that breaks a rule of the module doc, as ``source -> target (line n): why``."""
    wrong: list[str] = []
    for i in imports:
        arrow = f"{i.source} -> {i.target} (line {i.line})"
        if _in(i.source, "talos") and i.module_level and _in(i.target, "server", "connectors", "metering"):
            wrong.append(f"{arrow}: the SDK loads no server, connector or metering code at import")
        if i.source == "server.metrics" and _in(i.target, "server"):
            wrong.append(f"{arrow}: metrics is a registry others push into; it imports no server module")
        if _in(i.source, "fencing") and _in(i.target, "server"):
            wrong.append(f"{arrow}: storage knows nothing of the server")
        if _in(i.source, "server.partition") and _in(i.target, "server.http", "server.usage", "server.broker"):
            wrong.append(f"{arrow}: the partition path is below the broker, the HTTP edge and usage metering")
        if _in(i.source, "server.usage") and _in(i.target, "server.http"):
            wrong.append(f"{arrow}: usage metering is pushed into; it does not reach for the HTTP edge")
        if _in(i.source, "connectors", "metering") and i.module_level and _in(i.target, "server"):
            wrong.append(f"{arrow}: connectors and metering are clients of the public SDK")
    return wrong


def import_cycles(imports: list[Import]) -> list[list[str]]:
    """Cycles (strongly connected components) of module-level imports between modules of one package."""
    graph: dict[str, set[str]] = {}
    for i in imports:
        if i.module_level and i.source != i.target and i.source.split(".")[0] == i.target.split(".")[0]:
            graph.setdefault(i.source, set()).add(i.target)
            graph.setdefault(i.target, set())
    # Tarjan's algorithm, recursive: a package's graph is small.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for after in sorted(graph[node]):
            if after not in index:
                visit(after)
                low[node] = min(low[node], low[after])
            elif after in on_stack:
                low[node] = min(low[node], index[after])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


@pytest.mark.slow
def test_the_walk_sees_imports() -> None:
    imports = all_imports()
    # A guard against a walk that silently finds nothing: arrows known to exist are seen, at the right level.
    assert Import("server.broker", "server.metrics", True, 20) in {
        Import(i.source, i.target, i.module_level, 20) for i in imports
    }
    assert Import("fencing.storage", "fencing.hdfs", False, 20) in {
        Import(i.source, i.target, i.module_level, 20) for i in imports
    }


def test_no_forbidden_arrow() -> None:
    assert forbidden_arrows(all_imports()) == []


def test_no_import_cycle_inside_a_package() -> None:
    assert import_cycles(all_imports()) == []


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("talos._producer", "server.broker"),  # the SDK loading the server
        ("talos.cli._topics", "connectors.runner"),
        ("server.metrics", "server.broker"),  # metrics reaching back for the broker
        ("fencing.log", "server.errors"),
        ("server.partition.loaded", "server.http.reply"),
        ("server.partition.tailcache", "server.broker"),
        ("server.usage.meter", "server.http.app"),
        ("metering.job", "server.topics"),
    ],
)
def test_a_forbidden_arrow_is_caught(source: str, target: str) -> None:
    added = Import(source, target, True, 1)
    assert forbidden_arrows([*all_imports(), added]) == [forbidden_arrows([added])[0]]


def test_a_deferred_sdk_import_of_the_server_is_allowed() -> None:
    """A CLI command may import the server inside its function: only module-level arrows count there."""
    assert forbidden_arrows([Import("talos.cli._servers", "server.__main__", False, 1)]) == []


def test_a_cycle_is_caught_and_one_across_packages_is_not_a_package_cycle() -> None:
    imports = [*all_imports(), Import("server.errors", "server.broker", True, 1)]
    assert any({"server.errors", "server.broker"} <= set(cycle) for cycle in import_cycles(imports))
    across = [Import("hashring.ring", "metering.job", True, 1), Import("metering.job", "hashring.ring", True, 1)]
    assert import_cycles(across) == []
