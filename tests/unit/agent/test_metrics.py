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

"""The Prometheus endpoint: scraped over HTTP on loopback, parsed by prometheus_client.

The agent runs the simulated paper testbed (``paper_64k_vs_2m``, as fast as
possible) for two epochs with a :class:`PrometheusMetrics` sink bound to an
ephemeral loopback port; every figure scraped is compared with what the
market itself holds.
"""

import dataclasses
import socket
import unittest
import urllib.request

from prometheus_client import parser

from resex_agent import builder
from resex_agent import loop
from resex_agent import metrics as metrics_mod
from resex_libvirt.board import report as report_mod
from resex_libvirt import exceptions
from resex_libvirt.market import policy as policy_mod
from resex_libvirt.market import records
from tests.unit.agent import conf_helpers


make_conf = conf_helpers.conf_from_text


SIM_CONF = """
[agent]
max_epochs = 2
[sim]
realtime = 0
"""


def scrape(metrics):
    host, port = metrics.address
    with urllib.request.urlopen("http://%s:%d/metrics" % (host, port), timeout=10) as resp:
        text = resp.read().decode("utf-8")
    return {fam.name: fam for fam in parser.text_string_to_metric_families(text)}


def value(families, family, sample_name=None, **labels):
    fam = families[family]
    sample_name = sample_name or family
    found = [s.value for s in fam.samples
             if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items())]
    if len(found) != 1:
        raise AssertionError("%d samples of %s%r" % (len(found), sample_name, labels))
    return found[0]


class ScrapedAgentTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        conf = make_conf(SIM_CONF)
        cls.metrics = metrics_mod.PrometheusMetrics("127.0.0.1", 0)
        cls.agent = builder.build_agent(conf, metrics=cls.metrics)
        try:
            cls.agent.run()
            cls.families = scrape(cls.metrics)
        finally:
            cls.agent.shutdown()     # closes the endpoint too

    def uuids(self):
        return {uuid: rec.info.name for uuid, rec in self.agent.vms.items()}

    def test_every_vm_has_its_cap_weight_and_rate_as_the_market_decided(self):
        self.assertEqual(2, len(self.uuids()))
        for uuid, name in self.uuids().items():
            d = self.agent.market.decision(uuid)
            self.assertAlmostEqual(d.cap_pct / 100.0,
                                   value(self.families, "resex_vm_cpu_cap_ratio",
                                         vm=name, uuid=uuid))
            self.assertEqual(d.weight, value(self.families, "resex_vm_weight", vm=name,
                                             uuid=uuid))
            self.assertAlmostEqual(d.rate, value(self.families, "resex_vm_charge_rate",
                                                 vm=name, uuid=uuid))

    def test_mtu_counter_adds_up_to_the_epochs_tallies(self):
        for uuid, name in self.uuids().items():
            sent = sum(s.vm(uuid).tx_mtus for s in self.agent.summaries)
            self.assertGreater(sent, 0)
            self.assertEqual(sent, value(self.families, "resex_vm_transmit_mtus",
                                         "resex_vm_transmit_mtus_total", vm=name, uuid=uuid))

    def test_latency_window_is_exported_in_seconds(self):
        windows = self.agent.last_windows
        self.assertTrue(windows)
        names = self.uuids()
        for uuid, w in windows.items():
            self.assertAlmostEqual(w.mean_us / 1e6, value(
                self.families, "resex_vm_latency_mean_seconds", vm=names[uuid], uuid=uuid))
            self.assertAlmostEqual(w.p99_us / 1e6, value(
                self.families, "resex_vm_latency_p99_seconds", vm=names[uuid], uuid=uuid))

    def test_host_prices_and_congestion_index_are_the_last_epochs(self):
        last = self.agent.summaries[-1]
        self.assertAlmostEqual(last.cpu_price, value(self.families, "resex_cpu_price"))
        self.assertAlmostEqual(last.io_price, value(self.families, "resex_io_price"))
        report = report_mod.HostReport.from_summary(
            "h", 1.0, last, self.agent.link().capacity_bytes_per_s, "v")
        self.assertGreater(report.congestion_index, 0.0)
        # A fraction, as every _ratio series (the board's index is a percent).
        self.assertAlmostEqual(report_mod.congestion_index(report) / 100.0,
                               value(self.families, "resex_congestion_index_ratio"))
        self.assertNotIn("resex_congestion_index", self.families)
        self.assertAlmostEqual(last.link_utilisation,
                               value(self.families, "resex_link_utilisation_ratio"))

    def test_loop_counters_count_epochs_and_intervals(self):
        self.assertEqual(2, value(self.families, "resex_epochs", "resex_epochs_total"))
        self.assertEqual(self.agent.ticks,
                         value(self.families, "resex_intervals", "resex_intervals_total"))

    def test_vm_info_says_where_the_sla_came_from(self):
        for uuid, name in self.uuids().items():
            rec = self.agent.vms[uuid]
            self.assertEqual(1, value(self.families, "resex_vm_info", vm=name, uuid=uuid,
                                      sla_source=rec.info.sla_source,
                                      io_class=rec.info.sla.io_class))

    def test_each_vm_carries_the_reason_for_its_cap(self):
        for uuid, name in self.uuids().items():
            reason = self.agent.reason(uuid)
            self.assertIn(reason, policy_mod.REASONS)
            self.assertEqual(1, value(self.families, "resex_vm_cap_reason", vm=name, uuid=uuid,
                                      reason=reason))

    def test_sensitive_vms_carry_their_sla_and_every_vm_its_cap_floor(self):
        sensitive = 0
        for uuid, name in self.uuids().items():
            info = self.agent.vms[uuid].info
            # The floor of the market's copy: under the default consent rule
            # neither VM opted in, so each is held at its limit.
            held = self.agent.market.specs[uuid].sla
            floor = max(held.effective_reservation(info.vcpus),
                        min(self.agent.market.params.min_cap_pct,
                            held.effective_limit(info.vcpus)))
            self.assertAlmostEqual(floor / 100.0, value(
                self.families, "resex_vm_cpu_cap_floor_ratio", vm=name, uuid=uuid))
            self.assertAlmostEqual(info.sla.effective_limit(info.vcpus) / 100.0, value(
                self.families, "resex_vm_cpu_cap_floor_ratio", vm=name, uuid=uuid))
            sla = [s for s in self.families["resex_vm_latency_sla_seconds"].samples
                   if s.labels["uuid"] == uuid]
            if not info.sla.sensitive:
                self.assertEqual([], sla)
                continue
            sensitive += 1
            self.assertAlmostEqual(info.sla.latency_sla_us / 1e6, sla[0].value)
            self.assertAlmostEqual(info.sla.interference_threshold_pct / 100.0, value(
                self.families, "resex_vm_interference_threshold_ratio", vm=name, uuid=uuid))
        self.assertEqual(1, sensitive)

    def test_agent_info_names_the_host_and_epoch_length_is_exported(self):
        self.assertEqual(1, value(self.families, "resex_agent_info",
                                  host=self.agent.settings.host))
        settings = self.agent.settings
        self.assertAlmostEqual(settings.interval_s * settings.intervals_per_epoch,
                               value(self.families, "resex_epoch_length_seconds"))

    def test_names_follow_prometheus_conventions(self):
        for name, fam in self.families.items():
            self.assertTrue(name.startswith("resex_"), name)
            self.assertNotIn("percent", name)
            if fam.type == "counter":
                self.assertTrue(all(s.name.endswith(("_total", "_created"))
                                    for s in fam.samples), name)
            else:
                self.assertFalse(name.endswith("_total"), name)


