"""Findings as assertions: every claim the docs make of the committed results holds, a claim that stops holding fails
with its value, SE and n, and the one rule for words (``primacy.analysis.evidence``) is the one the claims use."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from primacy.analysis.evidence import Estimate, compare, word
from primacy.cli.main import main
from primacy.errors import UsageError
from primacy.workflows import claims

ROOT = Path(__file__).resolve().parents[2]
RETNET = ROOT / "results" / "atlas-mqar-cpu" / "RetNet" / "d_key=8"  # early − late −0.107 ± 0.013 over 3 seeds


def test_every_claim_of_the_docs_holds_on_the_committed_results():
    files = claims.find(ROOT)
    assert len(files) >= 3  # the three atlases at least
    outcomes = list(claims.check_all(files, ROOT))
    assert len(outcomes) > 200
    failed = claims.failures(outcomes)
    assert not failed, "\n".join(outcome.line() for outcome in failed)


@pytest.mark.parametrize(("mean", "se", "expected"), [
    (0.2, 0.1, "positive"),  # exactly 2 SE: named
    (-0.2, 0.1, "negative"),
    (0.199, 0.1, "neither"),  # just under 2 SE: not
    (0.0, 0.0, "neither"),  # three seeds at the ceiling: no effect, though SE is 0
    (0.001, 0.0, "positive"),
    (0.5, None, None),  # one run: no SE, nothing may be said
    (math.nan, 0.1, None),
])
def test_the_rule_for_words(mean, se, expected):
    assert word(Estimate(mean, se, 3 if se is not None else 1)) == expected


def test_a_comparison_is_the_rule_on_the_difference_with_the_ses_in_quadrature():
    first, second = Estimate(0.31, 0.03, 3), Estimate(0.20, 0.04, 3)  # difference 0.11 ± 0.05: 2.2 SE
    assert first.minus(second).se == pytest.approx(0.05)
    assert compare(first, second) == "positive" and compare(second, first) == "negative"
    assert compare(first, Estimate(0.23, 0.04, 3)) == "neither"  # 1.6 SE
    assert Estimate.of([1.0, 2.0, 3.0]) == Estimate(2.0, 1 / math.sqrt(3), 3)


def _claims_file(tmp_path: Path, claim: str, doc: str = "RetNet keeps the last pairs (−0.107 ± 0.013)") -> Path:
    (tmp_path / "docs").mkdir(exist_ok=True)
    (tmp_path / "docs" / "page.md").write_text(f"Some text.\n{doc}\nMore text.\n")
    folder = tmp_path / "results" / "study"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "claims.yaml"
    path.write_text(f"doc: docs/page.md\nclaims:\n  - {{{claim}}}\n")
    return path


RETNET_CLAIM = (f"says: 'RetNet keeps the last pairs (−0.107 ± 0.013)', of: '{RETNET}/seed*', key: early_minus_late, "
                "value: '−0.107 ± 0.013', is: ")


def test_a_claim_that_holds(tmp_path):
    path = _claims_file(tmp_path, RETNET_CLAIM + "negative")
    [outcome] = claims.check(path, tmp_path)
    assert outcome.failure is None and "−0.1074 ± 0.01334 (n = 3)" in outcome.line().replace("-", "−")


def test_a_flipped_claim_fails_with_its_value_se_and_n(tmp_path, capsys):
    path = _claims_file(tmp_path, RETNET_CLAIM + "positive")
    [outcome] = claims.check(path, tmp_path)
    assert outcome.failure is not None
    line = outcome.line()
    assert line.startswith("FAIL") and "-0.1074" in line and "0.01334" in line and "n = 3" in line
    assert "negative, not positive" in line
    with pytest.raises(SystemExit) as stop:  # the command says so and exits 1
        main(["claims", str(path), "--root", str(tmp_path)])
    assert stop.value.code == 1
    out = capsys.readouterr().out
    assert "0 of 1 claims hold" in out and "FAIL" in out


@pytest.mark.parametrize(("change", "reason"), [
    ("neither", "negative, not neither"),
    ("above, than: ['" + str(RETNET.parent / "d_key=16") + "/seed*']", "not above"),
])
def test_each_kind_of_claim_fails_when_the_runs_disagree(tmp_path, change, reason):
    [outcome] = claims.check(_claims_file(tmp_path, RETNET_CLAIM + change), tmp_path)
    assert outcome.failure is not None and reason in outcome.line()


def test_a_number_written_otherwise_than_the_runs_give_fails(tmp_path):
    path = _claims_file(tmp_path, RETNET_CLAIM.replace("−0.107", "−0.117") + "negative",
                        doc="RetNet keeps the last pairs (−0.117 ± 0.013)")
    [outcome] = claims.check(path, tmp_path)
    assert "the sentence writes −0.117, the runs give -0.107422" in outcome.failure


def test_a_sentence_the_doc_no_longer_has_fails(tmp_path):
    path = _claims_file(tmp_path, RETNET_CLAIM + "negative", doc="RetNet keeps the first pairs")
    [outcome] = claims.check(path, tmp_path)
    assert "the doc no longer says this" in outcome.failure


def test_a_generated_table_the_doc_does_not_hold_as_written_fails(tmp_path):
    path = _claims_file(tmp_path, RETNET_CLAIM + "negative")
    (path.parent / "table.md").write_text("| a | b |\n|---|---|\n| 1 | 2 |\n")
    path.write_text("tables: [table.md]\n" + path.read_text())
    outcomes = claims.check(path, tmp_path)
    assert "does not hold it as written" in outcomes[0].failure
    (tmp_path / "docs" / "page.md").write_text((tmp_path / "docs" / "page.md").read_text() + "| a | b |\n|---|---|\n"
                                               "| 1 | 2 |\n")
    assert not claims.failures(claims.check(path, tmp_path))
    (tmp_path / "docs" / "other.md").write_text("| a | b |\n|---|---|\n| 1 | 3 |\n")
    path.write_text(path.read_text().replace("tables: [table.md]", "tables: [{file: table.md, doc: docs/other.md}]"))
    assert "docs/other.md does not hold it as written" in claims.check(path, tmp_path)[0].failure
    path.write_text(path.read_text().replace("{file: table.md, doc: docs/other.md}", "{file: table.md}"))
    with pytest.raises(UsageError, match="tables entry .* must be a file name or"):
        claims.check(path, tmp_path)


def test_sums_and_ranges_of_wall_time_read_each_runs_state(tmp_path):
    seconds = [4.0 * 60, 5.0 * 60, 9.0 * 60]
    for seed, value in enumerate(seconds):
        logs = tmp_path / "results" / "study" / f"seed{seed}" / "logs"
        logs.mkdir(parents=True)
        (logs / "state.json").write_text(f'{{"state": "exited", "exit_code": 0, "seconds": {value}}}')
    path = _claims_file(tmp_path, "says: 'took 4 to 9 min, 18 min in all', of: 'seed*', key: seconds, "
                                  "file: logs/state.json, unit: min, stat: range, is: value, value: '4 to 9'",
                        doc="took 4 to 9 min, 18 min in all")
    assert not claims.failures(claims.check(path, tmp_path))
    path.write_text(path.read_text().replace("stat: range", "stat: sum").replace("'4 to 9'", "'18'"))
    assert not claims.failures(claims.check(path, tmp_path))
    (tmp_path / "docs" / "page.md").write_text("took 4 to 9 min, 19 min in all")
    path.write_text(path.read_text().replace("18", "19"))
    assert "the sentence writes 19, the runs give 18" in claims.check(path, tmp_path)[0].failure


def test_a_rate_written_as_a_percentage(tmp_path):
    for seed, rate in enumerate((0.07, 0.09)):
        (tmp_path / "results" / "study" / f"seed{seed}" / "results").mkdir(parents=True)
        (tmp_path / "results" / "study" / f"seed{seed}" / "results" / "summary.json").write_text(
            f'{{"intrusion_rate": {rate}}}')
    path = _claims_file(tmp_path, "says: 'intrusions 8 %', of: 'seed*', key: intrusion_rate, unit: '%', is: value, "
                                  "value: '8'", doc="intrusions 8 %")
    assert not claims.failures(claims.check(path, tmp_path))
    path.write_text(path.read_text().replace("unit: '%', ", ""))
    assert "the sentence writes 8, the runs give 0.08" in claims.check(path, tmp_path)[0].failure


@pytest.mark.parametrize(("claim", "message"), [
    ("says: x, of: 'seed*', key: k", "claim 1: missing is"),
    ("says: x, of: 'seed*', key: k, is: big", "is='big' is not one of positive, negative, neither"),
    ("says: x, of: 'seed*', key: k, is: positive, colour: red", "unknown colour"),
    ("says: x, of: 'seed*', key: k, is: above", "is='above' needs than"),
    ("says: x, of: 'seed*', key: k, is: positive, stat: sum", "it takes is: value"),
    ("says: x, of: 'seed*', key: k, is: value, value: 0.970", "value=0.97 must be quoted as the doc writes it"),
    ("says: x, of: 'nothing*', key: k, is: positive", "of='nothing*' matches no run folder"),
    (f"says: x, of: '{RETNET}/seed*', key: no_such_key, is: positive", "key='no_such_key' is not in"),
    ("says: x, of: 'seed*', key: k, is: value, within: [0, 1]", "within=[0, 1] takes stat: count"),
    ("says: x, of: 'seed*', key: k, is: value, stat: count", "stat='count' needs within: [low, high]"),
    ("says: x, of: 'seed*', key: k, is: value, stat: count, within: [1]", "within=[1] must be [low, high] (numbers, "
                                                                          "low <= high), a list of them, or a mapping"),
    ("says: x, of: 'seed*', key: k, is: value, stat: count, within: [1, 0]", "within=[1, 0] must be [low, high]"),
    ("says: x, of: 'seed*', key: k, is: value, stat: count, within: [[0, 1], a]", "within=[[0, 1], 'a'] must be"),
    ("says: x, of: 'seed*', key: k, is: value, stat: count, within: {j: [0, 1]}", "that names key 'k'"),
    ("says: x, of: 'seed*', key: k, is: positive, stat: median", "it takes is: value"),
])
def test_a_malformed_claim_is_refused_in_one_line_naming_the_file_and_claim(tmp_path, claim, message):
    path = _claims_file(tmp_path, claim)
    with pytest.raises(UsageError, match="claim 1") as error:
        claims.check(path, tmp_path)
    assert message in str(error.value) and str(path) in str(error.value) and "\n" not in str(error.value)


def test_a_claims_file_that_is_not_yaml_or_no_claims_is_refused(tmp_path):
    path = tmp_path / "claims.yaml"
    path.write_text("doc: [unclosed\n")
    with pytest.raises(UsageError, match=r"cannot be read: .*\(line 2, column 1\)"):
        claims.check(path, tmp_path)
    path.write_text("doc: docs/page.md\n")
    with pytest.raises(UsageError, match="needs doc: .* and claims: "):
        claims.check(path, tmp_path)
    with pytest.raises(UsageError, match="has no results/\\*\\*/claims.yaml"):
        claims.find(tmp_path)


def test_a_claim_reads_the_rows_of_a_table_that_holds_its_own_mean_se_and_count(tmp_path):
    """People's curves come aggregated (curves.csv: mean, SE and members by position): a row names them."""
    folder = tmp_path / "results" / "study" / "people"
    folder.mkdir(parents=True)
    (folder / "curves.csv").write_text("group,curve,x,mean,se,members\n" + "".join(
        f"people,spc,{x},{mean},0.01,40\n" for x, mean in ((1, 0.56), (2, 0.45), (3, 0.42), (4, 0.96))))
    table = "file: curves.csv, key: mean, of: people"
    doc = "first 0.56, middle 0.42–0.45, last 0.96 and far above the middle"
    path = _claims_file(tmp_path, f"says: '{doc}', {table}, where: {{curve: spc, x: 1}}, is: value, value: '0.56'",
                        doc=doc)
    assert not claims.failures(claims.check(path, tmp_path))
    path.write_text(path.read_text().replace("x: 1}, is: value, value: '0.56'",
                                             "x: [2, 3]}, stat: range, is: value, value: '0.42–0.45'"))
    assert not claims.failures(claims.check(path, tmp_path))
    last_above_middle = (f"says: '{doc}', {table}, where: {{x: 4}}, se: se, count: members, is: above, "
                         "than: [{of: people, where: {x: 2}}]")
    path.write_text(path.read_text().split("claims:")[0] + f"claims:\n  - {{{last_above_middle}}}\n")
    [outcome] = claims.check(path, tmp_path)
    assert outcome.failure is None and "+0.96 ± 0.01 (n = 40)" in outcome.line()
    path.write_text(path.read_text().replace("x: 4}", "x: 9}"))
    with pytest.raises(UsageError, match=r"no row of curves.csv in 'people' has \{'x': \('9',\)\}"):
        claims.check(path, tmp_path)


