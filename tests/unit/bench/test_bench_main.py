# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations
# under the License.

"""``python -m bench NAME --flags`` hands the flags to the named benchmark."""

import pytest

from bench import __main__ as bench_main


def test_flags_after_a_name_reach_that_benchmark(capsys):
    with pytest.raises(SystemExit) as exc:
        bench_main.main(["market", "--help"])
    assert exc.value.code == 0
    assert "--intervals" in capsys.readouterr().out


def test_a_bad_flag_is_refused_by_the_benchmark_not_ignored(capsys):
    with pytest.raises(SystemExit) as exc:
        bench_main.main(["sim", "--no-such-flag"])
    assert exc.value.code == 2
    assert "--no-such-flag" in capsys.readouterr().err


def test_flags_without_a_name_are_an_error(capsys):
    assert bench_main.main(["--skip-paper"]) == 2
    assert "need a benchmark name" in capsys.readouterr().err


def test_an_unknown_benchmark_is_an_error(capsys):
    assert bench_main.main(["nosuch"]) == 2
    assert "unknown benchmark" in capsys.readouterr().err


def test_each_benchmark_runs_with_what_came_before_it_frozen(monkeypatch):
    """A benchmark's GC passes do not walk objects an earlier one left alive."""
    import gc
    import types

    seen = []

    def fake_import(name):
        return types.SimpleNamespace(main=lambda argv: seen.append(gc.get_freeze_count()) or 0)

    monkeypatch.setattr(bench_main.importlib, "import_module", fake_import)
    left_alive = [[i] for i in range(1000)]
    assert bench_main.main(["market", "nova"]) == 0
    assert len(seen) == 2 and all(n >= len(left_alive) for n in seen)
    assert gc.get_freeze_count() == 0


def test_the_epoch_row_times_a_whole_epoch_not_an_error_path(caplog):
    # The agent's epoch once raised on the bench's missing hypervisor (the
    # evidence read), so the row timed an epoch without its host report.
    from bench import bench_goals
    with caplog.at_level("WARNING"):
        assert bench_goals.epoch_us(8, repeat=1) > 0
    assert not [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]
