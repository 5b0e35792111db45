"""The arrows between the rooms (ARCHITECTURE.md, "Layout"), read from the source with ``ast``, never imported.

Forbidden: the SDK (``talos``) importing ``server`` (its local services ``server.devservices`` too),
``connectors`` or ``metering`` at module level (a CLI command may, inside its function); the SDK importing at
module level a third-party package that ``pip install talos-mq`` does not bring (the server's, the connectors' or
metering's: FastAPI, uvicorn, kazoo, ...); ``server.metrics`` importing any other module of the server (modules
push into it; the broker registers its own collector); ``fencing`` importing ``server`` (but its benchmark may start
a local HDFS from ``server.devservices`` inside a function); the partition room (``server.partition``) importing the
HTTP edge, the usage room or the broker; the usage room importing the HTTP edge; connectors and metering importing
the server; ``server.devservices`` importing the rest of the server or, at module level, anything but the standard
library and the SDK (so the CLI's commands can use it without the server extra); and a cycle among the module-level
imports of one package. (``test_house.py`` forbids any circle, across packages and through ``if TYPE_CHECKING`` too.)

Inside the server, edges over one service layer (ARCHITECTURE.md, "Inside server/"): the edges (REST
``server.http``, the Kafka listener ``server.kafka``, the portal ``server.portal``, WebSocket push
``server.push``) never import each other; nothing outside an edge imports it but the app assembly
(``server.app``, and the process entry ``server.__main__``), which only the process entry imports; the layer
below the services (``server.partition``, ``server.coordination``, ``server.cluster``, ``server.broker``,
``server.peers``) imports neither the services (``server.messaging``) nor the coordinators built on them
(groups, subscriptions, trace, connect offsets, internal topics; the trace's recorder, which the broker owns and
produce pushes into, is below); configuration and errors import none of these.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("talos", "server", "fencing", "connectors", "metering", "hashring")
EDGES = ("server.http", "server.kafka", "server.portal", "server.push")
ASSEMBLY = ("server.app", "server.__main__")
SERVICES = ("server.messaging",)
COORDINATORS = (
    "server.groups",
    "server.subscriptions",
    "server.trace",
    "server.connect_offsets",
    "server.internal_topics",
)
# What produce and fetch push into (the broker owns them), as they push into usage metering: below the services.
PUSHED_INTO = ("server.trace.recorder", "server.trace.events")
BELOW_SERVICES = ("server.partition", "server.coordination", "server.cluster", "server.broker", "server.peers")
FOUNDATION = ("server.config", "server.errors")
# What the server, the connectors and metering import and a client-only install (`pip install talos-mq`) lacks.
SERVER_SIDE = (
    "fastapi",
    "starlette",
    "pydantic",
    "uvicorn",
    "httptools",
    "kazoo",
    "hdfs_native",
    "uhashring",
    "pyarrow",
    "opensearchpy",
    "hdfs",
    "yaml",
    "jinja2",
    "prometheus_client",
    "pyspark",
    "pandas",
    "duckdb",
    "pydruid",
)


def client_dependencies() -> set[str]:
    """The module names of pyproject.toml's ``dependencies`` (each distribution here imports as its own name)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {re.split(r"[\[<>=!~ ;]", d, maxsplit=1)[0].replace("-", "_") for d in project["dependencies"]}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (a submodule when ``from package import submodule``)
    module_level: bool  # runs when the module is imported (not inside a function, not under TYPE_CHECKING)
    line: int
    type_only: bool = False  # under a module-level ``if TYPE_CHECKING``: read by type checkers, never run


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

    def walk(node: ast.AST, module_level: bool, type_only: bool = False) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                for alias in child.names:
                    yield Import(name, alias.name, module_level, child.lineno, type_only)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: resolve against this module's package
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*anchor, *([base] if base else [])])
                for alias in child.names:
                    submodule = f"{base}.{alias.name}"
                    target = submodule if _is_module(submodule) else base
                    yield Import(name, target, module_level, child.lineno, type_only)
            elif isinstance(child, ast.If) and _is_type_checking(child):
                yield from walk(child, False, type_only=module_level)
            elif _deferred(child):
                yield from walk(child, False)
            else:
                yield from walk(child, module_level, type_only)

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
        before = len(wrong)
        arrow = f"{i.source} -> {i.target} (line {i.line})"
        if _in(i.source, "talos") and i.module_level and _in(i.target, "server", "connectors", "metering"):
            wrong.append(f"{arrow}: the SDK loads no server, connector or metering code at import")
        if _in(i.source, "talos") and i.module_level and _in(i.target, *SERVER_SIDE):
            wrong.append(f"{arrow}: the SDK loads none of the server's, connectors' or metering's packages at import")
        if _in(i.source, "server.devservices") and _in(i.target, "server") and not _in(i.target, "server.devservices"):
            wrong.append(f"{arrow}: the local services run the server as a process; they import none of it")
        if i.source == "server.metrics" and _in(i.target, "server"):
            wrong.append(f"{arrow}: metrics is a registry others push into; it imports no server module")
        local_hdfs = i.source == "fencing.bench" and not i.module_level and _in(i.target, "server.devservices")
        if _in(i.source, "fencing") and _in(i.target, "server") and not local_hdfs:
            wrong.append(f"{arrow}: storage knows nothing of the server")
        if _in(i.source, "server.partition") and _in(i.target, "server.http", "server.usage", "server.broker"):
            wrong.append(f"{arrow}: the partition path is below the broker, the HTTP edge and usage metering")
        if _in(i.source, "server.usage") and _in(i.target, "server.http"):
            wrong.append(f"{arrow}: usage metering is pushed into; it does not reach for the HTTP edge")
        if _in(i.source, "connectors", "metering") and i.module_level and _in(i.target, "server"):
            wrong.append(f"{arrow}: connectors and metering are clients of the public SDK")
        if len(wrong) == before:  # one complaint per arrow: the layers' rules overlap those above and each other
            why = next(_layer_breaks(i.source, i.target), None)
            if why is not None:
                wrong.append(f"{arrow}: {why}")
    return wrong


