"""``python -m benchmarks --help`` says what it does in whole sentences and lists every suite."""

from __future__ import annotations

import pytest

from benchmarks.__main__ import NAMES, OWN_OPTIONS, main


def test_help_lists_every_suite_and_those_with_options_of_their_own(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0
    description = out.split("\n\n")[1]
    assert description.startswith("Run one of") and description.rstrip().endswith(".")  # not cut mid-sentence
    for name in (*NAMES, "all", *OWN_OPTIONS):
        assert f"\n  {name} " in out, name
    assert "python -m benchmarks compare --target NAME=URL" in out


def test_compare_after_other_options_is_pointed_to_its_own_help(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--quick", "compare"])
    assert done.value.code == 2 and "compare --help" in capsys.readouterr().err


def test_a_suite_of_the_model_s_own_output_says_it_takes_no_fake_runtime(capsys):
    with pytest.raises(SystemExit) as done:
        main(["quality", "--backend", "fake"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "measures the model's own output" in err
    for name in ("ttfa", "throughput", "payload", "overhead", "e2e", "agentproto", "overload", "load", "soak"):
        assert name in err.rsplit("(", 1)[1]


def test_the_soak_options_belong_to_soak(capsys):
    with pytest.raises(SystemExit) as done:
        main(["load", "--requests", "10"])
    assert done.value.code == 2 and "--requests is an option of soak" in capsys.readouterr().err
