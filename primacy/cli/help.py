"""What `primacy --help` and `primacy fit --help` show: every command in one line each, and the options of the
task, model and backbone a config chooses, read from their signatures and docstrings."""

from __future__ import annotations

import collections.abc
import inspect
import re
import shutil
import textwrap
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docstring_parser

from primacy import registry

LIGHTNING_COMMANDS = {
    "fit": "train a model on a task, then test the final model and write <run>/results (a stopped run resumes)",
    "validate": "evaluate a checkpoint (--ckpt_path) on the task's validation sets",
    "test": "evaluate a checkpoint (--ckpt_path) on the held-out test sets and write <run>/results",
    "predict": "Lightning's predict loop: primacy's tasks define no predict data, so use test",
}
# primacy's own commands: each is the ``command(args)`` of the module primacy.cli.<name>
TOOL_COMMANDS = {
    "aggregate": "combine runs that differ only by seed: means, standard errors and figures (Fig. 5)",
    "analyze": "post-hoc analyses of finished runs (icl, ablation, probes) and of the ICL paper's published heads",
    "atlas": "every backbone at matched difficulty: a knob search into an accuracy band, seeds, curves, table",
    "claims": "check every finding the docs state against the committed results (results/**/claims.yaml)",
    "cmr_fit": "CMR fitted by likelihood to each participant of free-recall data: people, or a model's seeds",
    "cmr_grid": "build the CMR grid of the ICL paper that fits compare curves with, or compare two grids",
    "humans": "free-recall runs beside people (psifr's Morton2013, PEERS, your file): the same curves, CMR fits",
    "kernels": "Fig. 1: continuous vs discretised HiPPO impulse responses",
    "models": "list the registered backbones, plugins included",
    "reproduce": "a paper figure in one command: its runs (here or on SLURM), aggregates, the page",
}
HELP_FLAGS = ("-h", "--help")
HELP_ALL = "--help-all"  # Lightning's full help: every Trainer option
# The run settings `primacy fit --help` lists after the task, model and backbone (when the subcommand has them).
RUN_OPTIONS = {
    "trainer.max_steps": "training budget in steps (the training stream is endless)",
    "trainer.val_check_interval": "validate every this many steps",
    "trainer.default_root_dir": "the run directory: config.yaml, checkpoints/, results/, wandb/",
    "trainer.accelerator": "cpu, gpu, mps or auto",
    "trainer.logger": "offline wandb in the run directory by default; false for none",
    "seed_everything": "seed of the model's initialisation (the data have their own seed)",
    "ckpt_path": "checkpoint to test (validate, test) or to resume from (fit finds its own)",
    "test_after_fit": "test the final model when training ends",
    "results.formats": "figure formats written to <run>/results",
}


@dataclass
class Param:
    name: str
    meta: str  # INT, FLOAT, {legs,lin}, [FLOAT,FLOAT], ...
    default: Any  # inspect.Parameter.empty when required
    doc: str


def import_class(class_path: str) -> type | None:
    """``registry.import_class``, or None: a name jsonargparse resolved imports; anything else is reported by the
    parse itself."""
    try:
        return registry.import_class(class_path)
    except Exception:
        return None


def parameters(cls: type) -> list[Param]:
    """The constructor parameters of ``cls`` (those a ``**kwargs`` stands for included, as the CLI resolves them:
    ``registry.constructor_parameters``) with type, default and the line its docstring (or, for those, the docstring
    of what they are handed to) gives them."""
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # an annotation that does not resolve: show it as written
        hints = {}
    docs = {}
    for doc in (cls.__doc__, cls.__init__.__doc__):
        for param in docstring_parser.parse(doc or "").params:
            names = [name.strip() for name in param.arg_name.split(",")]  # "train_A, train_B, train_dt: whether ..."
            docs[names[0]] = _first_sentence(param.description or "")
            docs.update((name, "") for name in names[1:])  # the first of a group says it for all
    params = []
    for p in registry.constructor_parameters(cls):
        hint = hints.get(p.name, p.annotation)
        meta = "VALUE" if hint is inspect.Parameter.empty else _meta(hint)
        doc = docs[p.name] if p.name in docs else _first_sentence(p.doc or "")
        params.append(Param(p.name, meta, p.default, doc))
    return params