def test_a_star_in_the_key_takes_every_entry_of_a_list(tmp_path):
    """A published model's heads come as a list in one summary: ``top.*.beta`` is each head's, for a range or a mean."""
    folder = tmp_path / "results" / "study" / "model"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text('{"top": [{"beta": 0.6}, {"beta": 0.7}, {"beta": 0.65}], "share": 0.5}')
    doc = "the top heads' beta is 0.6-0.7"
    path = _claims_file(tmp_path, f"says: \"{doc}\", of: model, file: summary.json, key: top.*.beta, stat: range, "
                                  "is: value, value: '0.6-0.7', n: 3", doc=doc)
    assert not claims.failures(claims.check(path, tmp_path))
    path.write_text(path.read_text().replace("top.*.beta", "share.*"))
    with pytest.raises(UsageError, match=r"key='share.\*': share of summary.json is not a list of entries"):
        claims.check(path, tmp_path)


def test_a_key_that_is_a_column_name_with_a_dot_is_that_column(tmp_path):
    """A page's table names the share of channels at or below 0.03 ``dt_final_below_0.03``: the whole name is the
    column, not a path into it."""
    folder = tmp_path / "results" / "study"
    folder.mkdir(parents=True)
    (folder / "page.csv").write_text("panel,dt_final_below_0.03\nA,0.7656\nB,0.7865\n")
    doc = "77-79 % of channels"
    path = _claims_file(tmp_path, f"says: \"{doc}\", of: '.', file: page.csv, key: dt_final_below_0.03, unit: '%', "
                                  "stat: range, is: value, value: '77-79', n: 2", doc=doc)
    assert not claims.failures(claims.check(path, tmp_path))


