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

"""ResExCongestionFilter through nova's own HostFilterHandler, on real nova objects."""

import logging
import sqlite3
import time

import fixtures
from nova import objects
from nova.scheduler import filters

from resex_libvirt.board import report as report_mod
from resex_nova import filter as resex_filter
from resex_nova import moves
from resex_nova import rules
from tests.unit.board import test_report
from tests.unit.nova_filter import base


class CongestionFilterTest(base.PluginTestCase):

    def setUp(self):
        super().setUp()
        self.handler = filters.HostFilterHandler()
        self.filter = resex_filter.ResExCongestionFilter()
        # CI: h1 100 % (rho .5), h2 11.1 % (rho .1), h3 20 % (observed).
        self.publish(h1=dict(link_utilisation=0.5),
                     h2=dict(link_utilisation=0.1, sensitive_vms=2),
                     h3=dict(link_utilisation=0.0, latency_inflation_pct=20.0, sensitive_vms=1))

    def passing(self, spec, hosts=("h1", "h2", "h3"), **aggregates):
        states = [base.host(h, **aggregates.get(h, {})) for h in hosts]
        return [s.host for s in self.handler.get_filtered_objects([self.filter], states, spec)]

    def test_a_sensitive_request_avoids_hosts_that_would_break_its_threshold(self):
        spec = base.request(**dict(base.SENSITIVE, **{"resex:interference_threshold_pct": "15"}))
        self.assertEqual(["h2"], self.passing(spec))
        spec = base.request(**dict(base.SENSITIVE, **{"resex:interference_threshold_pct": "20"}))
        self.assertEqual(["h2", "h3"], self.passing(spec))

    def test_without_a_flavor_threshold_the_configured_one_applies(self):
        self.assertEqual([], self.passing(base.request(**base.SENSITIVE)))  # default 10 %
        self.conf.config(congestion_threshold=50.0, group="resex")
        self.assertEqual(["h2", "h3"], self.passing(base.request(**base.SENSITIVE)))

    def test_an_aggregate_overrides_the_configured_threshold(self):
        spec = base.request(**base.SENSITIVE)
        self.assertEqual(["h1"], self.passing(
            spec, h1={"resex_congestion_threshold": "150"}))

    def test_a_flavor_threshold_is_the_sla_and_beats_the_aggregate(self):
        spec = base.request(**dict(base.SENSITIVE, **{"resex:interference_threshold_pct": "15"}))
        self.assertEqual(["h2"], self.passing(spec, h1={"resex_congestion_threshold": "150"}))

    def test_other_requests_are_untouched(self):
        self.conf.config(unknown_host_policy="fail", bulk_max_sensitive_vms=0, group="resex")
        everyone = ["h1", "h2", "h3", "unknown"]
        for spec in (base.request(), base.request(**{"hw:cpu_policy": "dedicated"}),
                     base.request(**{"resex:io_class": "normal", "resex:shares": "200"})):
            self.assertEqual(everyone, self.passing(spec, hosts=everyone))

    def test_bulk_requests_pass_everywhere_unless_a_limit_is_set(self):
        spec = base.request(**base.BULK)
        self.assertEqual(["h1", "h2", "h3"], self.passing(spec))
        self.conf.config(bulk_max_sensitive_vms=1, group="resex")
        self.assertEqual(["h1", "h3"], self.passing(spec))
        self.assertEqual(["h1"], self.passing(spec, h3={"resex_bulk_max_sensitive_vms": "0"}))

    def test_unknown_hosts_pass_only_when_no_known_good_host_is_left(self):
        spec = base.request(**dict(base.SENSITIVE, **{"resex:interference_threshold_pct": "15"}))
        with self.assertLogs(resex_filter.LOG, logging.DEBUG) as logs:
            self.assertEqual(["h2"], self.passing(spec, hosts=("h2", "unknown", "h1")))
        self.assertIn("no fresh report for host unknown", logs.output[0])
        # h1 and h3 are known-bad: the unknown host is the best left, the bad stay out.
        self.assertEqual(["unknown"], self.passing(spec, hosts=("h1", "unknown", "h3")))
        self.assertEqual([], self.passing(spec, hosts=("h1", "h3")))

    def test_unknown_hosts_follow_the_pass_and_fail_policies(self):
        spec = base.request(**dict(base.SENSITIVE, **{"resex:interference_threshold_pct": "15"}))
        self.conf.config(unknown_host_policy="pass", group="resex")
        self.assertEqual(["h2", "unknown"], self.passing(spec, hosts=("h2", "unknown")))
        self.conf.config(unknown_host_policy="fail", group="resex")
        self.assertEqual(["h2"], self.passing(spec, hosts=("h2", "unknown")))
        self.assertEqual([], self.passing(spec, hosts=("h1", "unknown")))

    def test_stale_and_corrupt_reports_count_as_unknown(self):
        self.board.publish(base.reports.make("stale", ts=time.time() - 3600))
        with sqlite3.connect(self.board.path) as conn:
            conn.execute("INSERT INTO host_report (host, ts, record) "
                         "VALUES ('corrupt', 1, '{\"ts\": NaN}')")
        self.publish()
        self.conf.config(unknown_host_policy="fail", group="resex")
        spec = base.request(**dict(base.SENSITIVE, **{"resex:interference_threshold_pct": "99"}))
        self.assertEqual([], self.passing(spec, hosts=("stale", "corrupt")))
        self.conf.config(unknown_host_policy="last", group="resex")
        self.assertEqual(["stale", "corrupt"], self.passing(spec, hosts=("stale", "corrupt")))

    def test_a_blind_report_counts_as_unknown_never_as_clean(self):
        # The agent could not see libvirt: its 0 % says nothing about the host.
        self.publish(blind={"state": "blind"})
        spec = base.request(**dict(base.SENSITIVE, **{"resex:interference_threshold_pct": "15"}))
        self.conf.config(unknown_host_policy="fail", group="resex")
        self.assertEqual(["h2"], self.passing(spec, hosts=("h2", "blind")))
        self.conf.config(unknown_host_policy="last", group="resex")
        with self.assertLogs(resex_filter.LOG, logging.DEBUG) as logs:
            self.assertEqual(["h2"], self.passing(spec, hosts=("blind", "h2")))
        self.assertIn("a blind report", "\n".join(logs.output))
        self.assertEqual(["blind"], self.passing(spec, hosts=("blind", "h1")))

    def test_invalid_resex_values_in_an_old_flavor_never_raise(self):
        spec = base.request(**{"resex:latency_sla_us": "fast", "resex:io_class": "bulk",
                               "resex:interference_threshold_pct": "-3"})
        self.conf.config(bulk_max_sensitive_vms=0, group="resex")
        self.assertEqual(["h1"], self.passing(spec))  # taken as bulk

    def test_a_flavor_with_a_limit_below_its_reservation_fails_every_host_saying_why(self):
        spec = base.request(**{"resex:cpu_reservation_pct": "200", "resex:cpu_limit_pct": "50"})
        spec.flavor.name = "m1.contradiction"
        with self.assertLogs("resex_nova.filter", logging.WARNING) as logs:
            self.assertEqual([], self.passing(spec))
        self.assertIn("flavor m1.contradiction refused", logs.output[0])
        self.assertIn("resex:cpu_limit_pct=50.0: must be >= resex:cpu_reservation_pct (200)",
                      logs.output[0])
        sensitive = base.request(**dict(base.SENSITIVE, **{"resex:cpu_reservation_pct": "200",
                                                           "resex:cpu_limit_pct": "50"}))
        with self.assertLogs("resex_nova.filter", logging.WARNING):
            self.assertEqual([], self.passing(sensitive))
        self.assertEqual(["h1", "h2", "h3"], self.passing(base.request(**{
            "resex:cpu_reservation_pct": "50", "resex:cpu_limit_pct": "50"})))

    def test_a_move_of_an_instance_with_a_contradicting_flavor_is_not_blocked(self):
        spec = base.request(**{"resex:cpu_reservation_pct": "200", "resex:cpu_limit_pct": "50"})
        spec.requested_destination = objects.Destination(cell=objects.CellMapping(
            uuid="00000000-0000-0000-0000-00000000000c", name="cell1"))
        spec.ignore_hosts = ["source"]
        with self.assertLogs("resex_nova.filter", logging.WARNING) as logs:
            self.assertEqual(["h1", "h2", "h3"], self.passing(spec))
        self.assertIn("not blocked", logs.output[0])

    def test_a_rebuild_is_never_filtered(self):
        spec = base.request(**base.SENSITIVE)
        spec.scheduler_hints = {"_nova_check_type": ["rebuild"]}
        self.assertEqual(["h1", "h2", "h3"], self.passing(spec))

    def test_a_move_is_advisory_by_default(self):
        """Without a database the kind of move is unknown: advisory, never strict."""
        spec = base.request(**base.SENSITIVE)
        spec.requested_destination = objects.Destination(cell=objects.CellMapping(
            uuid="00000000-0000-0000-0000-00000000000c", name="cell1"))
        spec.ignore_hosts = ["source"]
        self.assertEqual(["h1", "h2", "h3"], self.passing(spec))
        self.conf.config(strict_moves=["evacuate", "live_migrate"], group="resex")
        self.assertEqual(["h1", "h2", "h3"], self.passing(spec))

    def test_a_destination_the_operator_names_is_never_second_guessed(self):
        self.conf.config(strict_moves=list(moves.KINDS), group="resex")
        spec = base.request(**base.SENSITIVE)
        spec.requested_destination = objects.Destination(host="h1")
        spec.ignore_hosts = ["source"]
        self.assertEqual(["h1"], self.passing(spec, hosts=("h1",)))

    def test_a_new_instance_is_not_a_move(self):
        spec = base.request(**base.SENSITIVE)
        spec.requested_destination = objects.Destination(host="h1")
        self.assertIsNone(moves.detect(spec))
        self.assertEqual([], self.passing(spec, hosts=("h1",)))

    def test_one_tenant_reporting_9000_us_does_not_close_a_host_to_the_others(self):
        """A guest reports 9000 us against its 50 us base every epoch; its host still admits."""
        vms = [test_report.vm_epoch("liar", 10, sensitive=True, interference=17900.0),
               test_report.vm_epoch("neighbour", 10, sensitive=True, interference=1.0),
               test_report.vm_epoch("web", 50)]
        for epoch in range(5):
            summary = test_report.summary(vms, utilisation=0.03)
            self.board.publish(report_mod.HostReport.from_summary(
                "liarhost", time.time() - 5 + epoch, summary, 1e9, "x"))
        self.publish()
        spec = base.request(**base.SENSITIVE)
        self.assertEqual(["liarhost"], self.passing(spec, hosts=("liarhost", "h1")))

    def test_host_passes_agrees_with_filter_all(self):
        spec = base.request(**dict(base.SENSITIVE, **{"resex:interference_threshold_pct": "15"}))
        self.assertEqual([False, True, False],
                         [self.filter.host_passes(base.host(h), spec) for h in ("h1", "h2", "h3")])
        self.assertTrue(self.filter.host_passes(base.host("h1"), base.request()))

    def test_it_runs_once_per_request(self):
        self.assertTrue(self.filter.run_filter_once_per_request)
        self.assertFalse(self.filter.run_filter_for_index(1))