def _meta(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return "{" + ",".join(str(a) for a in args) + "}"
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return "|".join(_meta(a) for a in rest) + ("|null" if len(rest) < len(args) else "")
    if origin is tuple:
        return "[" + ",".join("..." if a is Ellipsis else _meta(a) for a in args) + "]"
    if origin in (list, set, collections.abc.Sequence, collections.abc.Iterable):
        return f"[{_meta(args[0]) if args else 'VALUE'},...]"
    if isinstance(hint, type):
        return "PATH" if issubclass(hint, Path) else hint.__name__.upper()
    return str(hint).replace("typing.", "")


def _show(value: Any) -> str:
    """A value as one would write it on the command line."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if hasattr(value, "class_path"):
        return value.class_path.rpartition(".")[2]
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return str(value)


def _summary(cls: type) -> str:
    """The first sentence of a class's docstring, on one line."""
    return _first_sentence((inspect.getdoc(cls) or "").split("\n\n")[0])


def _first_sentence(text: str) -> str:
    return re.split(r"(?<=\.)\s+(?=[A-Z])", " ".join(text.split()), maxsplit=1)[0]


def class_keys(prefix: str, cls: type) -> list[str]:
    return [f"{prefix}.{p.name}" for p in parameters(cls)]


def configured_classes(config: Any, prefix: str = "") -> dict[str, type]:
    """``{"model.init_args": SequenceModel, "model.init_args.backbone.init_args": S4DBackbone, ...}``: every class
    a parsed config chooses, by the key its constructor arguments live under (lists, e.g. callbacks, left out)."""
    found: dict[str, type] = {}
    for key, value in (vars(config).items() if hasattr(config, "__dict__") else ()):
        path = f"{prefix}{key}"
        if isinstance(getattr(value, "class_path", None), str):
            cls = import_class(value.class_path)
            if cls is not None:
                found[f"{path}.init_args"] = cls
            found.update(configured_classes(value.get("init_args"), f"{path}.init_args."))
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            found.update(configured_classes(value, f"{path}."))
    return found


def _width() -> int:
    return max(60, min(120, shutil.get_terminal_size((100, 24)).columns))


def _rows(rows: list[tuple[str, str]], column: int | None = None) -> list[str]:
    """argparse-like two columns: the option, then its text (after a long option when the line has room for it,
    else on the next line)."""
    width = _width()
    column = column or min(max((len(left) for left, _ in rows), default=0), 40) + 4
    lines = []
    for left, right in rows:
        wrapped = textwrap.wrap(right, width - column - 2) or [""]
        if len(left) + 2 <= column:
            lines.append(f"  {left:<{column - 2}}{wrapped[0]}".rstrip())
            wrapped = wrapped[1:]
        elif len(right) + len(left) + 6 <= width:
            lines.append(f"  {left}  {right}")
            wrapped = []
        else:
            lines.append(f"  {left}")
        lines += [" " * column + line for line in wrapped]
    return lines


def overview() -> str:
    """`primacy --help`: every subcommand with one line, then how to get help for one."""
    import primacy

    column = max(len(name) for name in [*LIGHTNING_COMMANDS, *TOOL_COMMANDS]) + 4  # one column for both groups
    about = primacy.__doc__.split("\n\n")[0].strip().removeprefix("primacy: ")  # its first paragraph: the rest maps
    # the package's modules for readers of the code
    return "\n".join(["usage: primacy <command> [options]", "", about[:1].upper() + about[1:], "",
                      "Runs (Lightning; configured by YAML files, e.g. --config configs/quickstart.yaml):",
                      *_rows(list(LIGHTNING_COMMANDS.items()), column), "",
                      "Results and tools:", *_rows(list(TOOL_COMMANDS.items()), column), "",
                      "Help for one command: primacy <command> --help (e.g. primacy fit --help)"])


def wants_help(argv: list[str]) -> bool:
    """``primacy fit ... --help`` (not ``--model.help NAME``, which jsonargparse answers)."""
    return len(argv) > 1 and argv[0] in LIGHTNING_COMMANDS and any(arg in HELP_FLAGS for arg in argv[1:])


def subcommand_help(subcommand: str, parser: Any, args: list[str]) -> str:
    """The options of the task, model and backbone that ``args`` (``--config`` files and any overrides) choose,
    with the values they set; then the main run settings. Lightning's full help stays under --help-all."""
    args = [a for a in args if a not in HELP_FLAGS and not a.startswith("--print_config")]
    config = parser.parse_args(args, _skip_validation=True)  # raises ParseError: the same message as a run
    classes = configured_classes(config)
    lines = [f"usage: primacy {subcommand} --config FILE.yaml [--config FILE.yaml ...] [--KEY VALUE ...]", "",
             f"{subcommand}: {LIGHTNING_COMMANDS[subcommand]}.", ""]
    model, data = classes.get("model.init_args"), classes.get("data.init_args")
    if model is None or data is None:
        lines += _choose_a_config(subcommand, model, data)
    links = link_sources(parser)
    for title, prefix in (("Task", "data.init_args"), ("Model", "model.init_args"),
                          ("Backbone", "model.init_args.backbone.init_args")):
        cls = classes.get(prefix)
        if cls is None:
            continue
        lines += _wrap(f"{title} {cls.__name__} ({cls.__module__}): {_summary(cls)}")
        rows = []
        for p in parameters(cls):
            key = f"{prefix}.{p.name}"
            if key in links:
                rows.append((f"--{key}", f"set from --{links[key]}"))
                continue
            value = config.get(key, p.default)
            default = "required" if value is inspect.Parameter.empty else f"default {_show(value)}"
            rows.append((f"--{key} {p.meta}", f"{p.doc} ({default})" if p.doc else f"({default})"))
        lines += [*_rows(rows), ""]
    actions = {action.dest: action for action in parser._actions}
    run = [(f"--{key}", f"{text} (default {_show(config.get(key))})") for key, text in RUN_OPTIONS.items()
           if key in actions]
    lines += ["Run:", *_rows(run), "", "More:"]
    lines += _rows([(f"primacy {subcommand} {HELP_ALL}", "all of Lightning's options (Trainer, callbacks, ...)"),
                    (f"primacy {subcommand} --model.help SequenceModel", "one class's options, by name (also "
                     "--data.help and --model.init_args.backbone.help)"),
                    ("primacy models", "the registered backbones")])
    return "\n".join(lines)


def backbone_help(argv: list[str]) -> None:
    """``--model.init_args.backbone.help NAME`` when no model is chosen yet (jsonargparse then has nowhere to look
    for a backbone): the backbone's own help, as a config with a model would show it; exits."""
    from lightning.pytorch.cli import LightningArgumentParser

    from primacy.backbones.base import Backbone

    for i, arg in enumerate(argv[:-1]):
        if arg in ("--model.init_args.backbone.help", "--model.backbone.help"):
            registry.get(argv[i + 1])  # an unknown name: UsageError with the close matches
            parser = LightningArgumentParser(prog=f"primacy {argv[0]}")
            parser.add_subclass_arguments(Backbone, "backbone", required=False)
            parser.parse_args(["--backbone.help", argv[i + 1]])  # prints the help and exits


def _choose_a_config(subcommand: str, model: type | None, data: type | None) -> list[str]:
    configs = sorted(Path("configs").glob("*.yaml"))  # relative to where primacy runs, as --config paths are
    quickstart = Path("configs/quickstart.yaml")
    example = quickstart if quickstart in configs else configs[0] if configs else None
    for_example = f", e.g. primacy {subcommand} --config {example} --help" if example else ""
    lines = _wrap("A run is described by YAML config files (--config; later ones override earlier ones). Give one "
                  f"to see the options of its task, model and backbone{for_example}.")
    if configs:
        lines += _wrap("Configs in ./configs: " + ", ".join(c.name for c in configs))
    lines.append("")
    for missing, title, kind in ((model, "Models (--model NAME):", "model"),
                                 (data, "Tasks (--data NAME):", "task")):
        if missing is None:
            lines += [title, *_rows([(name, _summary(registry.get(name, kind))) for name in registry.names(kind)])]
    lines += [*_wrap("Backbones (--model.init_args.backbone NAME): " + ", ".join(registry.names())), ""]
    return lines


def _wrap(text: str) -> list[str]:
    return textwrap.wrap(text, _width(), subsequent_indent="  ")


def link_sources(parser: Any) -> dict[str, str]:
    """Link targets (``model.init_args.vocab_size``) and their sources (``data.init_args.vocab_size``)."""
    group = getattr(parser, "_links_group", None)
    found = {}
    for link in getattr(group, "_group_actions", ()):
        try:
            found[link.target[0]] = ", ".join(source for source, _ in link.source)
        except (AttributeError, TypeError):  # another jsonargparse: the link is only not annotated
            continue
    return found
