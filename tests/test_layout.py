"""The package's layout is a contract (docs/architecture.md): every module belongs to one layer, imports point down
only, nothing outside the command line imports a command module, no two modules import each other through any
path, and no module grows past ~400 lines. Read from the source with ast, so lazy imports inside functions count.
tests/ is laid out like the package. The page's map is written from the packages' module lists: `python
tests/test_layout.py` rewrites it."""

import ast
import re
import textwrap
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "primacy"

# Bottom up. A module may import modules of its own layer or of lower ones, never of a higher one.
LAYERS = [
    ("foundations", ["primacy", "primacy.errors", "primacy.moved", "primacy.checks", "primacy.files"]),
    ("ssm", ["primacy.ssm"]),
    ("backbones and tasks", ["primacy.backbones", "primacy.tasks"]),
    ("analysis", ["primacy.analysis"]),
    ("metrics", ["primacy.metrics"]),
    ("models", ["primacy.models"]),
    ("registry", ["primacy.registry", "primacy.contract"]),
    ("figures", ["primacy.figures"]),
    ("rundir", ["primacy.rundir"]),
    ("callbacks", ["primacy.callbacks"]),
    ("workflows", ["primacy.workflows"]),
    ("cli", ["primacy.cli", "primacy.__main__"]),
    ("conformance kit", ["primacy.testing"]),  # checks every layer's contracts and runs `primacy fit` as a user does
]
CLI = [name for name, _ in LAYERS].index("cli")
MAX_LINES = 400


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def layer(module: str) -> int:
    """The index of the layer whose longest prefix matches ``module``."""
    best = max(((len(prefix), i) for i, (_, prefixes) in enumerate(LAYERS) for prefix in prefixes
                if module == prefix or module.startswith(prefix + ".")), default=None)
    assert best is not None, f"{module} belongs to no layer: add it to LAYERS and docs/architecture.md"
    return best[1]


