"""One line, naming the file, option or key, for a command line or config that jsonargparse could not parse
(instead of its usage block): the closest valid key for a mistyped one, the expected type for a bad value."""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any

import yaml

from primacy import registry
from primacy.cli.help import (
    HELP_FLAGS,
    LIGHTNING_COMMANDS,
    TOOL_COMMANDS,
    Param,
    class_keys,
    configured_classes,
    import_class,
    link_sources,
    parameters,
)
from primacy.errors import UsageError


class ParseError(UsageError):
    """jsonargparse could not parse the command line or a config; ``str()`` is its first line, ``full`` all of it.
    The CLI turns it into one line with :func:`explain`."""

    def __init__(self, message: str) -> None:
        super().__init__(message.strip().splitlines()[0] if message.strip() else "invalid arguments")
        self.full = message


def check_config_files(argv: list[str]) -> None:
    """Refuses, in one line naming the file, a ``--config`` that is missing, empty, not YAML or not a mapping."""
    for option, value in _config_values(argv):
        path = Path(value)
        if path.is_dir():
            raise UsageError(f"{option} {value} is a directory: give a YAML file")
        if not path.is_file():
            if not isinstance(_yaml_or_none(value), dict):  # jsonargparse also takes the YAML text itself
                raise UsageError(f"{option} {value} does not exist")
            continue
        try:
            settings = yaml.safe_load(path.read_text())
        except yaml.YAMLError as err:
            raise UsageError(f"{option} {value} is not valid YAML: {_yaml_problem(err)}") from None
        except (OSError, UnicodeDecodeError) as err:
            raise UsageError(f"{option} {value} cannot be read: {err}") from None
        if settings is None:
            raise UsageError(f"{option} {value} is empty: a config is a YAML mapping, e.g. "
                             "'trainer: {max_steps: 100}'")
        if not isinstance(settings, dict):
            raise UsageError(f"{option} {value} is not a mapping of settings: it holds a {type(settings).__name__}")


def check_nulls(config: Any, parser: Any, argv: list[str]) -> None:
    """Refuses, in one line naming the setting, a null given to a constructor parameter of a class the parsed
    ``config`` chooses whose type does not take one (jsonargparse passes a class's nulls on unchecked, so the
    constructor would fail on it); a parameter whose default is null, and one a link sets, are left alone."""
    linked = link_sources(parser)
    for prefix, cls in configured_classes(config).items():
        settings = config.get(prefix)
        for param in parameters(cls) if settings is not None else ():
            key = f"{prefix}.{param.name}"
            if settings.get(param.name, "") is None and not _takes_null(param) and key not in linked:
                expected = param.meta.lower() if param.meta.isupper() else param.meta
                raise UsageError(f"{_null_given(key, argv)}: expected {expected} (null is not one of its values)")


def _takes_null(param: Param) -> bool:
    """Whether a null is a value of ``param``: its default, or its type's (a type that did not resolve counts, so
    jsonargparse's check holds)."""
    meta = param.meta
    return param.default is None or meta in ("VALUE", "Any") or any(w in meta for w in ("null", "None", "Optional"))


def _null_given(key: str, argv: list[str]) -> str:
    """Where the null at ``key`` was given: ``--key null`` on the command line, else the --config files."""
    if any(_same_key(arg, key) for arg in argv if arg.startswith("--")):
        return f"--{key} null"
    return f"{key}: null in --config {', '.join(_config_files(argv)) or 'the config'}"


def check_plugins_installed(argv: list[str]) -> None:
    """Refuses, before Lightning is imported, a config or option that names by its short name a class of a bundled
    plugin that is not installed: the line the whole parse would end with (``_unknown_class``), without Lightning.
    Files that cannot be read are left to ``check_config_files``."""
    absent = {name for kind, name in registry.checkout_plugins() if name not in registry.names(kind)}
    if not absent or any(arg in HELP_FLAGS for arg in argv):
        return
    for key, name in _short_class_names(argv):
        if name in absent:
            raise _unknown_class(key, name)