def test_a_name_with_dots_inside_a_key_is_that_name(tmp_path):
    """A page's groups are labelled ``ZOH-0.3-1``: ``grid.ZOH-0.3-1.members_better`` reaches that group's entry; a name
    no mapping holds is refused in one line."""
    folder = tmp_path / "results" / "study" / "humans"
    folder.mkdir(parents=True)
    (folder / "summary.json").write_text('{"grid": {"ZOH-0.3-1": {"members_better": 3}, "e5": {"members_better": 10}}}')
    doc = "better in 3 of 3"
    path = _claims_file(tmp_path, f"says: \"{doc}\", of: humans, file: summary.json, "
                                  "key: grid.ZOH-0.3-1.members_better, is: value, value: '3'", doc=doc)
    assert not claims.failures(claims.check(path, tmp_path))
    path.write_text(path.read_text().replace("ZOH-0.3-1.members", "ZOH-0.1-0.3.members"))
    with pytest.raises(UsageError, match=r"key='grid.ZOH-0.1-0.3.members_better' is not in summary.json"):
        claims.check(path, tmp_path)


def test_minus_makes_each_value_a_paired_difference(tmp_path):
    """An ablation's cost, seed by seed: the intact score less the ablated one, then mean ± SE over the seeds."""
    for seed, (intact, ablated) in enumerate([(-4.0, -2.5), (-3.8, -2.4), (-3.9, -2.2)]):
        folder = tmp_path / "results" / "study" / f"seed{seed}"
        folder.mkdir(parents=True)
        (folder / "ablation.json").write_text(f'{{"intact": {intact}, "ablated": {ablated}}}')
    doc = "ablating costs 1.53 ± 0.09 units"  # differences 1.5, 1.4, 1.7
    path = _claims_file(tmp_path, f"says: \"{doc}\", of: 'seed*', file: ablation.json, key: ablated, "
                                  "minus: {key: intact}, is: value, value: '1.53 ± 0.09', n: 3", doc=doc)
    assert not claims.failures(claims.check(path, tmp_path))
    path.write_text(path.read_text().replace("minus: {key: intact}", "minus: {of: 'seed[01]', key: intact}"))
    with pytest.raises(UsageError, match=r"minus='seed\[01\]' \(key 'intact'\) gives 2 values and the claim 3"):
        claims.check(path, tmp_path)
    path.write_text(path.read_text().replace("'seed[01]'", "seed0").replace("1.53 ± 0.09", "1.63 ± 0.09"))
    path.parent.parent.parent.joinpath("docs", "page.md").write_text("ablating costs 1.63 ± 0.09 units")
    assert not claims.failures(claims.check(path, tmp_path))  # seed 0's -4.0 taken from each: 1.5, 1.6, 1.8


