"""The zoo's one error: a design that cannot be built (``DesignError``), how its message names
the field a misspelled name meant (``closest``), and the field by the path a user typed
(``with_prefix``)."""

import difflib
import re


class DesignError(ValueError):
    """A design that cannot be built. The message names the offending field."""


def closest(word: str, names, prefix: str = "") -> str:
    """`` (did you mean PREFIX+NAME?)`` for the known name nearest a misspelled ``word``, else
    ``""``."""
    near = difflib.get_close_matches(word, sorted(names), n=1, cutoff=0.75)
    return f" (did you mean {prefix}{near[0]}?)" if near else ""


def with_prefix(message: str, names, prefix: str) -> str:
    """``message`` with its leading field name, if it is one of ``names``, written as
    ``PREFIX+NAME`` (``n_heads (7) ...`` -> ``model.n_heads (7) ...``: the override a user
    typed); any other message unchanged."""
    m = re.match(r"(\w+)(?=[\s=(])", message)
    return prefix + message if m and m.group(1) in names else message
