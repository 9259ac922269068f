"""ResExCongestionFilter through nova's own HostFilterHandler, on real nova objects."""

import logging
import sqlite3
import time

from nova.scheduler import filters

from nova_filter import filter as resex_filter
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

    def test_unknown_hosts_follow_the_configured_policy_with_a_debug_line(self):
        spec = base.request(**dict(base.SENSITIVE, **{"resex:interference_threshold_pct": "15"}))
        with self.assertLogs(resex_filter.LOG, logging.DEBUG) as logs:
            self.assertEqual(["h2", "unknown"], self.passing(spec, hosts=("h2", "unknown")))
        self.assertIn("no fresh report for host unknown", logs.output[0])
        self.conf.config(unknown_host_policy="fail", group="resex")
        self.assertEqual(["h2"], self.passing(spec, hosts=("h2", "unknown")))

    def test_stale_and_corrupt_reports_count_as_unknown(self):
        self.board.publish(base.reports.make("stale", ts=time.time() - 3600))
        with sqlite3.connect(self.board.path) as conn:
            conn.execute("INSERT INTO host_report VALUES ('corrupt', 1, '{\"ts\": NaN}')")
        self.publish()
        self.conf.config(unknown_host_policy="fail", group="resex")
        spec = base.request(**dict(base.SENSITIVE, **{"resex:interference_threshold_pct": "99"}))
        self.assertEqual([], self.passing(spec, hosts=("stale", "corrupt")))
        self.conf.config(unknown_host_policy="pass", group="resex")
        self.assertEqual(["stale", "corrupt"], self.passing(spec, hosts=("stale", "corrupt")))

    def test_invalid_resex_values_in_an_old_flavor_never_raise(self):
        spec = base.request(**{"resex:latency_sla_us": "fast", "resex:io_class": "bulk",
                               "resex:interference_threshold_pct": "-3"})
        self.conf.config(bulk_max_sensitive_vms=0, group="resex")
        self.assertEqual(["h1"], self.passing(spec))  # taken as bulk

    def test_a_rebuild_is_never_filtered(self):
        spec = base.request(**base.SENSITIVE)
        spec.scheduler_hints = {"_nova_check_type": ["rebuild"]}
        self.assertEqual(["h1", "h2", "h3"], self.passing(spec))

    def test_host_passes_agrees_with_filter_all(self):
        spec = base.request(**dict(base.SENSITIVE, **{"resex:interference_threshold_pct": "15"}))
        self.assertEqual([False, True, False],
                         [self.filter.host_passes(base.host(h), spec) for h in ("h1", "h2", "h3")])
        self.assertTrue(self.filter.host_passes(base.host("h1"), base.request()))

    def test_it_runs_once_per_request(self):
        self.assertTrue(self.filter.run_filter_once_per_request)
        self.assertFalse(self.filter.run_filter_for_index(1))