class RejectedRecordsLogTest(base.PluginTestCase):
    """Records the reader dropped are said on the filter's log, at most once an interval."""

    def setUp(self):
        super().setUp()
        self.filter = resex_filter.ResExCongestionFilter()
        self.tracker = resex_filter.RejectedRecords()
        self.useFixture(fixtures.MockPatchObject(resex_filter, "REJECTED", self.tracker))
        self.publish(h1=dict(link_utilisation=0.1))
        self.spec = base.request(**base.SENSITIVE)

    def drop(self, host, record):
        with sqlite3.connect(self.board.path) as conn:
            conn.execute("INSERT OR REPLACE INTO host_report (host, ts, record) "
                         "VALUES (?, 1, ?)", (host, record))
        self.publish()

    def filter_once(self):
        states = [base.host("h1")]
        return [s.host for s in filters.HostFilterHandler().get_filtered_objects(
            [self.filter], states, self.spec)]

    def warnings(self):
        with self.assertLogs(resex_filter.LOG, logging.DEBUG) as logs:
            resex_filter.LOG.debug("mark")
            self.filter_once()
        return [r.getMessage() for r in logs.records if r.levelno == logging.WARNING]

    def test_dropped_records_are_warned_once_with_their_reasons(self):
        self.drop("bad", '{"ts": NaN}')
        self.drop("forged", base.reports.make("h1").to_json())
        first = self.warnings()
        self.assertEqual(1, len(first))
        self.assertIn("2 record(s)", first[0])
        self.assertIn("(invalid 1, misplaced 1)", first[0])
        self.assertEqual([], self.warnings())
        # A new drop within the interval waits for the next line.
        self.drop("worse", '[]')
        self.assertEqual([], self.warnings())

    def test_after_the_interval_only_the_new_drops_are_said(self):
        self.tracker.interval = 0.0
        self.drop("bad", '{"ts": NaN}')
        self.assertEqual(1, len(self.warnings()))
        self.assertEqual([], self.warnings())
        self.drop("forged", base.reports.make("h1").to_json())
        (line,) = self.warnings()
        self.assertIn("1 record(s)", line)
        self.assertIn("(misplaced 1)", line)

    def test_a_clean_board_says_nothing(self):
        self.assertEqual([], self.warnings())


