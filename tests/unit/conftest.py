"""Fixtures of the unit tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import talos._codec as codec

# The names talos._codec binds to either implementation, and the pure-Python functions behind them.
CODEC_BINDINGS = {
    "encode_records": codec._encode_records_py,
    "encode_values": codec._encode_values_py,
    "walk_records": codec._walk_records_py,
    "decode_records_section": codec._decode_records_py,
}


@pytest.fixture(scope="module", params=["python", "compiled"])
def codec_implementation(request: pytest.FixtureRequest) -> Iterator[str]:
    """Runs a module's tests (``pytestmark = pytest.mark.usefixtures("codec_implementation")``) once with the
    pure-Python record codec and once with the compiled one (skipped where it was not built)."""
    if request.param == "compiled":
        speedups = pytest.importorskip("talos._speedups", reason="the compiled codec was not built")
        chosen = {name: getattr(speedups, name) for name in CODEC_BINDINGS}
    else:
        chosen = dict(CODEC_BINDINGS)
    saved = {name: getattr(codec, name) for name in CODEC_BINDINGS}
    for name, function in chosen.items():
        setattr(codec, name, function)
    try:
        yield request.param
    finally:
        for name, function in saved.items():
            setattr(codec, name, function)
