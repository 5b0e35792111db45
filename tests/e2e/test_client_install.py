"""``pip install talos-mq`` with no extra, into a fresh virtualenv: the client SDK and nothing of the server.

The virtualenv is made once per test session from a copy of the files the package is built from (what the
Dockerfile copies), so the build leaves nothing in the work tree. pip reaches the package index through its usual
configuration. Its programs run with no ``PYTHONPATH`` and outside the repository, so they see only what was
installed. The server they talk to runs from the environment running the tests.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from server.devservices import StandaloneServer
from tests.helpers import REPO, running_standalone

pytestmark = pytest.mark.slow

# What the server, connectors and metering bring, and a client install must not.
SERVER_SIDE = (
    "fastapi",
    "uvicorn",
    "kazoo",
    "hdfs_native",
    "uhashring",
    "pyarrow",
    "opensearchpy",
    "hdfs",
    "jinja2",
    "prometheus_client",
)
README = (REPO / "README.md").read_text()


@dataclass(frozen=True)
class ClientVenv:
    root: Path

    @property
    def python(self) -> str:
        return str(self.root / "bin" / "python")

    @property
    def talos(self) -> str:
        return str(self.root / "bin" / "talos")

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment without the repository on the path, with the virtualenv's bin first."""
        env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
        return {**env, "PATH": f"{self.root / 'bin'}:{env.get('PATH', '')}", **extra}

    def run(self, argv: list[str], cwd: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, cwd=cwd, env=self.env(**env), capture_output=True, text=True, timeout=timeout, check=False
        )


def _source_copy(target: Path) -> Path:
    """The files a build reads: pyproject.toml, setup.py, README.md and the packages (no compiled modules)."""
    target.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, target / name)
    setuptools = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package in setuptools["packages"]["find"]["include"]:
        shutil.copytree(
            REPO / package.rstrip("*"),
            target / package.rstrip("*"),
            ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info"),
        )
    return target


@pytest.fixture(scope="session")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> ClientVenv:
    """A fresh virtualenv with ``pip install <this checkout>`` and no extra (once per test session)."""
    base = tmp_path_factory.mktemp("client-install")
    source = _source_copy(base / "source")
    venv = ClientVenv(base / "venv")
    subprocess.run([sys.executable, "-m", "venv", str(venv.root)], check=True, timeout=120)
    installed = venv.run(
        [venv.python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", str(source)],
        cwd=base,
        timeout=900,
    )
    assert installed.returncode == 0, installed.stdout[-4000:] + installed.stderr[-4000:]
    return venv


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneServer]:
    with running_standalone(tmp_path_factory.mktemp("client-server") / "data") as running:
        yield running


PROBE = """
import importlib.util, json, sys
import talos, talos.cli
print(json.dumps({
    "talos": talos.__file__,
    "found": [name for name in sys.argv[1:] if importlib.util.find_spec(name) is not None],
    "loaded": sorted({name.split(".")[0] for name in sys.modules}),
}))
"""


def test_the_client_install_has_the_sdk_and_none_of_the_server(client_venv: ClientVenv, tmp_path: Path) -> None:
    done = client_venv.run([client_venv.python, "-c", PROBE, *SERVER_SIDE], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout)
    assert Path(probe["talos"]).is_relative_to(client_venv.root), probe["talos"]  # the installed one, not the tree
    assert probe["found"] == []
    assert not {"server", "connectors", "metering"} & set(probe["loaded"])
    listed = client_venv.run([client_venv.python, "-m", "pip", "list", "--format=json"], cwd=tmp_path)
    names = {package["name"].lower() for package in json.loads(listed.stdout)}
    assert {"talos-mq", "click", "orjson", "websockets", "aiohttp", "urllib3", "crc32c", "cramjam"} <= names
    assert not names & {"fastapi", "uvicorn", "kazoo", "hdfs-native", "pyarrow", "opensearch-py", "jinja2"}


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        ("standalone", "talos standalone needs the server: pip install 'talos-mq[server]'"),
        ("server --zk 127.0.0.1:1", "talos server needs the server: pip install 'talos-mq[server]'"),
        ("cluster up", "talos cluster up needs the server: pip install 'talos-mq[server]'"),
        ("connect validate x.yaml", "talos connect validate needs the connectors: pip install 'talos-mq[connect]'"),
        ("metering query traffic", "talos metering query needs the metering extra: pip install 'talos-mq[metering]'"),
    ],
)
def test_a_server_command_says_in_one_line_which_extra_it_needs(
    client_venv: ClientVenv, tmp_path: Path, argv: str, line: str
) -> None:
    done = client_venv.run([client_venv.talos, *argv.split()], cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"Error: {line} (missing: "), lines[0]
    assert list(tmp_path.iterdir()) == []  # nothing started, nothing written


def _client_examples() -> list[tuple[str, str]]:
    """The README's examples in order that need only the client: Python that imports nothing but ``talos`` and
    the standard library, and the ``talos`` commands that talk to a server (not curl, kcat or connectors)."""
    chosen = []
    for kind, code in re.findall(r"```(bash|python)\n(.*?)```", README, re.S):
        imports = [line.split()[1] for line in code.splitlines() if line.startswith(("import ", "from "))]
        commands = [line for line in code.splitlines() if line.strip()]
        sdk_only = all(name == "talos" or name in sys.stdlib_module_names for name in imports)
        cli_only = all(".venv/bin/talos " in line and " connect " not in line for line in commands)
        if (kind == "python" and sdk_only) or (kind == "bash" and cli_only):
            chosen.append((kind, code))
    return chosen


def test_the_readme_sdk_and_cli_examples_run_from_the_client_install(
    client_venv: ClientVenv, server: StandaloneServer, tmp_path: Path
) -> None:
    examples = _client_examples()
    assert any('Producer("http://127.0.0.1:8080", idempotent=True)' in code for _, code in examples)  # the SDK's
    assert any(".venv/bin/talos consume" in code for _, code in examples)
    (tmp_path / ".venv").symlink_to(client_venv.root)  # the examples call .venv/bin/talos
    for kind, example in examples:
        code = example.replace("http://127.0.0.1:8080", server.url)
        argv = ["bash", "-euo", "pipefail", "-c", code] if kind == "bash" else [client_venv.python, "-c", code]
        result = client_venv.run(argv, cwd=tmp_path, TALOS_URL=server.url)
        assert result.returncode == 0, f"{kind} example failed:\n{code}\n{result.stdout}\n{result.stderr}"
        if '"payments"' in code:
            assert "stored at partition" in result.stdout
            assert "b'42.00 EUR'" in result.stdout
