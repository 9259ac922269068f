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

"""The fleet study end to end on the small scenario: nova 34's own HostManager,
filters and weighers over real ``HostState`` and ``RequestSpec`` objects, the
host surrogate calibrated on the host simulator, reports on a real SQLite
board (and a real etcd)."""

import contextlib
import dataclasses
import io
import json

import pytest

from nova.scheduler import filters as nova_filters

from resex_libvirt.board import reader as reader_mod
from resex_nova import moves
from resex_research.cluster import demand
from resex_research.cluster import fleet
from resex_research.cluster import spec
from resex_research.cluster import study
from resex_research.cluster import surrogate as surrogate_mod
from resex_research import resex_sim
from tests.functional.board import etcd_server

SHORT_S = 4 * 3600.0


class RecordingFilter(nova_filters.BaseHostFilter):
    """A filter that passes every host and records the requests nova hands it."""

    seen = []

    def filter_all(self, filter_obj_list, spec_obj):
        RecordingFilter.seen.append(spec_obj)
        return list(filter_obj_list)

    def host_passes(self, host_state, spec_obj):
        return True


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("calibration"))


@pytest.fixture(scope="module")
def scenario():
    return spec.load("cluster_small").with_duration(SHORT_S)


@pytest.fixture(scope="module")
def studied(scenario, cache_dir):
    return study.run(scenario, cache_dir=cache_dir)


def test_the_same_seed_prints_the_same_table(scenario, cache_dir, studied):
    again = study.run(scenario, cache_dir=cache_dir)
    strip = [row[:-1] for row in study.rows(studied["results"])]   # but the wall time
    assert [row[:-1] for row in study.rows(again["results"])] == strip
    assert [r.timeline for r in again["results"]] == [r.timeline for r in studied["results"]]


def test_another_seed_gives_another_day(scenario, cache_dir, studied):
    other = study.run(scenario.with_seed(scenario.seed + 1), configurations=["a"],
                      cache_dir=cache_dir)
    assert other["requests"] != studied["requests"] or \
        other["results"][0].violation_s_total != studied["results"][0].violation_s_total


def test_each_configuration_enables_what_it_says(studied):
    by = {r.configuration: r for r in studied["results"]}
    assert by["a"].filters == ["ComputeFilter"]
    assert by["a"].weighers == ["RAMWeigher", "CPUWeigher", "DiskWeigher"]
    assert by["b"].filters == ["ComputeFilter", "IoOpsFilter"]
    assert "IoOpsWeigher" in by["b"].weighers
    for name in "ce":
        assert "ResExCongestionFilter" in by[name].filters
        assert "ResExCongestionWeigher" in by[name].weighers
        assert by[name].reads_board and by[name].publishes > 0
    for name in "abdf":
        assert not any(n.startswith("ResEx") for n in by[name].filters + by[name].weighers)
        assert not by[name].reads_board and by[name].publishes == 0
    assert [by[n].host_policy for n in "abcdef"] == ["none"] * 3 + ["io_shares"] * 2 + ["none"]
    assert "CortexLikeWeigher" in by["f"].weighers
    assert not by["f"].reads_board and by["f"].publishes == 0


def test_every_configuration_lives_through_the_host_failure(studied):
    for r in studied["results"]:
        assert r.evacuations > 0


def test_placement_and_market_cut_violations_against_nova_defaults(studied):
    by = {r.configuration: r for r in studied["results"]}
    assert by["a"].violation_s_total > 0
    assert by["e"].violation_s_total < by["a"].violation_s_total


