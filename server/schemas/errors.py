"""The one error every schema format raises for a text that is not a schema of it."""

from __future__ import annotations

__all__ = ["SchemaError"]


class SchemaError(ValueError):
    """The text is not a schema of its format, or a reference it names is missing (the registry answers 42201,
    invalid schema)."""