def _edge_of(module: str) -> str | None:
    return next((edge for edge in EDGES if _in(module, edge)), None)


def _layer_breaks(source: str, target: str) -> Iterator[str]:
    """What ``source -> target`` breaks of the server's layers (edges over one service layer)."""
    source_edge, target_edge = _edge_of(source), _edge_of(target)
    if source_edge is not None and target_edge is not None and source_edge != target_edge:
        yield f"the edges never import each other ({source_edge} -> {target_edge})"
    elif target_edge is not None and source_edge is None and not _in(source, *ASSEMBLY):
        yield f"nothing outside an edge imports it but the app assembly ({target_edge})"
    if _in(target, "server.app") and source != "server.__main__":
        yield "only the process entry imports the app assembly; no edge reaches back for it"
    if _in(source, *BELOW_SERVICES) and _in(target, *SERVICES, *COORDINATORS) and not _in(target, *PUSHED_INTO):
        yield "partitions and coordination are below the services and the coordinators built on them"
    if _in(source, *FOUNDATION) and _in(target, *EDGES, *ASSEMBLY, *SERVICES, *COORDINATORS, *BELOW_SERVICES):
        yield "configuration and errors import nothing of the layers"


def import_cycles(imports: list[Import]) -> list[list[str]]:
    """Cycles (strongly connected components) of module-level imports between modules of one package."""
    graph: dict[str, set[str]] = {}
    for i in imports:
        if i.module_level and i.source != i.target and i.source.split(".")[0] == i.target.split(".")[0]:
            graph.setdefault(i.source, set()).add(i.target)
            graph.setdefault(i.target, set())
    return strongly_connected(graph)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of ``graph`` (every node a key): its strongly connected components of more than one node."""
    # Tarjan's algorithm, recursive: the project's graph is small (a few hundred modules).
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


def test_the_sdk_imports_at_module_level_only_the_stdlib_and_its_own_dependencies() -> None:
    """Whatever ``talos`` imports when its modules load comes with ``pip install talos-mq``: the standard library,
    the SDK itself, or a package of pyproject.toml's ``dependencies`` (server-side ones are extras)."""
    allowed = client_dependencies()
    assert allowed >= {"click", "orjson", "websockets", "aiohttp", "urllib3", "crc32c", "cramjam"}
    assert not allowed & set(SERVER_SIDE), "a server-side package is a dependency of the client install"
    outside = sorted(
        f"{i.source} -> {i.target} (line {i.line})"
        for i in all_imports()
        if _in(i.source, "talos")
        and i.module_level
        and i.target.split(".")[0] not in {*sys.stdlib_module_names, "__future__", "talos", *allowed}
    )
    assert outside == []


