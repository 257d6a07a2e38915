"""The one exception type for bad user input.

Library code raises `InputError` with a message that names the file, column, row or option at
fault; the command line prints that message as a single stderr line and exits with status 2.
"""


class InputError(ValueError):
    """Bad user input: the message is one line that says what is wrong and where."""
