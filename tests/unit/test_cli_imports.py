"""``import talos`` and ``import talos.cli`` load no server, connector or metering code, nor their packages.

The CLI imports those inside the commands that need them (``talos standalone`` hands over to ``python -m server``,
``talos connect`` and ``talos metering`` import their packages when they run), so an SDK user and ``talos --help``
never pay for them. A fresh interpreter, because this test process has imported them all already.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.unit.test_import_direction import SERVER_SIDE

FORBIDDEN = ("server", "connectors", "metering", *SERVER_SIDE)  # and their packages, which the client install lacks

PROBE = """
import json, sys
import talos
after_sdk = sorted(sys.modules)
import talos.cli
print(json.dumps({"sdk": after_sdk, "cli": sorted(sys.modules), "main": callable(talos.cli.main)}))
"""


def _loaded() -> tuple[list[str], list[str]]:
    """The module names loaded after ``import talos``, then after ``import talos.cli`` too."""
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=60, check=True)
    answer = json.loads(done.stdout)
    assert answer["main"] is True
    return list(answer["sdk"]), list(answer["cli"])


def _forbidden(modules: list[str]) -> list[str]:
    return [name for name in modules if name.split(".")[0] in FORBIDDEN]


def test_sdk_and_cli_load_no_server_connector_or_metering_module() -> None:
    after_sdk, after_cli = _loaded()
    assert "talos.cli" in after_cli
    assert _forbidden(after_sdk) == []
    assert _forbidden(after_cli) == []
