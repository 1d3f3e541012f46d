"""User-facing errors: one clear message, never a traceback."""


class InputError(ValueError):
    """Bad input from the user.

    The message names the file, the field or the row, and what was expected, e.g.
    ``vectors.csv, row 17: expected 64 values, found 63``. The CLI prints it as one
    line and exits with status 2.
    """