def test_a_file_glob_reads_each_file_it_finds(tmp_path):
    """A group's fits come one file a member (fits/S4D/seed0.json, ...): ``file: seed*.json`` reads every one."""
    folder = tmp_path / "results" / "study" / "fits" / "S4D"
    folder.mkdir(parents=True)
    for seed, seconds in enumerate((19.4, 26.0, 110.3)):
        (folder / f"seed{seed}.json").write_text(f'{{"fit": {{"seconds": {seconds}}}}}')
    doc = "a seed's fit took 19-110 s"
    path = _claims_file(tmp_path, f"says: \"{doc}\", of: 'fits/*', file: 'seed*.json', key: fit.seconds, "
                                  "stat: range, is: value, value: '19-110', n: 3", doc=doc)
    assert not claims.failures(claims.check(path, tmp_path))
    path.write_text(path.read_text().replace("seed*.json", "person*.json"))
    with pytest.raises(UsageError, match=r"file='person\*.json' matches no file in .*S4D"):
        claims.check(path, tmp_path)


def _fits(tmp_path: Path) -> Path:
    """A fits.csv of five people and a model, as ``primacy humans --fit`` writes it."""
    folder = tmp_path / "results" / "study"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fits.csv").write_text("group,participant,T,B_start\n" + "".join(
        f"people,{i},{t},{b}\n" for i, (t, b) in enumerate([(0.01, 0.0), (0.0105, 0.5), (0.3, 0.9995), (0.01, 0.2),
                                                              (0.9, 1.0)])) + "S4D,0,0.01,0.0\n")
    return folder


