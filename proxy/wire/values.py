"""`value`: the decorator for the immutable records the hot path makes thousands of times a second.

A frozen dataclass sets every field through `object.__setattr__` in its `__init__`, which costs more
than twice a plain slot assignment, and a relayed request makes about fifteen such records (its
observations, messages, route, heads). `value` makes a slotted, hashable dataclass whose fields type
checkers treat as frozen (read-only: mypy refuses an assignment), while its `__init__` assigns them
plainly. Code never assigns to a field of one after it is made; mypy is what holds it to that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(field,))
def value(cls: type[T]) -> type[T]:
    """A slotted dataclass, read-only to type checkers, hashable like a frozen one."""
    return dataclass(slots=True, unsafe_hash=True)(cls)