def test_the_local_services_import_only_the_stdlib_and_the_sdk() -> None:
    """``server.devservices`` runs under the CLI of a client-only install too (``talos cluster down``, ``talos
    dev``): at module level it imports the standard library, the SDK and itself."""
    outside = sorted(
        f"{i.source} -> {i.target} (line {i.line})"
        for i in all_imports()
        if _in(i.source, "server.devservices")
        and i.module_level
        and i.target.split(".")[0] not in {*sys.stdlib_module_names, "__future__", "talos"}
        and not _in(i.target, "server.devservices")
    )
    assert outside == []


def test_no_import_cycle_inside_a_package() -> None:
    assert import_cycles(all_imports()) == []


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("talos._producer", "server.broker"),  # the SDK loading the server
        ("talos.cli._servers", "server.devservices"),  # ... or its local services
        ("talos._transport", "fastapi"),  # ... or a server-side package
        ("talos.cli._connect", "yaml"),
        ("talos.cli._topics", "connectors.runner"),
        ("server.devservices._cluster", "server.broker"),  # the local services importing the server
        ("fencing.storage", "server.devservices"),
        ("server.metrics", "server.broker"),  # metrics reaching back for the broker
        ("fencing.log", "server.errors"),
        ("server.partition.loaded", "server.http.reply"),
        ("server.partition.tailcache", "server.broker"),
        ("server.usage.meter", "server.http.app"),
        ("metering.job", "server.topics"),
        # edges over one service layer
        ("server.groups.coordinator", "server.http.messages"),  # a coordinator through the REST edge
        ("server.subscriptions.coordinator", "server.http"),
        ("server.internal_topics", "server.http.messages"),
        ("server.messaging.produce", "server.http.fastpath"),  # the services reaching for an edge
        ("server.kafka.produce", "server.http.messages"),  # one edge through another
        ("server.http.app", "server.kafka.listener"),
        ("server.http.routes.subscriptions", "server.push.session"),
        ("server.portal.pages", "server.http.fastpath"),
        ("server.push.endpoint", "server.portal"),
        ("server.kafka.listener", "server.app"),  # an edge reaching back for the assembly
        ("server.broker", "server.messaging.forwarder"),  # below the services
        ("server.partition.loaded", "server.groups.coordinator"),
        ("server.cluster", "server.trace.keeper"),
        ("server.errors", "server.http.messages"),
    ],
)
def test_a_forbidden_arrow_is_caught(source: str, target: str) -> None:
    added = Import(source, target, True, 1)
    assert forbidden_arrows([*all_imports(), added]) == [forbidden_arrows([added])[0]]


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("server.app", "server.kafka.listener"),  # the assembly puts the edges together
        ("server.app", "server.http.app"),
        ("server.__main__", "server.http.connections"),
        ("server.__main__", "server.app"),
        ("server.http.app", "server.messaging.topics"),  # an edge over the services
        ("server.kafka.produce", "server.messaging.produce"),
        ("server.push.session", "server.subscriptions.link"),
        ("server.portal.pages", "server.web"),  # the edge-neutral HTTP helpers
        ("server.groups.coordinator", "server.messaging.offsets"),  # a coordinator on the services
        ("server.messaging.produce", "server.broker"),
    ],
)
def test_a_legal_arrow_is_not_flagged(source: str, target: str) -> None:
    assert forbidden_arrows([Import(source, target, True, 1)]) == []


def test_a_deferred_sdk_import_of_the_server_is_allowed() -> None:
    """A CLI command may import the server, its local services or a server-side package inside its function: only
    module-level arrows count there; so may the storage benchmark start a local HDFS."""
    assert forbidden_arrows([Import("talos.cli._servers", "server.__main__", False, 1)]) == []
    assert forbidden_arrows([Import("talos.cli._servers", "server.devservices", False, 1)]) == []
    assert forbidden_arrows([Import("talos.cli._connect", "yaml", False, 1)]) == []
    assert forbidden_arrows([Import("fencing.bench", "server.devservices", False, 1)]) == []
    assert forbidden_arrows([Import("fencing.bench", "server.devservices", True, 1)]) != []


def test_a_cycle_is_caught_and_one_across_packages_is_not_a_package_cycle() -> None:
    imports = [*all_imports(), Import("server.errors", "server.broker", True, 1)]
    assert any({"server.errors", "server.broker"} <= set(cycle) for cycle in import_cycles(imports))
    across = [Import("hashring.ring", "metering.job", True, 1), Import("metering.job", "hashring.ring", True, 1)]
    assert import_cycles(across) == []