class OneMoreIntervalTest(unittest.TestCase):
    """A run of one epoch, then one interval driven by hand, then a scrape."""

    def setUp(self):
        super().setUp()
        self.metrics = metrics_mod.PrometheusMetrics("127.0.0.1", 0)
        self.agent = builder.build_agent(
            make_conf("[agent]\nmax_epochs = 1\n[sim]\nrealtime = 0\n"), metrics=self.metrics)
        self.addCleanup(self.agent.shutdown)     # closes the endpoint too
        self.agent.run()
        self.names = {uuid: rec.info.name for uuid, rec in self.agent.vms.items()}

    def record(self, samples, decisions):
        agent = self.agent
        return loop.IntervalRecord(samples, decisions, {}, {}, agent.settings.interval_s,
                                   agent.vms, agent.market.ledger.balance)

    def test_balance_is_what_the_ledger_holds_when_scraped(self):
        samples = {uuid: records.Sample(uuid, 0.0, 50.0, 4096, 4) for uuid in self.names}
        decisions = self.agent.market.step(samples, {})
        self.metrics.observe_interval(self.record(samples, decisions))
        families = scrape(self.metrics)
        ledger = self.agent.market.ledger
        for uuid, name in self.names.items():
            self.assertLess(ledger.balance(uuid), ledger.allocation(uuid))
            self.assertAlmostEqual(ledger.balance(uuid), value(
                families, "resex_vm_reso_balance", vm=name, uuid=uuid))
            self.assertAlmostEqual(0.5, value(families, "resex_vm_cpu_usage_ratio",
                                              vm=name, uuid=uuid))
            self.assertAlmostEqual(4 / self.agent.settings.interval_s, value(
                families, "resex_vm_transmit_mtus_per_second", vm=name, uuid=uuid))

    def test_a_vm_that_cannot_report_latency_is_named_with_its_problem(self):
        (blind, blind_name), (fine, fine_name) = sorted(self.names.items())
        rec = self.agent.vms[blind]
        rec.info = dataclasses.replace(rec.info, latency_problem="no virtio-serial controller")
        decisions = {u: self.agent.market.decision(u) for u in self.names}
        self.metrics.observe_interval(self.record({}, decisions))
        families = scrape(self.metrics)
        self.assertEqual(1, value(families, "resex_vm_latency_unreportable", vm=blind_name,
                                  uuid=blind, problem="no virtio-serial controller"))
        self.assertEqual([], [s for s in families["resex_vm_latency_unreportable"].samples
                              if s.labels["uuid"] == fine])

    def test_every_per_vm_series_carries_the_project_empty_when_unknown(self):
        (owned, owned_name), (plain, plain_name) = sorted(self.names.items())
        rec = self.agent.vms[owned]
        rec.info = dataclasses.replace(rec.info, project="8d6f2c0b9e1a4f3d",
                                       project_name="web-team",
                                       latency_problem="no virtio-serial controller")
        decisions = {u: self.agent.market.decision(u) for u in self.names}
        self.metrics.observe_interval(self.record({}, decisions))
        families = scrape(self.metrics)
        per_vm = [fam for name, fam in families.items() if name.startswith("resex_vm_")]
        self.assertGreater(len(per_vm), 5)
        for fam in per_vm:
            for s in fam.samples:
                want = "8d6f2c0b9e1a4f3d" if s.labels["uuid"] == owned else ""
                self.assertEqual(want, s.labels.get("project"), (s.name, s.labels))
        self.assertEqual(1, value(families, "resex_vm_info", vm=owned_name, uuid=owned,
                                  project="8d6f2c0b9e1a4f3d"))
        self.assertEqual(1, value(families, "resex_vm_info", vm=plain_name, uuid=plain,
                                  project=""))
        self.assertEqual(1, value(families, "resex_vm_latency_unreportable", uuid=owned,
                                  project="8d6f2c0b9e1a4f3d"))

    def test_what_each_vm_sent_is_the_controllers_run_tally(self):
        families = scrape(self.metrics)
        uuids, mtus, sent = self.agent.controller.sent()
        for uuid, name in self.names.items():
            k = uuids.index(uuid)
            self.assertGreater(mtus[k], 0)
            self.assertEqual(mtus[k], value(families, "resex_vm_transmit_mtus",
                                            "resex_vm_transmit_mtus_total",
                                            vm=name, uuid=uuid))
            self.assertEqual(sent[k], value(families, "resex_vm_transmit_bytes",
                                            "resex_vm_transmit_bytes_total",
                                            vm=name, uuid=uuid))

    def test_a_vm_that_left_disappears_from_the_endpoint(self):
        (gone, gone_name), (kept, kept_name) = sorted(self.names.items())
        decisions = {kept: self.agent.market.decision(kept)}
        self.metrics.observe_interval(self.record({}, decisions))
        families = scrape(self.metrics)
        for family in ("resex_vm_cpu_cap_ratio", "resex_vm_info", "resex_vm_transmit_mtus"):
            self.assertEqual({kept}, {s.labels["uuid"] for s in families[family].samples},
                             family)
        self.assertEqual(decisions[kept].weight,
                         value(families, "resex_vm_weight", vm=kept_name, uuid=kept))
        self.assertNotIn(gone_name,
                         {s.labels["vm"] for s in families["resex_vm_weight"].samples})


