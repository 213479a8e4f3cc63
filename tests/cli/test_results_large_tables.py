"""`retrain-ray results` prints a table of more than `RICH_ROWS` rows as plain aligned text (rich took
seconds to lay out a 1,000-run table), and a short one through rich as before."""

from __future__ import annotations

import pandas as pd

from retrain_ray.cli.results import RICH_ROWS, _print_table


def test_a_long_table_prints_one_aligned_line_per_row(capsys):
    runs = pd.DataFrame({"run": [f"c_s{i}" for i in range(RICH_ROWS + 1)], "seed": range(RICH_ROWS + 1),
                         "last": [0.123456 * i for i in range(RICH_ROWS + 1)]})
    _print_table(runs, "runs of big")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "runs of big" and lines[1].split() == ["run", "seed", "last"]
    assert len(lines) == RICH_ROWS + 3
    assert lines[-1].split() == [f"c_s{RICH_ROWS}", str(RICH_ROWS), f"{0.123456 * RICH_ROWS:.4g}"]
    seed_at = {len(line) - len(line[len(line.split()[0]):].lstrip()) for line in lines[1:]}
    assert len(seed_at) == 1  # the second column starts at one offset on every line


def test_a_short_table_still_prints_through_rich(capsys):
    _print_table(pd.DataFrame({"run": ["a_s1"], "last": [0.5]}), "runs of small")
    out = capsys.readouterr().out
    assert "runs of small" in out and ("┃" in out or "│" in out)  # rich's box drawing