def test_a_count_of_the_values_in_an_interval_or_in_any_of_several(tmp_path):
    """\"3 of 5 at T = 0.01\": the rows ``where`` selects whose value is within 0.001 of a bound; at 0 or 1 is two."""
    _fits(tmp_path)
    doc = "people at the bound T = 0.01: 3 of 5; B_start at 0 or 1 for 3 of 5"
    bound = (f"says: '{doc}', of: '.', file: fits.csv, where: {{group: people}}, key: T, stat: count, "
             "within: [0.01, 0.011], is: value, value: '3 of 5', n: 5")
    path = _claims_file(tmp_path, bound, doc=doc)
    [outcome] = claims.check(path, tmp_path)
    assert outcome.failure is None and "count 3 of 5" in outcome.line()
    path.write_text(path.read_text().replace("key: T", "key: B_start").replace("[0.01, 0.011]",
                                                                               "[[0, 0.001], [0.999, 1]]"))
    assert not claims.failures(claims.check(path, tmp_path))
    path.write_text(path.read_text().replace("[[0, 0.001], [0.999, 1]]", "[0, 0.001]"))  # at 0 only: 1, not 3
    assert "the sentence writes 3, the runs give 1" in claims.check(path, tmp_path)[0].failure
    path.write_text(path.read_text().replace("n: 5", "n: 6").replace("{group: people}", "{group: [people, S4D]}"))
    assert "the sentence writes 3, the runs give 2" in claims.check(path, tmp_path)[0].failure  # S4D's row: 6 rows
    path.write_text(path.read_text().replace("n: 6", "n: 40"))
    assert "n=40 expected, 6 found" in claims.check(path, tmp_path)[0].failure


