"""The one exception type for bad user input; the CLI prints it as a single line, without a traceback."""

import argparse
import re


class UsageError(ValueError):
    """A parameter has a value that is not allowed; the message names the parameter, the value and the rule."""


# PyTorch's message when an allocation is larger than the machine can ever give
_ALLOCATION = re.compile(r"can't allocate memory: you tried to allocate (\d+) bytes")


def find_usage_error(error: BaseException | None) -> UsageError | None:
    """The UsageError behind ``error``, if any: libraries (jsonargparse) wrap what constructors raise. A failed
    allocation (a size no check caught) counts as one: the settings ask for more memory than there is."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, UsageError):
            return error
        allocation = _ALLOCATION.search(str(error)) if isinstance(error, (RuntimeError, MemoryError)) else None
        if allocation:
            return UsageError(f"the settings need more memory than this machine has (an allocation of "
                              f"{int(allocation.group(1)) / 2**30:.3g} GiB failed): lower the sizes")
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


class ArgumentParser(argparse.ArgumentParser):
    """argparse for primacy's own subcommands: a usage error (unknown option, missing or malformed value) is a
    UsageError, printed as one line like every other bad input, instead of argparse's usage block."""

    def error(self, message: str) -> None:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")
