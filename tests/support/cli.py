"""Commands run as a user runs them (``primacy ARGS``), their one-line refusals, and every file of a directory (to
check a refused command changed nothing)."""

import pytest

from primacy.cli import main


def run_command(*args) -> None:
    """``primacy ARGS``, each argument (a path, a number) as its text."""
    main([str(a) for a in args])


def refusal(args, capsys) -> str:
    """The one line of stderr of ``primacy ARGS``, which must exit with status 2."""
    with pytest.raises(SystemExit) as stopped:
        main(args)
    assert stopped.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def refused_in_one_line(args: list, expected: str, capsys) -> None:
    """``primacy ARGS`` exits with status 2 and one line of stderr holding ``expected``, without a traceback."""
    with pytest.raises(SystemExit) as exit_info:
        run_command(*args)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], err


def aggregate_fails(capsys, *args):
    """Run `primacy aggregate ARGS`, expect exit status 2 and return its one line of stderr."""
    with pytest.raises(SystemExit) as exit_info:
        main(["aggregate", *map(str, args)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert len(err.splitlines()) == 1 and err.startswith("primacy: error: "), err
    return err


def snapshot(directory) -> dict:
    """Every file under ``directory`` and its bytes."""
    return {p: p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}
