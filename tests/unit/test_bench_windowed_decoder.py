"""The windowed_decoder benchmark's summary and the table drawn from it, on made-up samples."""

from __future__ import annotations

import pytest

from benchmarks.windowed_decoder import body, summarise


def sample(alone_st: float | None, window_st: float, same_st: float | None, burst: float) -> dict:
    window = {"lsd_db": 6.0, "lsd_whole_db": 5.0, "cut_st": window_st, "cut_st_same_frames": same_st,
              "click_db": -50.0, "burst_db": burst}
    return {"alone": {"cut_st": alone_st, "click_db": -60.0}, "window_8": window,
            "first_call_s": {"alone": 1.0, "window_8": 0.8}, "first_call_wall_s": {"alone": 2.0, "window_8": 1.6}}


def test_the_summary_takes_the_pitch_at_the_cut_per_way_of_cutting():
    s = summarise([sample(-4.0, 0.2, 0.1, 0.5), sample(None, -0.4, None, 0.9), sample(-2.0, 0.0, -0.3, -1.0)], (8,))
    assert s["alone"]["cut_st_mean"] == 3.0 and s["alone"]["cut_st_worst"] == 4.0
    assert s["alone"]["cut_st_signed_mean"] == -3.0 and "lsd_db" not in s["alone"]
    w = s["window_8"]
    assert w["cut_st_mean"] == pytest.approx(0.2) and w["cut_st_worst"] == 0.4
    assert w["cut_st_same_frames_mean"] == pytest.approx(0.2) and w["cut_st_same_frames_worst"] == 0.3
    assert w["burst_db_worst"] == 0.9 and w["lsd_db"] == 6.0 and w["first_call_s"] == 0.8
    table = body({"summary": s})
    assert "| fragment alone (today) | — | — | -3.0 (3.0 / 4.0) |" in table
    assert "| windowed, context 8 frames | 6.000 | 5.000 | -0.07 (0.2 / 0.4) | 0.2 / 0.3 |" in table
