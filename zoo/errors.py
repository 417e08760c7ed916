"""The zoo's one error: a design that cannot be built (``DesignError``), and how its message
names the field a misspelled name meant (``closest``)."""

import difflib


class DesignError(ValueError):
    """A design that cannot be built. The message names the offending field."""


def closest(word: str, names, prefix: str = "") -> str:
    """`` (did you mean PREFIX+NAME?)`` for the known name nearest a misspelled ``word``, else
    ``""``."""
    near = difflib.get_close_matches(word, sorted(names), n=1, cutoff=0.75)
    return f" (did you mean {prefix}{near[0]}?)" if near else ""