def test_a_count_of_the_records_in_which_every_named_key_falls_in_its_own_intervals(tmp_path):
    """\"2 of 5 people at T = 0.01 with B_start below 0.5\": a mapping of keys counts the rows meeting all of them."""
    _fits(tmp_path)
    doc = "2 of 5 people at T = 0.01 with B_start below 0.5"
    path = _claims_file(tmp_path, f"says: '{doc}', of: '.', file: fits.csv, where: {{group: people}}, key: T, "
                                  "stat: count, within: {T: [0.01, 0.011], B_start: [-.inf, 0.4]}, is: value, "
                                  "value: '2', n: 5", doc=doc)
    [outcome] = claims.check(path, tmp_path)
    assert outcome.failure is None and "count 2 of 5" in outcome.line()
    path.write_text(path.read_text().replace("[-.inf, 0.4]", "[-.inf, 0.6]"))  # people 0, 1 and 3
    assert "the sentence writes 2, the runs give 3" in claims.check(path, tmp_path)[0].failure


def test_a_median_is_the_middle_value_not_the_mean(tmp_path):
    _fits(tmp_path)
    doc = "the median T of people is 0.0105"
    path = _claims_file(tmp_path, f"says: '{doc}', of: '.', file: fits.csv, where: {{group: people}}, key: T, "
                                  "stat: median, is: value, value: '0.0105', n: 5", doc=doc)
    [outcome] = claims.check(path, tmp_path)
    assert outcome.failure is None and "median 0.0105" in outcome.line()
    path.write_text(path.read_text().replace("stat: median, ", ""))  # the mean is 0.2461
    assert "the sentence writes 0.0105, the runs give 0.2461" in claims.check(path, tmp_path)[0].failure


def test_an_npz_key_names_an_array_and_gives_each_element_of_what_it_reaches(tmp_path):
    """dt_history.npz (steps × channels): ``dt.-1`` the last step's channels, ``dt.0:2`` the mean of steps 0-1, ``dt``
    every element; each stat works on them."""
    for seed, scale in enumerate((1.0, 2.0)):
        folder = tmp_path / "results" / "study" / f"seed{seed}" / "results"
        folder.mkdir(parents=True)
        dt = scale * np.array([[0.010, 0.020, 0.030], [0.008, 0.016, 0.030], [0.006, 0.012, 0.030]])
        np.savez(folder / "dt_history.npz", steps=np.array([0, 100, 200]), dt=dt, layers=np.array(["ssm"]))

    def check(key: str, stat: str, value: str, n: int, within: str = "") -> list[claims.Outcome]:
        doc = f"Δt of the runs: {value}"
        path = _claims_file(tmp_path, f"says: '{doc}', of: 'seed*', file: results/dt_history.npz, key: {key}, "
                                      f"stat: {stat}{within}, is: value, value: '{value}', n: {n}", doc=doc)
        return claims.check(path, tmp_path)

    # the last step: seed 0 0.006, 0.012, 0.030; seed 1 0.012, 0.024, 0.060
    [outcome] = check("dt.-1", "median", "0.018", 6)
    assert outcome.failure is None and "median 0.018" in outcome.line()
    assert not claims.failures(check("dt.0:2.0", "range", "0.009-0.018", 2))  # the first channel over steps 0-1
    assert not claims.failures(check("dt.-1.2", "mean", "0.045", 2))
    assert not claims.failures(check("steps.-1", "max", "200", 2))
    assert not claims.failures(check("dt", "count", "4", 18, ", within: [0.025, 0.035]"))  # seed 0's 0.030 thrice,
    # seed 1's 0.032
    assert "the sentence writes 0.019, the runs give 0.018" in check("dt.-1", "median", "0.019", 6)[0].failure
    for key, message in (("layers", r"key='layers' of .*dt_history.npz is an array of <U3, not of numbers"),
                         ("dt.5", r"key='dt.5' is not in .*dt_history.npz"), ("'dt.3:'", r"key='dt.3:' is not in")):
        with pytest.raises(UsageError, match=message):
            check(key, "max", "0", 2)
    (tmp_path / "results" / "study" / "seed0" / "results" / "dt_history.npz").write_text("not a zip")
    with pytest.raises(UsageError, match=r"dt_history.npz cannot be read as .npz arrays"):
        check("dt", "max", "0", 2)
