"""The exit codes of `gmmv` and the error its handlers raise (docs/usage.md, "Exit
codes"). A leaf module: every command module imports it, it imports nothing of theirs."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_NOT_MET = 3  # the command ran to its end and its target was not met: no candidate met the
# targets (gmmv capacity), the fitted hazard fails a check (gmmv hazards)
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a process killed by it


class CommandError(Exception):
    """An error a handler reports to the user as one message and an exit code."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code