def _short_class_names(argv: list[str]) -> list[tuple[str, str]]:
    """(key, class_path) of every class chosen by a short name: in the readable ``--config`` files, then on the
    command line (``--model NAME``, ``--data NAME``, ``--KEY.backbone NAME``, ``--KEY.class_path NAME`` or
    ``--KEY '{class_path: NAME, ...}'``)."""
    found = []
    for _, value in _config_values(argv):
        path = Path(value)
        try:
            settings = yaml.safe_load(path.read_text()) if path.is_file() else _yaml_or_none(value)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        found += _class_paths(settings, "")
    for i, arg in enumerate(argv):
        if not arg.startswith("--") or arg.startswith("--config"):
            continue
        key, has_value, value = arg[2:].partition("=")
        if not has_value:
            value = argv[i + 1] if i + 1 < len(argv) else ""
        parsed = _yaml_or_none(value)
        if key.endswith(".class_path"):
            found.append((key.removesuffix(".class_path"), value))
        elif isinstance(parsed, dict):
            found += _class_paths(parsed, key)
        elif isinstance(parsed, str) and key.rpartition(".")[2] in ("model", "data", "backbone"):
            found.append((key, parsed))
    return [(key, name) for key, name in found if isinstance(name, str) and "." not in name]


def _class_paths(settings: Any, prefix: str) -> list[tuple[str, Any]]:
    """(key, class_path) of every mapping with a class_path in ``settings``, keyed as on the command line."""
    if not isinstance(settings, dict):
        return []
    found = [(prefix, settings["class_path"])] if prefix and "class_path" in settings else []
    for key, value in settings.items():
        found += _class_paths(value, f"{prefix}.{key}" if prefix else str(key))
    return found


def _config_values(argv: list[str]) -> list[tuple[str, str]]:
    found = []
    for i, arg in enumerate(argv):
        if arg in ("-c", "--config") and i + 1 < len(argv):
            found.append((arg, argv[i + 1]))
        elif arg.startswith("--config="):
            found.append(("--config", arg.partition("=")[2]))
    return found


