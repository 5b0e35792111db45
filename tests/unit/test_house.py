"""The house check (issue 36): no import circle anywhere in the project, and no SDK module over 700 lines.

A circle is counted over every import a module makes outside its functions, ``if TYPE_CHECKING`` ones
included (two modules that only type checkers see import each other still cannot be read, or moved, one
without the other), between any modules of the project's packages, across packages as within one. The
imports are those ``test_import_direction`` reads from the source with ``ast``, never importing it.

The size limit holds for the SDK's Python files (``talos/``, modules and stubs): a client is split by role
(as aiokafka splits its producer into accumulator and sender, its consumer into fetcher and group
coordinator), not grown past what one can read through.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit import test_import_direction as direction
from tests.unit.test_import_direction import PACKAGES, ROOT, Import, all_imports, strongly_connected

MAX_LINES = 700


def import_circles(imports: list[Import]) -> list[list[str]]:
    """Every circle (strongly connected component) of the imports between project modules that run when a
    module is imported or are read by type checkers (all but those inside functions)."""
    graph: dict[str, set[str]] = {}
    for i in imports:
        if (i.module_level or i.type_only) and i.source != i.target and i.target.split(".")[0] in PACKAGES:
            graph.setdefault(i.source, set()).add(i.target)
            graph.setdefault(i.target, set())
    return strongly_connected(graph)


def files_over(root: Path, limit: int) -> list[str]:
    """The Python files under ``root`` longer than ``limit`` lines, as ``path: n lines``."""
    paths = sorted([*root.rglob("*.py"), *root.rglob("*.pyi")])
    lengths = {path: len(path.read_text().splitlines()) for path in paths}
    return [f"{path.relative_to(root.parent)}: {n} lines" for path, n in lengths.items() if n > limit]


def test_no_import_circle_in_the_project() -> None:
    assert import_circles(all_imports()) == []


def test_no_sdk_file_over_700_lines() -> None:
    assert files_over(ROOT / "talos", MAX_LINES) == []


@pytest.mark.parametrize(
    "closing",
    [
        Import("talos._futures", "talos._accumulator", False, 1, type_only=True),  # the circle issue 36 broke
        Import("talos._futures", "talos._accumulator", True, 1),
        Import("talos._codec", "talos", True, 1),  # a module reaching back for its package's re-exports
    ],
)
def test_a_circle_is_caught_even_one_only_type_checkers_follow(closing: Import) -> None:
    circles = import_circles([*all_imports(), closing])
    assert any({closing.source, closing.target} <= set(circle) for circle in circles)


def test_a_circle_across_packages_is_caught_and_an_import_inside_a_function_closes_none() -> None:
    across = [Import("hashring.ring", "metering.job", True, 1), Import("metering.job", "hashring.ring", True, 1)]
    assert import_circles(across) == [["hashring.ring", "metering.job"]]
    assert import_circles([*all_imports(), Import("talos._futures", "talos._accumulator", False, 1)]) == []


def test_the_walk_reads_type_checking_imports_as_type_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shape of the old circle, in a package of its own: ``acc`` takes a type from ``fut`` under
    ``if TYPE_CHECKING``, ``fut`` takes a class from ``acc``."""
    package = tmp_path / "talos"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "acc.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from talos.fut import Outcome\n\n"
        "def later() -> None:\n    from talos import fut\n"
    )
    (package / "fut.py").write_text("from talos.acc import Metadata\n")
    monkeypatch.setattr(direction, "ROOT", tmp_path)
    found = [i for path in sorted(package.glob("*.py")) for i in direction._imports_of(path)]
    assert {(i.source, i.target, i.module_level, i.type_only) for i in found if i.target.startswith("talos")} == {
        ("talos.acc", "talos.fut", False, True),
        ("talos.acc", "talos.fut", False, False),  # inside a function: neither
        ("talos.fut", "talos.acc", True, False),
    }
    assert import_circles(found) == [["talos.acc", "talos.fut"]]


def test_a_long_file_is_caught(tmp_path: Path) -> None:
    sdk = tmp_path / "talos"
    (sdk / "cli").mkdir(parents=True)
    (sdk / "_short.py").write_text("x = 1\n" * MAX_LINES)
    (sdk / "cli" / "_long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert files_over(sdk, MAX_LINES) == [f"talos/cli/_long.py: {MAX_LINES + 1} lines"]
