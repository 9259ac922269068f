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

"""The host surrogate against the host simulator it is calibrated on.

Stated error, measured on fresh simulator runs with another seed (the
calibration runs are a few seconds long, so the market's dynamics make
bulk throughput under IOShares the noisiest figure):

* latency inflation of the sensitive VMs: within 10 percentage points or 35%
  of the simulator's value, whichever is larger (a bulk neighbour's
  interference varies that much from seed to seed in a 3 s run);
* SLA-violation fraction: within 0.5 (it is a fraction of one-second windows);
* bulk throughput: within 10% on uncontrolled hosts; under IOShares within
  15% of the link's capacity (about 161 MB/s): its law holds a cap anywhere
  in the hold band (victims between 0.7 and 1 of their threshold), and with
  several victims one that holds blocks the others' release, so where a 3 s
  run ends depends on where its first cuts landed (one bulk VM against four
  sensitive ones: 116, 244 and 347 MB/s over three seeds).
"""

import dataclasses

import pytest

from resex_research.cluster import spec
from resex_research.cluster import surrogate as surrogate_mod


@pytest.fixture(scope="module")
def model():
    return dataclasses.replace(spec.load("cluster_small").model,
                               sensitive_points=(0, 1, 2, 4), max_bulk=1, run_s=3.0)


@pytest.fixture(scope="module")
def surrogate(model, tmp_path_factory):
    return surrogate_mod.load_or_calibrate(model, ["none", "io_shares"],
                                           cache_dir=str(tmp_path_factory.mktemp("cal")))


@pytest.mark.parametrize("policy", ["none", "io_shares"])
def test_the_surrogate_matches_the_simulator_on_a_sample_of_mixes(model, surrogate, policy):
    # (1, 1) and (2, 1) are grid points met with another seed; (3, 0) and
    # (3, 1) are interpolated between the grid's 2 and 4 sensitive VMs.
    for row in surrogate_mod.validate(surrogate, model, policy,
                                      [(1, 1), (2, 1), (3, 0), (3, 1)], seed=7):
        sur, real = row["inflation_pct"]
        assert abs(sur - real) <= max(10.0, 0.35 * real), row
        sur, real = row["violation_fraction"]
        assert abs(sur - real) <= 0.5, row
        sur, real = row["bulk_mb_s"]
        if policy == "none":
            assert abs(sur - real) <= 0.10 * max(real, 1.0), row
        else:
            assert abs(sur - real) <= 0.15 * model.link_bytes_per_s / 1e6, row


def test_an_uncontrolled_bulk_neighbour_breaks_the_sla_and_io_shares_restores_it(surrogate):
    alone = surrogate.lookup("none", 1, 0)
    assert alone.violation_fraction == 0.0
    assert surrogate.lookup("none", 1, 1).violation_fraction > 0.5
    assert surrogate.lookup("io_shares", 1, 1).inflation_pct < \
        surrogate.lookup("none", 1, 1).inflation_pct


def test_reports_are_the_agents_and_validate(surrogate):
    from resex_libvirt.board import report
    rec = report.HostReport.from_dict(dict(surrogate.lookup("none", 1, 1).report))
    assert rec.sensitive_vms == 1 and rec.heavy_io_vms == 1
    assert rec.link_utilisation > 0.5


def test_mixes_beyond_the_grid_are_clamped_and_said_so(surrogate):
    edge = surrogate.lookup("none", 4, 1)
    beyond = surrogate.lookup("none", 9, 3)
    assert beyond.clamped and not edge.clamped
    assert beyond.inflation_pct == edge.inflation_pct


def test_interpolation_never_uses_the_host_without_sensitive_vms(surrogate):
    assert surrogate.lookup("none", 0, 1).inflation_pct == 0.0
    assert surrogate.lookup("none", 1, 1).inflation_pct > 5.0


def test_the_table_is_cached_and_reused(model, tmp_path):
    calls = []
    first = surrogate_mod.load_or_calibrate(
        dataclasses.replace(model, sensitive_points=(0, 1), max_bulk=0, run_s=1.0),
        ["none"], cache_dir=str(tmp_path), progress=calls.append)
    assert calls
    calls.clear()
    again = surrogate_mod.load_or_calibrate(
        dataclasses.replace(model, sensitive_points=(0, 1), max_bulk=0, run_s=1.0),
        ["none"], cache_dir=str(tmp_path), progress=calls.append)
    assert not calls and again.data["table"] == first.data["table"]
