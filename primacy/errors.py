"""The one exception type for bad user input; the CLI prints it as a single line, without a traceback."""


class UsageError(ValueError):
    """A parameter has a value that is not allowed; the message names the parameter, the value and the rule."""


def find_usage_error(error: BaseException | None) -> UsageError | None:
    """The UsageError behind ``error``, if any: libraries (jsonargparse) wrap what constructors raise."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, UsageError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None
