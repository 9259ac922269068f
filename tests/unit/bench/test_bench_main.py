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


def _fake_benchmark(monkeypatch, main):
    import types
    monkeypatch.setattr(bench_main.importlib, "import_module",
                        lambda name: types.SimpleNamespace(main=main))


def test_a_benchmark_during_which_the_project_logged_an_error_fails_the_run(
        monkeypatch, capsys):
    import logging

    def main(argv):
        print("row 1.0 us")
        logging.getLogger("resex_agent.loop").error(
            "could not build the host report of epoch %d", 3)
        return 0

    _fake_benchmark(monkeypatch, main)
    assert bench_main.main(["market"]) == 1
    err = capsys.readouterr().err
    assert "bench_market logged 1 record(s) at ERROR or above" in err
    assert "could not build the host report of epoch 3" in err


def test_warnings_a_benchmark_provokes_do_not_fail_the_run(monkeypatch):
    """The intake's bench sends claims the intake warns about, on purpose."""
    import logging

    def main(argv):
        logging.getLogger("resex_agent.intake.store").warning("VM x claims latency mean 200.0 us")
        return 0

    _fake_benchmark(monkeypatch, main)
    assert bench_main.main(["intake"]) == 0


def test_a_benchmark_that_found_it_timed_a_failure_fails_the_run(monkeypatch, capsys):
    from bench import guard

    def main(argv):
        raise guard.ErrorPath("epoch 3 at 1024 VMs built no controlling host report (None)")

    _fake_benchmark(monkeypatch, main)
    assert bench_main.main(["agent", "--vms", "8"]) == 1
    assert "built no controlling host report" in capsys.readouterr().err


def test_other_libraries_warnings_do_not_fail_the_run(monkeypatch):
    import logging

    def main(argv):
        logging.getLogger("nova.scheduler").warning("a deprecated option")
        return 0

    _fake_benchmark(monkeypatch, main)
    assert bench_main.main(["nova"]) == 0


def test_the_scheduler_benchmark_imports_nova_without_eventlets_deprecation_warning():
    """futurist (imported by nova) imports eventlet where it is installed: silenced there only."""
    import os
    import subprocess
    import sys

    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
    code = ("import sys, warnings\n"
            "import bench.bench_nova\n"
            "print('eventlet' in sys.modules,"
            " sum('Eventlet' in str(f[1] and f[1].pattern) for f in warnings.filters))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=root, timeout=300)
    assert res.returncode == 0, res.stderr
    imported, filters = res.stdout.split()
    if imported != "True":
        pytest.skip("eventlet is not installed: nothing to silence")
    assert "Eventlet is deprecated" not in res.stderr
    assert filters == "0"       # the filter did not outlive the import