class SharedLinksTest(base.PluginTestCase):
    """``[resex] topology_file``: a host behind a congested shared link is judged by the link."""

    def setUp(self):
        super().setUp()
        self.handler = filters.HostFilterHandler()
        self.filter = resex_filter.ResExCongestionFilter()
        self.topology = self.useFixture(fixtures.TempDir()).join("topology.yaml")
        self.write("links:\n"
                   "  - name: rack1-uplink\n    capacity_gbps: 1\n    hosts: [r1a, r1b]\n"
                   "  - name: rack2-uplink\n    capacity_gbps: 1\n    hosts: [r2a, r2b]\n")
        self.conf.config(topology_file=self.topology, group="resex")
        gbit = 1e9 / 8.0
        # Every port 2-5 % busy: every host alone passes a 10 % SLA. Rack 1's two
        # 10 Gb/s ports send 0.5 + 0.5 Gb/s into its 1 Gb/s uplink: full; rack 2's
        # 1 Gb/s ports 0.02 + 0.02 into its own (4 %: 4.2 % slower).
        self.publish(**{h: dict(link_utilisation=0.05, link_capacity_bytes_per_s=10 * gbit)
                        for h in ("r1a", "r1b")},
                     **{h: dict(link_utilisation=0.02, link_capacity_bytes_per_s=1 * gbit)
                        for h in ("r2a", "r2b")},
                     alone=dict(link_utilisation=0.05, link_capacity_bytes_per_s=1 * gbit))
        rules.LINKS.__init__()

    def write(self, text):
        with open(self.topology, "w") as f:
            f.write(text)

    def passing(self, spec, hosts=("r1a", "r1b", "r2a", "r2b", "alone")):
        states = [base.host(h) for h in hosts]
        return [s.host for s in self.handler.get_filtered_objects([self.filter], states, spec)]

    def test_a_sensitive_request_avoids_the_hosts_behind_a_congested_uplink(self):
        spec = base.request(**base.SENSITIVE)
        with self.assertLogs(resex_filter.LOG, logging.DEBUG) as logs:
            self.assertEqual(["r2a", "r2b", "alone"], self.passing(spec))
        self.assertIn("host r1a fails: its shared link rack1-uplink at 100% of capacity "
                      "(2 of 2 hosts heard)", "\n".join(logs.output))
        # Without the topology every host passes: each port alone is quiet.
        self.conf.config(topology_file=None, group="resex")
        self.assertEqual(["r1a", "r1b", "r2a", "r2b", "alone"], self.passing(spec))

    def test_bulk_and_other_requests_ignore_the_links(self):
        self.assertEqual(5, len(self.passing(base.request(**base.BULK))))
        self.assertEqual(5, len(self.passing(base.request())))

    def test_a_broken_file_is_logged_and_the_last_good_one_stands(self):
        spec = base.request(**base.SENSITIVE)
        self.assertEqual(["r2a", "r2b", "alone"], self.passing(spec))
        self.write("links: [{name: x}]\n")
        with self.assertLogs("resex_nova.topology", logging.ERROR) as logs:
            self.assertEqual(["r2a", "r2b", "alone"], self.passing(spec))
        self.assertIn("link", logs.output[0])
        self.assertIn("the last good one stands", logs.output[0])
        # A broken file never read well: no shared link is known, nothing raises.
        self.conf.config(topology_file=self.topology + ".absent", group="resex")
        with self.assertLogs("resex_nova.topology", logging.ERROR):
            self.assertEqual(5, len(self.passing(spec)))
