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
