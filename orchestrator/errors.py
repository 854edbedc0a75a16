"""Errors a user can act on, printed as one line.

They subclass Hydra's ``CompactHydraException`` so that when they escape a Hydra app
Hydra prints the message alone, with no stack trace, and exits non-zero.
"""

from __future__ import annotations

from typing import Any

from hydra.errors import CompactHydraException


class ScalestudyError(CompactHydraException):
    """Base for errors reported to the user as one line."""


class ConfigError(ScalestudyError):
    """A config value is wrong; names the field and the value."""

    def __init__(self, field: str, value: Any, reason: str) -> None:
        self.field, self.value, self.reason = field, value, reason
        super().__init__(f"invalid config: {field}={value!r}: {reason}")

    def __reduce__(self):  # exceptions cross process boundaries (Parsl workers) pickled
        return (type(self), (self.field, self.value, self.reason))


class RunFailed(ScalestudyError):
    """A run's MPI job ended badly."""