def _yaml_or_none(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return None


def _yaml_problem(err: yaml.YAMLError) -> str:
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    return f"{problem} (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else problem


_UNRECOGNIZED = re.compile(r"unrecognized arguments: (.*)", re.DOTALL)
_NOT_ACCEPTED_BY = re.compile(r"Subcommand '\w+' does not accept option '([^']+)'")
_BAD_COMMAND = re.compile(r"argument subcommand: invalid choice: '([^']*)'")
_NO_COMMAND = re.compile(r'expected "subcommand" to be one of')
_NO_VALUE = re.compile(r"argument --([^\s/:]+)\S*: expected one argument")
_KEY = re.compile(r'(?:- )?Parser key "([^"]+)":$')
_CLASS = re.compile(r"(?:- )?Problem with given class_path '([^']+)':$")
_OPTION = re.compile(r"(?:- )?Option '([^']+)' is not accepted")
_GOT = re.compile(r"(?:- )?Expected (.*?)\. Got value: (.*)$")
_ALTERNATIVE = re.compile(r"- Expected an? (.*)$")
_GIVEN = re.compile(r"Given value: (.*)$")
_NO_CLASS = re.compile(r"(?:- )?Expected a dot import path string: (\S+)$")


def explain(error: ParseError, argv: list[str], parser: Any) -> UsageError:
    """One line for what jsonargparse reported about ``argv``: an unknown option gets the closest valid key (of the
    parser and of the classes the config chooses), a bad value its key, value and expected type."""
    message = error.full
    if match := _UNRECOGNIZED.match(message):
        unknown = match.group(1).split()
        option = next((t for t in unknown if t.startswith("-")), unknown[0])
        candidates = _parser_keys(parser) + _config_keys(parser, argv, drop=unknown)
        return _unknown_key(option.split("=")[0].lstrip("-"), candidates, argv)
    if match := _NOT_ACCEPTED_BY.search(message):
        return _unknown_key(match.group(1), _parser_keys(parser) + _config_keys(parser, argv), argv)
    if match := _NO_VALUE.match(message):
        typed = [arg for arg in argv if arg == f"--{match.group(1)}" or arg.startswith(f"--{match.group(1)}.")]
        return UsageError(f"{typed[-1] if typed else '--' + match.group(1)} needs a value")
    if match := _BAD_COMMAND.search(message):
        commands = [*LIGHTNING_COMMANDS, *TOOL_COMMANDS]
        close = difflib.get_close_matches(match.group(1), commands, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        return UsageError(f"unknown command {match.group(1)!r}: {hint}commands: {', '.join(commands)}")
    if _NO_COMMAND.search(message):
        return UsageError("no command given: primacy --help lists them")
    return _nested(message, argv, parser) or UsageError(" ".join(message.split()))


def _nested(message: str, argv: list[str], parser: Any) -> UsageError | None:
    """Reads jsonargparse's indented report (``Parser key "model":`` > ``Problem with given class_path ...:`` >
    ``Option 'lrr' is not accepted``) down to the innermost problem, and says it in one line with the full key."""
    stack: list[tuple[int, str, str]] = []  # (indent, "key" or "class", value)
    alternatives: list[str] = []
    given = None
    best: tuple[int, UsageError] | None = None  # (priority, message)
    for line in message.splitlines():
        text = line.strip()
        if not text:
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if match := _KEY.match(text):
            stack.append((indent, "key", match.group(1)))
        elif match := _CLASS.match(text):
            if import_class(match.group(1)) is None and (best is None or best[0] < 3):  # a misspelt class path
                best = (3, _unknown_class(_path(stack)[0], match.group(1), argv))
            stack.append((indent, "class", match.group(1)))
        elif match := _OPTION.match(text):
            path, chain = _path(stack)
            key = f"{path}.{match.group(1)}" if path else match.group(1)
            candidates = _parser_keys(parser) + [k for prefix, cls in chain for k in class_keys(prefix, cls)
                                                 if k not in link_sources(parser)]
            return _unknown_key(key, candidates, argv)
        elif match := _GOT.match(text):
            if best is None or best[0] < 2:
                best = (2, UsageError(f"--{_path(stack)[0]} {match.group(2)}: expected {_type_name(match.group(1))}"))
        elif match := _NO_CLASS.match(text):
            if best is None or best[0] < 1:
                best = (1, _unknown_class(_path(stack)[0], match.group(1), argv))
        elif (match := _ALTERNATIVE.match(text)) and not stack[1:]:
            alternatives.append(_type_name(match.group(1)))
        elif (match := _GIVEN.match(text)) and len(stack) == 1:
            given = match.group(1)
    if best is not None:
        return best[1]
    if alternatives and given is not None and stack[:1]:
        return UsageError(f"--{stack[0][2]} {given}: expected {' or '.join(dict.fromkeys(alternatives))}")
    return None


def _path(stack: list[tuple[int, str, str]]) -> tuple[str, list[tuple[str, type]]]:
    """The dotted key of a position in the report, and (prefix, class) for every class_path on the way."""
    parts: list[str] = []
    chain = []
    for _, kind, value in stack:
        if kind == "key":
            parts.append(value)
        else:
            parts.append("init_args")
            cls = import_class(value)
            if cls is not None:
                chain.append((".".join(parts), cls))
    return ".".join(parts), chain


def _type_name(text: str) -> str:
    """``a <class 'int'>`` -> ``int``; ``a typing.Literal['half', 'uniform']`` -> ``one of 'half', 'uniform'``."""
    text = re.sub(r"^an? ", "", text.strip())
    text = re.sub(r"<class '(?:[\w.]*\.)?(\w+)'>", r"\1", text).replace("NoneType", "null")
    if match := re.fullmatch(r"typing\.Literal\[(.*)\]", text):
        return f"one of {match.group(1)}"
    return text.replace("typing.", "")


def _unknown_class(key: str, name: str, argv: list[str] = ()) -> UsageError:
    """One line for a class that does not resolve at ``key``: a short name gets the registered names of its kind and
    the closest one; a dotted path that does not import says why, with the closest registered names too. Named as
    typed (``--model X``), or as the key and file of a config that holds it (``_where``)."""
    where = _where(key, name, argv)
    kind = {"model": "model", "data": "task"}.get(key) or ("backbone" if key.endswith("backbone") else None)
    if kind == "backbone" and "." not in name:
        try:  # a short name: a bundled plugin that is not installed, or a misspelt backbone, says so
            registry.get(name)
        except UsageError as err:
            return UsageError(f"{where}: {err}")
    close = registry.closest(name, kind, n=1, cutoff=0.5) if kind else []
    hint = f"did you mean {close[0]}? " if close else ""
    known = f"{hint}registered {kind}s: {', '.join(registry.names(kind))}" if kind else ""
    if "." in name:
        return UsageError(f"{where} is not found ({_import_problem(name)})" + (f": {known}" if known else ""))
    if kind is None:
        return UsageError(f"{where}: no class of that name is imported: give its full path (module.Class)")
    return UsageError(f"{where} is not a known {kind}: {hint}choose from {', '.join(registry.names(kind))} "
                      "(or give a full class path)")


def _import_problem(class_path: str) -> str:
    """Why ``class_path`` does not import, in a few words (Python's own: no module, no attribute)."""
    try:
        registry.import_class(class_path)
    except UsageError as err:
        return str(err).partition(": ")[2] or str(err)
    return "it imports, but is not a class of this kind"


def _where(key: str, name: str, argv: list[str]) -> str:
    """How a message names the class ``name`` at ``key``: ``--key name`` when the command line gives it (or when
    no config file does), else ``key.class_path name in --config FILE``."""
    typed = any(name in arg for arg in argv if not arg.startswith("--config") and arg not in _config_files(argv))
    files = [file for file in _config_files(argv) if not typed and name in _text(file)]
    return f"{key}.class_path {name} in --config {files[0]}" if files else f"--{key} {name}"


def _config_files(argv: list[str]) -> list[str]:
    return [value for _, value in _config_values(argv)]


def _text(path: str) -> str:
    try:
        return Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return path  # a config given as YAML text on the command line


def _unknown_key(key: str, candidates: list[str], argv: list[str]) -> UsageError:
    """``unknown option --trainer.max_stepz: did you mean --trainer.max_steps?``; closest among the same parent's
    keys first, then among all."""
    prefix, _, name = key.rpartition(".")
    siblings = {c.rpartition(".")[2]: c for c in candidates if c.rpartition(".")[0] == prefix}
    by_name = {}  # the last part of a key alone (--n_items), for a prefix left out or mistyped beyond recognition
    for candidate in candidates:
        by_name.setdefault(candidate.rpartition(".")[2], candidate)
    close = difflib.get_close_matches(name, list(siblings), n=1, cutoff=0.6)
    if close:
        best = siblings[close[0]]
    else:
        close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.75) or [
            by_name[n] for n in difflib.get_close_matches(name, list(by_name), n=1, cutoff=0.8)]
        best = close[0] if close else None
    typed = any(_same_key(arg, key) for arg in argv if arg.startswith("--"))
    dashes = "--" if typed else ""
    what = f"unknown option --{key}" if typed else f"unknown key {key} in the config"
    command = next((a for a in argv if a in LIGHTNING_COMMANDS), "fit")
    hint = f"did you mean {dashes}{best}?" if best else f"primacy {command} --help lists the options"
    return UsageError(f"{what}: {hint}")


def _same_key(arg: str, key: str) -> bool:
    """``--data.n_itmes`` and ``--data.init_args.n_itmes=8`` both name ``data.init_args.n_itmes``."""
    def plain(k: str) -> str:
        return k.replace(".init_args.", ".")

    return plain(arg.split("=")[0][2:].removesuffix("+")) == plain(key)


def _parser_keys(parser: Any) -> list[str]:
    """The parser's options without their dashes, link targets left out (the link sets them)."""
    linked = link_sources(parser)
    return [option[2:] for action in parser._actions for option in action.option_strings
            if option.startswith("--") and option[2:] not in linked]


def _config_keys(parser: Any, argv: list[str], drop: list[str] = ()) -> list[str]:
    """The constructor keys of the classes the config chooses, from a parse of ``argv`` without the bad tokens."""
    args = list(argv[1:] if argv and argv[0] in LIGHTNING_COMMANDS else argv)
    for token in drop:
        if token in args:
            args.remove(token)
    args = [a for a in args if a not in HELP_FLAGS and not a.startswith("--print_config")]
    try:
        config = parser.parse_args(args, _skip_validation=True)
    except (Exception, SystemExit):  # the keys are only a better suggestion; without them the parser's keys serve
        return []
    linked = link_sources(parser)
    return [key for prefix, cls in configured_classes(config).items() for key in class_keys(prefix, cls)
            if key not in linked]
