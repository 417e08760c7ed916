"""The zoo's one error: a design that cannot be built (``DesignError``)."""


class DesignError(ValueError):
    """A design that cannot be built. The message names the offending field."""
