"""User-facing errors: each carries a one-line message that says what was wrong and how to fix it.

The CLI catches :class:`AttnlabError` and prints ``error: <message>`` with exit code 2; anything
else is a bug in attnlab and keeps its traceback.
"""


class AttnlabError(Exception):
    """A mistake the user can fix (bad path, bad config, corrupt file, ...)."""


class CheckpointError(AttnlabError):
    """A checkpoint or run folder is missing, corrupt, tampered with or incompatible."""


class CorpusError(AttnlabError):
    """The corpus cannot be found, fetched or parsed; the message names the file (and line) and the fix."""


class WriteError(AttnlabError, OSError):
    """A file could not be written (a full disk, a read-only folder, a size limit): one line naming the file
    and the fix for the CLI, and still the :class:`OSError` it was (``errno``, ``strerror``, ``filename``), so
    a caller that goes on without the file (a redrawn training curve) catches it as before."""

    def __init__(self, message: str, errno: int | None = None, strerror: str | None = None,
                 filename: str | None = None) -> None:
        super().__init__(errno, strerror, filename)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self):
        return type(self), (self.message, self.errno, self.strerror, self.filename)


class ArgumentError(AttnlabError, ValueError):
    """A library call was given a value its argument does not take (``beam_size=0``, ``max_len=-5``): the message
    names the argument, the value and the rule. Also a :class:`ValueError`, as Python's own would be."""


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument of the wrong type (``beam_size=1.5``, ``attention(None)``): an :class:`ArgumentError` and a
    :class:`TypeError`."""