class EndpointTest(unittest.TestCase):

    def test_disabled_by_default(self):
        self.assertIsNone(metrics_mod.PrometheusMetrics.from_conf(make_conf("")))

    def test_enabled_conf_serves_on_the_configured_address_once_started(self):
        metrics = metrics_mod.PrometheusMetrics.from_conf(
            make_conf("[metrics]\nenabled = true\nport = 0\n"))
        self.addCleanup(metrics.close)
        self.assertIsNone(metrics.address)      # built, not bound: the agent starts it
        metrics.start()
        self.assertEqual("127.0.0.1", metrics.address[0])
        self.assertIn("resex_vms", scrape(metrics))

    def test_a_busy_port_is_a_config_error(self):
        sock = socket.socket()
        self.addCleanup(sock.close)
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        metrics = metrics_mod.PrometheusMetrics("127.0.0.1", sock.getsockname()[1])
        self.addCleanup(metrics.close)
        with self.assertRaises(exceptions.ConfigError) as ctx:
            metrics.start()
        self.assertIn("[metrics]", str(ctx.exception))

    def test_two_sinks_in_one_process_do_not_collide(self):
        a = metrics_mod.PrometheusMetrics()
        b = metrics_mod.PrometheusMetrics()
        self.assertIsNot(a.registry, b.registry)

    def test_close_stops_the_server(self):
        metrics = metrics_mod.PrometheusMetrics("127.0.0.1", 0)
        host, port = metrics.start()
        metrics.close()
        with self.assertRaises(OSError):
            socket.create_connection((host, port), timeout=5).close()
