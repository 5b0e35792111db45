"""The README's examples (```bash and ```python blocks) run as written against a real standalone server."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.devservices import free_port
from tests.e2e.conftest import StandaloneServer

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
EXAMPLES = re.findall(r"```(bash|python)\n(.*?)```", README, re.S)


@pytest.fixture(scope="module")
def readme_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[StandaloneServer, int]]:
    """The server, and its Kafka listener's port (the examples' 9092)."""
    kafka_port = free_port()
    server = StandaloneServer(tmp_path_factory.mktemp("readme") / "data", env={"TALOS_KAFKA_PORT": str(kafka_port)})
    try:
        yield server.start(), kafka_port
    finally:
        server.stop()


def test_readme_has_examples_of_each_kind() -> None:
    assert {kind for kind, _ in EXAMPLES} == {"bash", "python"}


def test_readme_quickstart_has_exactly_two_commands() -> None:
    section = re.search(r"^## Quickstart$(.*?)^## ", README, re.S | re.M)
    assert section is not None
    commands = [
        line
        for block in re.findall(r"```sh\n(.*?)```", section.group(1), re.S)
        for line in block.splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert commands == ["./scripts/demo", "./scripts/test"]
    assert "./scripts/test" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.slow
def test_readme_examples_run_in_order(readme_server: tuple[StandaloneServer, int], tmp_path: Path) -> None:
    server, kafka_port = readme_server
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    (tmp_path / ".venv").symlink_to(Path(sys.executable).parent.parent)  # the examples call .venv/bin/talos
    env["TALOS_URL"] = server.url
    for kind, example in EXAMPLES:
        code = example.replace("http://127.0.0.1:8080", server.url).replace("127.0.0.1:9092", f"127.0.0.1:{kafka_port}")
        argv = ["bash", "-euo", "pipefail", "-c", code] if kind == "bash" else [sys.executable, "-c", code]
        result = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, f"{kind} example failed:\n{code}\n{result.stdout}\n{result.stderr}"
        if kind == "python" and '"payments"' in code:
            assert "stored at partition" in result.stdout
            assert "b'42.00 EUR'" in result.stdout
        elif kind == "python" and 'group="billing"' in code:
            rows = ast.literal_eval(result.stdout.strip().splitlines()[-1])
            assert sum(row["high_watermark"] for row in rows) == 8  # all eight invoices were produced...
            assert all(row["lag"] in (0, None) for row in rows)  # ...and all committed
            assert sum(row["committed"] or 0 for row in rows) == 8
