"""Every run config in configs/ resolves (``primacy fit --config FILE --print_config``) to the text saved under
tests/data/resolved_configs/: rewriting a config over shared parts must not change a single resolved setting.

The saved texts are the resolved configs of commit c722d6a, before any config was rewritten. A config added later gets
its saved text by ``python tests/test_config_parts.py configs/NEW.yaml``; a change meant to alter resolved configs
(a new constructor parameter, a Lightning upgrade) rewrites them all by ``python tests/test_config_parts.py``, and the
diff of tests/data/resolved_configs/ shows what changed."""

import contextlib
import difflib
import io
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs"
RESOLVED = ROOT / "tests" / "data" / "resolved_configs"
PARTS = CONFIGS / "parts"  # pieces of runs, not runs


def run_configs() -> list[str]:
    """Every run config, relative to configs/; not the atlas files (tables of rows over configs/atlas/tasks/)."""
    return sorted(p.relative_to(CONFIGS).as_posix() for p in CONFIGS.rglob("*.yaml")
                  if p.parent != CONFIGS / "atlas" and PARTS not in p.parents)


def resolve(config: str) -> str:
    """What ``primacy fit --config configs/CONFIG --print_config`` prints, less its first line (Lightning's version)."""
    from primacy.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as ended:
        main(["fit", "--config", str(CONFIGS / config), "--print_config"])
    assert ended.value.code in (0, None), f"{config}: --print_config failed"
    header, _, text = out.getvalue().partition("\n")
    assert header.startswith("# lightning"), header
    return text


def saved(config: str) -> Path:
    return RESOLVED / config


# Resolving a config takes 0.4-0.95 s in-process on 2 cores busy with training runs (the first test also pays the
# imports), all 90 took 67 s: the default run resolves one config of each folder (3 s); `-m slow` resolves them all.
SAMPLE = ["quickstart.yaml", "cpu/fig3a-s4-legs-L32.yaml", "paper/fig3a-s4-legs-L128.yaml",
          "atlas/tasks/verification-cpu.yaml"]


def check_unchanged(config: str) -> None:
    expected = saved(config)
    assert expected.is_file(), (f"configs/{config} has no saved resolved form: write it with "
                                f"python tests/test_config_parts.py configs/{config}")
    got, want = resolve(config), expected.read_text()
    diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), str(expected), config))
    assert got == want, f"configs/{config} resolves differently than it did:\n{diff}"


def test_every_saved_form_has_its_config():
    """A config renamed or removed leaves no stale saved form (and the sample names existing configs)."""
    configs = set(run_configs())
    assert {p.relative_to(RESOLVED).as_posix() for p in RESOLVED.rglob("*.yaml")} <= configs
    assert set(SAMPLE) <= configs


@pytest.mark.parametrize("config", SAMPLE)
def test_config_resolves_as_saved(config):
    check_unchanged(config)


@pytest.mark.slow
@pytest.mark.parametrize("config", sorted(set(run_configs()) - set(SAMPLE)))
def test_every_config_resolves_as_saved(config):
    check_unchanged(config)


def write(configs: list[str]) -> None:
    for config in configs:
        path = saved(config)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(resolve(config))
        print(path.relative_to(ROOT))


if __name__ == "__main__":
    given = [Path(arg).resolve().relative_to(CONFIGS).as_posix() for arg in sys.argv[1:]]
    write(given or run_configs())