def imports(module: str) -> set[str]:
    """The primacy modules that ``module`` imports anywhere in its source (``from pkg import submodule`` names the
    submodule)."""
    found = set()
    for node in ast.walk(ast.parse(MODULES[module].read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
    return {name for name in found if name == "primacy" or name.startswith("primacy.")}


def test_every_module_belongs_to_a_layer_and_its_imports_point_down():
    upward = []
    for module in MODULES:
        for target in imports(module):
            assert target in MODULES, f"{module} imports {target}, which does not exist"
            if layer(target) > layer(module):
                upward.append(f"{module} ({LAYERS[layer(module)][0]}) imports {target} ({LAYERS[layer(target)][0]})")
    assert not upward, "imports must point down:\n" + "\n".join(upward)


def test_only_the_command_line_imports_command_modules():
    outside = [f"{module} imports {target}" for module in MODULES if layer(module) < CLI
               for target in imports(module) if target.startswith("primacy.cli")]
    assert not outside, outside


def test_no_module_imports_itself_through_a_circle():
    graph = {module: imports(module) - {module} for module in MODULES}
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycle = path[path.index(target):] + [target] if target in path else [module, target]
                pytest.fail("import circle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in MODULES:
        if module not in state:
            visit(module, [module])


def test_no_module_is_longer_than_the_limit():
    long = {module: n for module, path in MODULES.items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these modules (over {MAX_LINES} lines): {long}"


def test_the_top_level_holds_a_handful_of_modules():
    top = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(top) <= 10, top


def test_the_circle_check_finds_a_circle(monkeypatch):
    """The check above can fail: two modules importing each other are reported."""
    fake = {"primacy.a": {"primacy.b"}, "primacy.b": {"primacy.a"}}
    monkeypatch.setattr(__import__(__name__), "MODULES", dict.fromkeys(fake, None))
    monkeypatch.setattr(__import__(__name__), "imports", lambda module: fake[module])
    with pytest.raises(pytest.fail.Exception, match="import circle: primacy.a -> primacy.b -> primacy.a"):
        test_no_module_imports_itself_through_a_circle()


# workflows/ grows with every study: one package per study, and a study's package imports the shared modules of
# workflows/ and no other study's package. The paper's figures draw every study's results, so paper/ may import them.
WORKFLOWS = "primacy.workflows"
COMPOSERS = {"paper"}  # packages of workflows/ that may import the studies
PEER_PACKAGES = {"primacy", "primacy.cli", "primacy.backbones"}  # one list of peers (a module per command, per
# mixer), which may stay flat; the top level has a rule of its own (test_the_top_level_holds_a_handful_of_modules)
MAX_MODULES = 10


def workflow_package(module: str) -> str | None:
    """The package of workflows/ that ``module`` belongs to (``atlas`` for primacy.workflows.atlas.planner), None for
    a shared module of workflows/ or a module outside it."""
    parts = module.split(".")
    if parts[:2] != WORKFLOWS.split(".") or len(parts) < 3:
        return None
    return parts[2] if (PACKAGE / "workflows" / parts[2] / "__init__.py").is_file() else None


def test_a_study_imports_no_other_study_and_shared_workflows_import_no_study():
    crossing = []
    for module in MODULES:
        if not module.startswith(WORKFLOWS + "."):
            continue
        own = workflow_package(module)
        for target in imports(module):
            other = workflow_package(target)
            if other is None or other == own or own in COMPOSERS:
                continue
            crossing.append(f"{module} ({own or 'shared'}) imports {target} ({other})")
    assert not crossing, ("a study's package imports only the shared modules of workflows/ (move what two studies "
                          "share there):\n" + "\n".join(crossing))


def test_the_study_check_finds_a_crossing(monkeypatch):
    """The check above can fail: a study importing another study, and a shared module importing a study."""
    fake = {"primacy.workflows.atlas.planner": {"primacy.workflows.humans.page"},
            "primacy.workflows.runs": {"primacy.workflows.paper.pages"},
            "primacy.workflows.paper.pages": {"primacy.workflows.humans.page"}}
    monkeypatch.setattr(__import__(__name__), "MODULES", dict.fromkeys(fake, None))
    monkeypatch.setattr(__import__(__name__), "imports", lambda module: fake[module])
    with pytest.raises(AssertionError) as failure:
        test_a_study_imports_no_other_study_and_shared_workflows_import_no_study()
    said = str(failure.value)
    assert "primacy.workflows.atlas.planner (atlas) imports primacy.workflows.humans.page (humans)" in said
    assert "primacy.workflows.runs (shared) imports primacy.workflows.paper.pages (paper)" in said
    assert "paper.pages (paper) imports" not in said


@pytest.mark.parametrize("package", [init.parent for init in sorted(PACKAGE.rglob("__init__.py"))
                                     if module_name(init) not in PEER_PACKAGES], ids=lambda p: p.name)
def test_a_mixed_package_holds_at_most_ten_modules(package):
    contents = package_contents(package)
    assert len(contents) <= MAX_MODULES, (f"{package} holds {len(contents)} modules and packages: group them into "
                                          f"packages of at most {MAX_MODULES}: {sorted(contents)}")


# The run directory's names (primacy.rundir.layout.RunDir and the kinds of result in primacy.rundir.kinds), and those
# of the analyses' folders a run keeps (HeadsDir, AblationDir, ProbesDir beside RunDir).
RUN_DIRECTORY_FILES = {"config.yaml", "last.ckpt", "summary.json", "accuracy.npz", "free_recall.npz", "free_recall.csv",
                       "dt_history.npz", "token_dt.npz", "head_history.npz", "heads.csv", "lag_crps.npz",
                       "emergence.csv", "ablation.json", "probes.csv", "probes.npz", "state.json"}
RUN_DIRECTORY_FOLDERS = {"results", "checkpoints", "logs", "icl", "ablation", "probes"}  # spelled only in a path:
# "results" is also an option, "probes" a page's layout


def run_directory_literals(module: str) -> list[str]:
    """Where ``module`` spells a file name of the run directory, or a folder of it in a path (``x / "results"``)."""
    tree = ast.parse(MODULES[module].read_text())
    found = [node for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and node.value in RUN_DIRECTORY_FILES]
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            found += [side for side in (node.left, node.right)
                      if isinstance(side, ast.Constant) and side.value in RUN_DIRECTORY_FOLDERS]
    return [f"{module}:{node.lineno} {node.value!r}" for node in found]


def test_only_the_run_directory_package_spells_its_file_names():
    outside = [hit for module in MODULES if not module.startswith("primacy.rundir")
               for hit in run_directory_literals(module)]
    assert not outside, ("name these through primacy.rundir.layout.RunDir (or the kind of result):\n"
                         + "\n".join(outside))


def test_the_file_name_check_finds_a_literal(monkeypatch, tmp_path):
    """The check above can fail: a path built from a literal folder and file name is reported."""
    source = tmp_path / "fake.py"
    source.write_text('from pathlib import Path\nPath("run") / "results" / "summary.json"\n')
    monkeypatch.setitem(MODULES, "primacy.fake", source)
    assert run_directory_literals("primacy.fake") == ["primacy.fake:2 'summary.json'", "primacy.fake:2 'results'"]


# The map: each package's __init__ docstring lists its modules ("Modules:", then one indented line per module or
# subpackage: its name, two spaces, what it holds), and docs/architecture.md's map is written from those lists.
MODULE_LINE = re.compile(r"^    (\w+)  +(\S.*)$")


def module_block(init: Path) -> list[tuple[str, str]]:
    """A package's ``Modules:`` block: (name, what it holds) for each line, in its order ([] when it has none)."""
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    lines = doc.splitlines()
    if "Modules:" not in lines:
        return []
    block = []
    for line in lines[lines.index("Modules:") + 1:]:
        found = MODULE_LINE.match(line)
        if found is None:
            break
        block.append((found.group(1), found.group(2)))
    return block


def listed_modules(init: Path) -> list[str]:
    """The names a package's ``Modules:`` block lists, in its order ([] when it has none)."""
    return [name for name, _ in module_block(init)]


def package_contents(package: Path) -> set[str]:
    """A package's modules and subpackages by name (``__main__`` is the package run as a script, not a module)."""
    return ({path.stem for path in package.glob("*.py")} - {"__init__", "__main__"}
            | {path.name for path in package.iterdir() if (path / "__init__.py").is_file()})


PACKAGES = sorted(init.parent for init in PACKAGE.rglob("__init__.py"))


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: module_name(p / "__init__.py"))
def test_every_package_lists_its_modules_in_its_docstring(package):
    listed, there = listed_modules(package / "__init__.py"), package_contents(package)
    assert len(listed) == len(set(listed)), f"{package}/__init__.py lists a module twice: {listed}"
    assert set(listed) == there, (
        f"{package}/__init__.py's Modules: list differs from the folder: add "
        f"{sorted(there - set(listed))}, remove {sorted(set(listed) - there)} (one line each: name, two spaces, what "
        f"it holds)")


def test_the_module_list_check_finds_a_missing_module(tmp_path):
    """The check above can fail: a module the docstring leaves out is in the folder and not in the list."""
    (tmp_path / "__init__.py").write_text('"""A package.\n\nModules:\n    a  the first\n"""\n')
    (tmp_path / "a.py").write_text("")
    (tmp_path / "b.py").write_text("")
    assert listed_modules(tmp_path / "__init__.py") == ["a"]
    assert package_contents(tmp_path) == {"a", "b"}


def test_the_architecture_page_names_every_package():
    """docs/architecture.md's layers table names every package of primacy/ (as `primacy/<name>/`), and no other."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`primacy/(\w+)/`", page))
    packages = {path.name for path in PACKAGE.iterdir() if (path / "__init__.py").is_file()}
    assert named == packages, (f"docs/architecture.md: name {sorted(packages - named)} as `primacy/<name>/`; "
                               f"{sorted(named - packages)} are not packages")


# docs/architecture.md's map: every module and package of primacy/ under its layer, each with the line its package's
# Modules: list gives it, a package with the names of its modules. `python tests/test_layout.py` writes it from the
# lists, and the test below holds the page to them; as the lists are held to the folders above, the map names every
# module there is and no other.
ARCHITECTURE = PACKAGE.parent / "docs" / "architecture.md"
MAP_BEGIN = "<!-- the map: written from each package's Modules: list by `python tests/test_layout.py` -->"
MAP_END = "<!-- end of the map -->"


def map_item(path: Path, said: str) -> str:
    """A module's or a package's item in the map: where it is, what it holds and, for a package, its modules."""
    where = path.relative_to(PACKAGE.parent).as_posix()
    if not (path / "__init__.py").is_file():
        return f"`{where}.py` — {said}"
    inside = [f"`{name}/`" if (path / name / "__init__.py").is_file() else f"`{name}`"
              for name in listed_modules(path / "__init__.py")]
    return f"`{where}/` — {said}" + (f"; modules {', '.join(inside)}" if inside else "")


def map_items(parent: Path, top: bool = True) -> list[tuple[str, str]]:
    """(module name, item) for each module of the top level's list and each package below it, a package followed by
    its own packages."""
    items = []
    for name, said in module_block(parent / "__init__.py"):
        path = parent / name
        package = (path / "__init__.py").is_file()
        if top or package:
            items.append((module_name(path / "__init__.py" if package else path.with_suffix(".py")),
                          map_item(path, said)))
        if package:
            items += map_items(path, top=False)
    return items


def architecture_map() -> str:
    """The map: the layers bottom up, each with its modules and packages."""
    items, lines = map_items(PACKAGE), []
    for index, (name, _) in enumerate(LAYERS):
        lines.append(f"- **{name}**")
        lines += [textwrap.fill(item, 120, initial_indent="  - ", subsequent_indent="    ", break_long_words=False,
                                break_on_hyphens=False) for module, item in items if layer(module) == index]
    return "\n".join(lines)


def written_map(page: str) -> str:
    """The map a page holds, between its two markers."""
    assert page.count(MAP_BEGIN) == 1 and page.count(MAP_END) == 1, f"the page must hold {MAP_BEGIN} ... {MAP_END}"
    return page.split(MAP_BEGIN)[1].split(MAP_END)[0].strip("\n")


def with_map(page: str, text: str) -> str:
    """``page`` with ``text`` as its map."""
    written_map(page)
    before, rest = page.split(MAP_BEGIN)
    return f"{before}{MAP_BEGIN}\n{text}\n{MAP_END}{rest.split(MAP_END)[1]}"


def test_the_architecture_page_holds_the_map_the_module_lists_give():
    assert written_map(ARCHITECTURE.read_text()) == architecture_map(), (
        "docs/architecture.md's map differs from the packages' Modules: lists: run python tests/test_layout.py")


def test_the_map_check_finds_a_stale_map():
    """The check above can fail: a page's map is read between its markers, and rewriting it changes only that."""
    page = f"# A page\n{MAP_BEGIN}\n- old\n{MAP_END}\nmore\n"
    assert written_map(page) == "- old"
    assert with_map(page, "- new") == f"# A page\n{MAP_BEGIN}\n- new\n{MAP_END}\nmore\n"
    with pytest.raises(AssertionError, match="the page must hold"):
        written_map("# A page without a map\n")
    assert "`primacy/errors.py` — UsageError" in architecture_map()


# tests/ is laid out like the package: a folder of tests is named after the package of primacy/ whose tests it holds
# (tests/analysis/heads/), or after a module whose family of tests it gathers (tests/backbones/matrix_memory/); the
# top holds the tests of the top-level modules and of the whole project. pytest imports a test module by its file name
# (no __init__.py; tests/ is on the path, pyproject's pythonpath), so no two test modules share one.
TESTS = PACKAGE.parent / "tests"
NOT_TESTS = {"support", "data", "legacy", "__pycache__"}  # helpers, fixtures' files, old runs


def stray_test_folders(tests: Path, package: Path) -> list[str]:
    """The folders of ``tests`` named after no package or module of ``package``."""
    folders = [path.relative_to(tests) for path in sorted(tests.rglob("*")) if path.is_dir()]
    named = [folder for folder in folders if not NOT_TESTS & set(folder.parts)]
    return [folder.as_posix() for folder in named
            if not (package / folder / "__init__.py").is_file() and not (package / folder).with_suffix(".py").is_file()]


def test_the_tests_folders_are_named_after_the_package():
    stray = stray_test_folders(TESTS, PACKAGE)
    assert not stray, f"tests/ mirrors primacy/: these folders are no package or module of primacy/: {stray}"


def test_the_folder_check_finds_a_stray_folder(tmp_path):
    """The check above can fail: a folder of tests named after nothing in the package is reported."""
    package, tests = tmp_path / "pkg", tmp_path / "tests"
    for folder in (package / "a", tests / "a" / "b", tests / "c", tests / "support"):
        folder.mkdir(parents=True)
    (package / "a" / "__init__.py").write_text("")
    (package / "a" / "b.py").write_text("")
    assert stray_test_folders(tests, package) == ["c"]


def test_test_modules_have_names_of_their_own_and_no_package_file():
    modules = [*TESTS.rglob("test_*.py"), *PACKAGE.parent.glob("plugins/*/tests/**/test_*.py")]
    names = sorted(path.name for path in modules)
    twice = sorted({name for name in names if names.count(name) > 1})
    assert not twice, f"pytest imports test modules by file name: rename one of each {twice}"
    inits = [path for path in TESTS.rglob("__init__.py") if path.parent.name != "support"]
    assert not inits, f"tests/ holds no packages but support/: {inits}"


if __name__ == "__main__":  # write docs/architecture.md's map from the packages' Modules: lists
    ARCHITECTURE.write_text(with_map(ARCHITECTURE.read_text(), architecture_map()))
