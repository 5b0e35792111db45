"""The client-only install and its extras: pyproject.toml, the CLI's list of what each extra brings
(``talos/cli/_extras.py``), what the server, connectors and metering import, and the one-line hint a command
gives when its extra is missing.

``tests/e2e/test_client_install.py`` installs the client into a fresh virtualenv; these check the same promises
without one.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
import tomllib
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest
from click.testing import CliRunner

from talos.cli import main
from talos.cli._extras import EXTRAS
from tests.unit.test_import_direction import all_imports, client_dependencies

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

# distribution -> the top-level modules it brings that the code imports (the same name unless listed here)
MODULES = {
    "hdfs-native": ("hdfs_native",),
    "prometheus-client": ("prometheus_client",),
    "opensearch-py": ("opensearchpy",),
    "pyyaml": ("yaml",),
    "uvicorn": ("uvicorn", "httptools"),  # uvicorn[standard]: the server's HTTP parser
    "fastapi": ("fastapi", "starlette", "pydantic"),
    "hdfs": ("hdfs", "requests"),
    "protobuf": ("google",),
    "jsonschema": ("jsonschema", "jsonschema_specifications", "referencing"),  # and what its validators use
}


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0].lower()


def _extra(extra: str) -> list[str]:
    return [_name(r) for r in PROJECT["optional-dependencies"][extra]]


def _modules(extra: str) -> set[str]:
    return {m for d in _extra(extra) for m in MODULES.get(d, (d.replace("-", "_"),))}


def test_the_client_install_is_what_the_sdk_imports() -> None:
    assert sorted(_name(r) for r in PROJECT["dependencies"]) == sorted(
        ["click", "orjson", "websockets", "aiohttp", "urllib3", "crc32c", "cramjam"]
    )


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_each_extra_brings_what_its_commands_look_for(extra: str) -> None:
    """The CLI's list for an extra names modules of that extra's packages, and a module of each of them."""
    looked_for = set(EXTRAS[extra][1])
    assert looked_for <= _modules(extra)
    for distribution in _extra(extra):
        brings = MODULES.get(distribution, (distribution.replace("-", "_"),))
        assert looked_for & set(brings), f"talos/cli/_extras.py looks for no module of {distribution} ({extra})"


@pytest.mark.parametrize(
    ("rooms", "extra"),
    [
        (("server", "fencing", "hashring"), "server"),
        (("connectors",), "connect"),
        (("metering", "connectors.spark"), "metering"),  # the metering job reads through the PySpark data source
    ],
)
def test_what_each_room_imports_comes_with_its_extra(rooms: tuple[str, ...], extra: str) -> None:
    """Every third-party module that the server (with its storage and ring), the connectors or the metering job
    imports is in the client install or in its extra (the local services, ``server.devservices``, import only the
    standard library and the SDK, and look for the dev extra's search server inside a function)."""
    project = {"talos", "server", "fencing", "hashring", "connectors", "metering", "__future__"}
    provided = client_dependencies() | _modules(extra) | set(sys.stdlib_module_names) | project
    outside = sorted(
        f"{i.source} -> {i.target}"
        for i in all_imports()
        if any(i.source == room or i.source.startswith(f"{room}.") for room in rooms)
        and not (extra == "connect" and i.source.startswith("connectors.spark"))
        and not i.source.startswith("server.devservices")
        and i.target.split(".")[0] not in provided
    )
    assert outside == []
    if extra == "metering":  # the job imports connectors.spark, and so the connectors package (its YAML config)
        assert {"yaml", "pydantic"} <= _modules("metering")


def test_dev_brings_every_extra_and_the_installs_bring_what_they_promise() -> None:
    assert "talos-mq[server,connect,metering]" in PROJECT["optional-dependencies"]["dev"]
    install = (ROOT / "scripts" / "install").read_text()
    assert 'extra="[server,connect]"' in install  # scripts/demo runs talos standalone
    assert '(( dev )) && extra="[dev]"' in install
    dockerfile = (ROOT / "Dockerfile").read_text()
    pip = re.search(r"pip install .*\"(\.\[[^\]]+\])\"", dockerfile)
    assert pip is not None
    assert pip.group(1) == ".[server,connect,metering]"  # one image for every role


def _without(monkeypatch: pytest.MonkeyPatch, *absent: str) -> None:
    """This interpreter, as one that lacks the modules ABSENT (``find_spec`` says None for them)."""
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name.partition(".")[0] in absent else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.parametrize(
    ("argv", "absent", "line"),
    [
        (
            "standalone --port 1",
            ("fastapi", "kazoo"),
            "talos standalone needs the server: pip install 'talos-mq[server]' (missing: fastapi, kazoo)",
        ),
        (
            "server --zk 127.0.0.1:1",
            ("uvicorn",),
            "talos server needs the server: pip install 'talos-mq[server]' (missing: uvicorn)",
        ),
        (
            "cluster up",
            ("jinja2",),
            "talos cluster up needs the server: pip install 'talos-mq[server]' (missing: jinja2)",
        ),
        (
            "connect validate x.yaml",
            ("yaml", "opensearchpy"),
            "talos connect validate needs the connectors: pip install 'talos-mq[connect]' "
            "(missing: opensearchpy, yaml)",
        ),
        (
            "metering run",
            ("pyspark",),
            "talos metering run needs the metering extra: pip install 'talos-mq[metering]' (missing: pyspark)",
        ),
        (
            "metering query traffic",
            ("duckdb", "pyspark"),
            "talos metering query needs the metering extra: pip install 'talos-mq[metering]' (missing: duckdb)",
        ),
    ],
)
def test_a_command_without_its_extra_says_in_one_line_how_to_get_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: str, absent: tuple[str, ...], line: str
) -> None:
    _without(monkeypatch, *absent)
    monkeypatch.chdir(tmp_path)  # cluster up would leave its directory here, were the check not first
    result = CliRunner().invoke(main, shlex.split(argv))
    assert result.exit_code == 1
    assert result.output.splitlines() == [f"Error: {line}"]
    assert not (tmp_path / "talos-cluster").exists()


def test_the_commands_that_need_no_extra_run_without_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Stopping a local cluster needs only the local services (standard library): no hint, whatever is missing."""
    _without(monkeypatch, *(m for _, modules in EXTRAS.values() for m in modules))
    result = CliRunner().invoke(main, ["cluster", "down", "--dir", str(tmp_path / "none")])
    assert result.exit_code == 0, result.output
    assert "no cluster running" in result.output
