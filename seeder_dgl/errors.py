"""One exception family for everything a user can fix: the CLI prints its message on one line."""


class SeederError(Exception):
    """An error with a one-line message that says what went wrong and what to do."""
