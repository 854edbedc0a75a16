"""The form of every site value that reaches a batch script or a shell command.

Names are plain words, flags plain flags, and ``worker_init`` commands may expand ``$VAR``
but may not chain, redirect, pipe or substitute commands. The site loader holds a site
file to these, and the sweep holds the command-line overrides of account, queue and
walltime to the same.
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import ConfigError

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,127}\Z")
WALLTIME_RE = re.compile(r"^(\d{1,3}):([0-5]\d):([0-5]\d)\Z")
# one shell word: plain characters, or $VAR / ${VAR} references; no quotes, no globs
WORD_RE = re.compile(r"^(?:[A-Za-z0-9_./:=@%+,~-]|\$[A-Za-z_][A-Za-z0-9_]*|\$\{[A-Za-z_][A-Za-z0-9_]*\})+\Z")
FLAG_RE = re.compile(r"^-{1,2}[A-Za-z0-9][A-Za-z0-9_.:=,/@+-]*\Z")
DIRECTIVE_WORD_RE = re.compile(r"^[A-Za-z0-9_./:=@%+,-]+\Z")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
MODULE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+/-]{0,127}\Z")
PATH_RE = re.compile(r"^/[A-Za-z0-9_./@+-]{1,1023}\Z")



def walltime_seconds(value: str) -> int:
    h, m, s = (int(x) for x in WALLTIME_RE.match(value).groups())
    return h * 3600 + m * 60 + s



def check_name(field_name: str, value: Any) -> str:
    if not isinstance(value, str) or not NAME_RE.match(value):
        raise ConfigError(field_name, value, "expected a plain name (letters, digits, '_', '.', '@', '+', '-')")
    return value


def check_walltime(field_name: str, value: Any) -> str:
    if not isinstance(value, str) or not WALLTIME_RE.match(value):
        raise ConfigError(field_name, value, "expected HH:MM:SS")
    return value


def check_flags(field_name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ConfigError(field_name, value, "expected a string of flags")
    for word in value.split():
        if not FLAG_RE.match(word):
            raise ConfigError(field_name, value, f"{word!r} is not a plain flag (like --mpi=pmi2)")
    return " ".join(value.split())


def check_command(field_name: str, value: Any) -> str:
    """A worker_init command: plain words and $VAR references, nothing the shell would chain or run."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(field_name, value, "expected a command")
    for word in value.split():
        if not WORD_RE.match(word):
            raise ConfigError(field_name, value, f"{word!r} holds shell metacharacters (; | & < > ` $( ) quotes "
                                                 "globs or newlines are refused; one command per item)")
    return " ".join(value.split())


def check_directive(field_name: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(field_name, value, "expected a scheduler directive")
    words = value.split()
    if not FLAG_RE.match(words[0]) or not all(DIRECTIVE_WORD_RE.match(w) for w in words[1:]):
        raise ConfigError(field_name, value, "expected flags like --constraint=cpu or -l filesystems=home")
    return " ".join(words)


def check_env(field_name: str, value: Any) -> tuple[tuple[str, str], ...]:
    """``env``: a mapping of variable names to literal values (no expansion; quoted when exported)."""
    if value in (None, ""):
        return ()
    if not isinstance(value, dict):
        raise ConfigError(field_name, value, "expected a mapping NAME: value")
    out = []
    for name, val in value.items():
        if not isinstance(name, str) or not ENV_NAME_RE.match(name):
            raise ConfigError(f"{field_name}.{name}", val, "not an environment variable name")
        if isinstance(val, bool) or not isinstance(val, (str, int, float)) or any(c in str(val) for c in "\n\0"):
            raise ConfigError(f"{field_name}.{name}", val, "expected a one-line string or number")
        out.append((name, str(val)))
    return tuple(out)


def check_module(value: Any) -> str:
    if not isinstance(value, str) or not MODULE_RE.match(value):
        raise ConfigError("site.modules", value, "expected a module name like cray-python/3.11.5")
    return value


def positive_int(field_name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(field_name, value, "expected an integer >= 1")
    return value


def as_list(field_name: str, value: Any) -> list:
    if value in (None, ""):
        return []
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise ConfigError(field_name, value, "expected a list")
    return value
