"""Strict reads of the JSON body of a stored row (transfers, SENSE instances, profiles, addresses).

    fields = read_body(body, where="tsdn.db: transfers row 3 (id 'ab')", hint="; restore ...", format=1)
    fields.text("state"); fields.number("rate", optional=True); fields.open_end("end")

A missing field or one of the wrong type raises `CorruptRow` naming the row, the field (with its
path: `steps[2].rate`) and what was found, then the hint (what an operator can do), never a
bare KeyError or TypeError.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

from sdn_app.core.errors import FailedPrecondition


class CorruptRow(FailedPrecondition):
    """A stored row that cannot be read; the message names the table, the row and the field."""


def read_body(body: Any, where: str, hint: str, format: int) -> Fields:
    """The fields of a row's `body` (JSON text of an object whose "format" is `format`);
    `CorruptRow` for anything else."""
    try:
        data = json.loads(body)
    except (TypeError, ValueError, RecursionError) as error:
        raise CorruptRow(f"{where}: body is not JSON ({error}){hint}") from None
    fields = Fields(data, where, hint)
    if not isinstance(data, dict):
        fields.bad("", f"expected an object, found {json.dumps(data)[:60]}")
    if data.get("format") != format:
        fields.bad("format", f"{data.get('format')!r} is not the supported {format}")
    return fields


class Fields:
    """Typed reads of one JSON object of a row; `CorruptRow` names the row and the field."""

    def __init__(self, data: Any, where: str, hint: str, prefix: str = ""):
        self.data = data
        self.where = where
        self.hint = hint
        self.prefix = prefix

    def bad(self, key: str, problem: str) -> None:
        """Raise `CorruptRow` about field `key` of this object."""
        field = f"{self.prefix}{key}" if key else self.prefix.rstrip(".") or "body"
        raise CorruptRow(f"{self.where}: field {field}: {problem}{self.hint}")

    def _get(self, key: str, kinds: tuple[type, ...], what: str, optional: bool) -> Any:
        if not isinstance(self.data, dict) or key not in self.data:
            self.bad(key, "missing")
        value = self.data[key]
        if value is None and optional:
            return None
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            self.bad(key, f"expected {what}{' or null' if optional else ''}, found {json.dumps(value)[:60]}")
        return value

    def value(self, key: str) -> Any:
        """Any JSON value."""
        if not isinstance(self.data, dict) or key not in self.data:
            self.bad(key, "missing")
        return self.data[key]

    def text(self, key: str) -> str:
        """A string."""
        return self._get(key, (str,), "a string", False)

    def optional_text(self, key: str) -> str | None:
        """A string or null."""
        return self._get(key, (str,), "a string", True)

    def integer(self, key: str, optional: bool = False) -> int | None:
        """A whole number (None only when `optional` and null)."""
        return self._get(key, (int,), "a whole number", optional)

    def number(self, key: str, optional: bool = False) -> float | None:
        """A finite number (None only when `optional` and null)."""
        value = self._get(key, (int, float), "a number", optional)
        if value is not None and not math.isfinite(value):
            self.bad(key, f"{value} is not a finite number")
        return value if value is None else float(value)

    def open_end(self, key: str) -> float:
        """A finite number, or null for an open end (infinity)."""
        value = self.number(key, optional=True)
        return math.inf if value is None else value

    def flag(self, key: str, optional: bool = False) -> bool | None:
        """true or false (None only when `optional` and null)."""
        return self._get(key, (bool,), "true or false", optional)

    def texts(self, key: str) -> tuple[str, ...]:
        """A list of strings."""
        values = self._get(key, (list,), "a list", False)
        if not all(isinstance(v, str) for v in values):
            self.bad(key, "expected a list of strings")
        return tuple(values)

    def integers(self, key: str) -> tuple[int, ...]:
        """A list of whole numbers."""
        values = self._get(key, (list,), "a list", False)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            self.bad(key, "expected a list of whole numbers")
        return tuple(values)

    def child(self, key: str, optional: bool = False) -> Fields | None:
        """The object under `key` (None only when `optional` and null)."""
        value = self._get(key, (dict,), "an object", optional)
        return None if value is None else Fields(value, self.where, self.hint, f"{self.prefix}{key}.")

    def children(self, key: str) -> list[Fields]:
        """The objects of the list under `key`."""
        values = self._get(key, (list,), "a list", False)
        children = []
        for i, value in enumerate(values):
            child = Fields(value, self.where, self.hint, f"{self.prefix}{key}[{i}].")
            if not isinstance(value, dict):
                child.bad("", f"expected an object, found {json.dumps(value)[:60]}")
            children.append(child)
        return children

    def choice(self, key: str, choices: Iterable[str]) -> str:
        """A string that is one of `choices`."""
        value = self.text(key)
        allowed = list(choices)
        if value not in allowed:
            self.bad(key, f"{value!r} is not one of {', '.join(allowed)}")
        return value