def test_evacuation_goes_through_the_scheduler_as_nova_sends_it(scenario, cache_dir):
    config = scenario.configuration("a")
    nova = {g: dict(o) for g, o in config.nova.items()}
    here = __name__ + ".RecordingFilter"
    nova["filter_scheduler"]["available_filters"] = [
        "nova.scheduler.filters.all_filters", here]
    nova["filter_scheduler"]["enabled_filters"] = ["ComputeFilter", "RecordingFilter"]
    config = dataclasses.replace(config, nova=nova)
    sur = surrogate_mod.load_or_calibrate(scenario.model, ["none"], cache_dir=cache_dir)
    RecordingFilter.seen = []
    try:
        r = fleet.run(scenario, config, demand.generate(scenario), sur,
                      "sqlite:///unused/board.sqlite")
    finally:
        reader_mod.stop_all()
    evacuations = [s for s in RecordingFilter.seen if s.ignore_hosts]
    assert r.evacuations > 0 and len(evacuations) == r.evacuations
    failed = {h for s in evacuations for h in s.ignore_hosts}
    assert len(failed) == 1
    for s in evacuations:
        # What ConductorManager.rebuild_instance sends for an evacuation.
        assert s.requested_destination.cell.uuid
        assert not s.force_hosts and not s.force_nodes
        assert "_nova_check_type" not in s.scheduler_hints
    boots = [s for s in RecordingFilter.seen if not s.ignore_hosts]
    assert all(s.requested_destination is None for s in boots)
    # The plugin tells the evacuations from the boots (a move is advisory).
    assert all(moves.detect(s) is not None for s in evacuations)
    assert all(moves.detect(s) is None for s in boots)


@pytest.mark.skipif(not etcd_server.EtcdServer.available(), reason="no etcd binary")
def test_an_etcd_board_places_exactly_as_the_sqlite_board(scenario, cache_dir, studied):
    with etcd_server.EtcdServer() as etcd:
        short = scenario.with_duration(2 * 3600.0)
        on_etcd = study.run(short, configurations=["e"], board=etcd.url, cache_dir=cache_dir)
    on_sqlite = study.run(short, configurations=["e"], cache_dir=cache_dir)
    assert on_etcd["results"][0].publishes > 0
    assert study.rows(on_etcd["results"])[0][:-1] == study.rows(on_sqlite["results"])[0][:-1]


def test_the_cli_prints_the_table_and_the_goals(cache_dir, tmp_path):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = resex_sim.main(["cluster", "cluster_small", "--duration", "3600", "--config", "a",
                             "--config", "e", "--calibration-dir", cache_dir, "--out",
                             str(tmp_path)])
    assert rc == 0
    text = out.getvalue()
    assert "viol-s total" in text and "Goals (printed, not asserted)" in text
    data = json.loads((tmp_path / "cluster.json").read_text())
    assert [r["configuration"] for r in data["results"]] == ["a", "e"]
    assert (tmp_path / "violations.png").stat().st_size > 0
    assert (tmp_path / "inflation_cdf.png").stat().st_size > 0


def test_the_cli_refuses_an_unknown_configuration(cache_dir):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = resex_sim.main(["cluster", "cluster_small", "--config", "z",
                             "--calibration-dir", cache_dir])
    assert rc == 2 and "no configuration 'z'" in err.getvalue()


def _scheduler(randomize):
    from resex_research.cluster import scheduler as scheduler_mod
    sections = {"scheduler": {"max_placement_results": 3},
                "filter_scheduler": {"enabled_filters": ["ComputeFilter"]}}
    with scheduler_mod.nova_config(sections):
        return scheduler_mod.Scheduler(["h%d" % i for i in range(10)], 8, 8192, 100, seed=1,
                                       randomize_candidates=randomize)


def test_placement_returns_at_most_max_placement_results_candidates():
    sched = _scheduler(False)
    flavor = sched.flavor(spec.load("cluster_small").flavors[0])
    spec_obj = sched.boot_spec(flavor, "uuid-1", "p")
    assert [s.host for s in sched.candidates(spec_obj)] == ["h0", "h1", "h2"]
    sampled = _scheduler(True).candidates(spec_obj)
    assert len(sampled) == 3 and [s.host for s in sampled] != ["h0", "h1", "h2"]


def test_the_cli_prints_json_with_the_goals(cache_dir):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = resex_sim.main(["cluster", "cluster_small", "--json", "--duration", "1800",
                             "--config", "a", "--config", "e", "--calibration-dir", cache_dir])
    assert rc == 0
    data = json.loads(out.getvalue())
    assert [r["configuration"] for r in data["results"]] == ["a", "e"]
    assert {g["goal"] for g in data["goals"]} >= {"(e): failed evacuations zero"}
    assert "inflations" not in data["results"][0]
