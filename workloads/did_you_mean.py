"""The nearest known name to a mistyped one, said the same way by every refusal (a key, a column,
a metric, a value, a command): `` (did you mean 'eager_solo'?)``. One place, so that a value's
refusal and a key's read alike. ``difflib``'s ratio at its default cutoff (0.6) catches a
dropped, doubled, swapped or mistyped letter in names this short, and a prefix or suffix
shortening (``top1`` for ``final_top1``) is matched beside it."""

from __future__ import annotations

import difflib
from typing import Iterable


def nearest(word: str, known: Iterable[str]) -> str | None:
    names = [str(k) for k in known]
    word = str(word)
    close = difflib.get_close_matches(word, names, n=1)
    if close:
        return close[0]
    lower = word.lower()
    ends = [n for n in names if lower and (n.lower().endswith("_" + lower) or n.lower().startswith(lower + "_"))]
    return ends[0] if len(ends) == 1 else None


def hint(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` or nothing."""
    close = nearest(word, known)
    return f" (did you mean {close!r}?)" if close else ""
