"""The one exception type for bad user input, and the one warning for input that works but may
mislead.

Library code raises `InputError` with a message that names the file, column, row or option at
fault; the command line prints that message as a single stderr line and exits with status 2.
`warn` says what may mislead (a user profile shadowing a shipped one, a poorly fitted profile)
as one `specscope: warning:` line on stderr, and the command goes on. A command run without
the executor extra that it needs says which extra to install (`missing_extra`), as bad input
does.
"""

import warnings


class InputError(ValueError):
    """Bad user input: the message is one line that says what is wrong and where."""


class InputWarning(UserWarning):
    """Input that works but may mislead: one line that says what and where."""


def warn(message: str) -> None:
    """Warn about the user's input (`InputWarning`); the command line prints it as one line."""
    warnings.warn(message, InputWarning, stacklevel=2)


EXECUTOR_MODULES = ("torch", "transformers", "safetensors", "tokenizers")
"""What the executor extra installs (`pip install 'specscope[executor]'`): real torch runs need
it; the analytic commands import none of it."""


def missing_extra(exc: ModuleNotFoundError, command: str) -> InputError | None:
    """The one-line error of `command` failing to import a module of the executor extra (None
    when the missing module is another)."""
    module = (exc.name or "").partition(".")[0]
    if module not in EXECUTOR_MODULES:
        return None
    return InputError(f"{command} needs the executor extra: pip install 'specscope[executor]' "
                      f"(no module named {module!r})")


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none): what a
    library's error says, fit for one line of ours."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
