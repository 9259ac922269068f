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

"""resex-placement-sync against a Placement stand-in over HTTP, following a real board.

The board is a SQLite file followed by the scheduler's own reader; Placement
is :mod:`tests.functional.nova.placement_standin` (generations, 409s, the
microversions), reached through a real keystoneauth session and adapter
(auth ``none``, the stand-in as the endpoint). The real Placement is
checked by the cloud's rows (``tests/cloud/scenarios.py``). Faults: a 409
race, Placement down then back, the service restarted (state from Placement
and the board's snapshot), a foreign trait (never touched), a trait removed
by another writer (restored, the gap logged). Metrics: the service's
Prometheus endpoint scraped over HTTP while its traits flip.
"""

import logging
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import noauth
from keystoneauth1 import session as ks_session
from prometheus_client import parser as prom_parser

from resex_libvirt import board as board_mod
from resex_libvirt.board import reader as reader_mod
from resex_nova import placement as placement_mod
from resex_nova import placement_sync
from resex_nova import sync_metrics
from resex_nova import traits
from tests.functional.nova import placement_standin
from tests.unit.board import reports

CLOSED = traits.CLOSED
MANAGED = traits.MANAGED
FOREIGN = "CUSTOM_OPERATOR_GPU_RACK"
T = 10.0
#: ``[resex]`` of a service whose verdicts follow each report at once.
NO_SMOOTHING = {"admission_time_constant": 0}


def index_report(host, index, ts=None):
    """A report whose congestion index is ``index`` (all load untaxable)."""
    return reports.make(host, ts=ts, link_utilisation=index / (100.0 + index))


class SyncTestBase(unittest.TestCase):

    def setUp(self):
        super().setUp()
        tmp = tempfile.TemporaryDirectory(prefix="resex-placement-sync-")
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name
        self.url = "sqlite://" + os.path.join(tmp.name, "board.sqlite")
        self.board = board_mod.open_board(self.url)
        self.addCleanup(self.board.close)
        self.placement = placement_standin.Placement().start()
        self.addCleanup(self.placement.stop)
        for name in ("node1", "node2"):
            self.placement.add_provider(name, {"COMPUTE_NODE", MANAGED, FOREIGN})
        # A compute node without the agent: never ours to touch.
        self.placement.add_provider("plain", {"COMPUTE_NODE"})

    def client(self, rate=0.0, metrics=None):
        session = ks_session.Session(auth=noauth.NoAuth(), timeout=5.0)
        adapter = ks_adapter.Adapter(session, service_type="placement",
                                     endpoint_override=self.placement.endpoint)
        return placement_mod.PlacementClient(adapter,
                                             limiter=placement_mod.RateLimiter(rate),
                                             metrics=metrics)

    def service(self, tau=0.0, rate=0.0, **kwargs):
        """A started reader of the board and its TraitSync (not looping: tests step it)."""
        holder = []
        reader = reader_mod.BoardReader(self.url, max_age=60, refresh_interval=0.05,
                                        load_timeout=10, tau=tau, hysteresis=0.3,
                                        board_opts={"create": False},
                                        on_change=lambda r: holder and holder[0].changed(r))
        client = self.client(rate, metrics=kwargs.get("metrics"))
        sync = placement_sync.TraitSync(reader, client, threshold=T, hysteresis=0.3,
                                        max_age=60, **kwargs)
        holder.append(sync)
        reader.start()
        self.addCleanup(reader.stop)
        return sync

    def write_conf(self, resex=(), **sync):
        """The service's configuration file: ``resex`` and ``sync`` are extra options."""
        path = os.path.join(self.tmp, "resex-placement-sync.conf")
        lines = ["[resex]", "board_url = %s" % self.url, "first_load_timeout = 10"]
        lines += ["%s = %s" % item for item in dict(resex).items()]
        lines += ["[placement_sync]", "auth_type = none",
                  "endpoint_override = %s" % self.placement.endpoint]
        lines += ["%s = %s" % item for item in sync.items()]
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def publish(self, sync, host, index, ts=None):
        rec = index_report(host, index, ts)
        self.board.publish(rec)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            entry = sync.reader.entry(host)
            if entry is not None and entry.ts >= rec.ts:
                return rec
            time.sleep(0.02)
        raise AssertionError("the reader never saw %s's report" % host)


class SharedLinkTraitTest(SyncTestBase):
    """The trait follows the shared links as the filter does (``[resex] topology_file``)."""

    def test_a_quiet_node_behind_a_congested_uplink_is_closed_naming_the_link(self):
        topology = os.path.join(self.tmp, "topology.yaml")
        with open(topology, "w") as f:
            f.write("links:\n  - {name: rack1-up, capacity_gbps: 1, hosts: [node1, node2]}\n")
        sync = self.service(topology_file=topology)
        # Each 8.6 Gb/s port at an index of 5 %: 0.41 Gb/s each, 0.82 of the
        # 1 Gb/s uplink (a 450 % slowdown).
        self.publish(sync, "node2", 5.0)
        self.publish(sync, "node1", 5.0)
        with self.assertLogs("resex_nova.placement_sync", logging.INFO) as logs:
            sync.reconcile()
        self.assertIn(CLOSED, self.placement.traits_of("node1"))
        self.assertIn(CLOSED, self.placement.traits_of("node2"))
        self.assertTrue(any("shared link rack1-up" in m for m in logs.output), logs.output)
        # Without the topology the same board opens both nodes again.
        plain = self.service()
        plain.reconcile()
        self.assertNotIn(CLOSED, self.placement.traits_of("node1"))


class TraitSyncTest(SyncTestBase):

    def test_a_congested_node_gets_the_trait_and_loses_it_when_quiet_again(self):
        sync = self.service()
        self.publish(sync, "node1", 15.0)
        self.publish(sync, "node2", 2.0)
        sync.reconcile()
        self.assertEqual({"COMPUTE_NODE", MANAGED, FOREIGN, CLOSED},
                         self.placement.traits_of("node1"))
        self.assertEqual({"COMPUTE_NODE", MANAGED, FOREIGN}, self.placement.traits_of("node2"))
        self.assertEqual({"COMPUTE_NODE"}, self.placement.traits_of("plain"))
        # Inside the band (7 < 8 <= 10): still closed; at 6.5: open again.
        self.publish(sync, "node1", 8.0)
        self.assertEqual({}, sync.evaluate())
        self.assertIn(CLOSED, self.placement.traits_of("node1"))
        self.publish(sync, "node1", 6.5)
        self.assertEqual({"node1": False}, sync.evaluate())
        self.assertEqual({"COMPUTE_NODE", MANAGED, FOREIGN}, self.placement.traits_of("node1"))
        self.assertEqual(1, sync.stats["set"])
        self.assertEqual(1, sync.stats["cleared"])

    def test_a_steady_board_costs_no_call_between_reconciliations(self):
        sync = self.service()
        self.publish(sync, "node1", 15.0)
        self.publish(sync, "node2", 2.0)
        sync.reconcile()
        before = len(self.placement.log)
        for i in range(20):
            self.publish(sync, "node1", 14.0 + (i % 3))
            sync.evaluate()
        self.assertEqual(before, len(self.placement.log))
        # A reconciliation with nothing to change: its two listings only.
        sync.reconcile()
        self.assertEqual([("GET", "/resource_providers?required=" + CLOSED, 200),
                          ("GET", "/resource_providers?required=" + MANAGED, 200)],
                         self.placement.log[before:])

    def test_a_409_race_rereads_and_keeps_the_other_writers_trait(self):
        sync = self.service()
        self.publish(sync, "node1", 15.0)
        self.publish(sync, "node2", 2.0)
        # nova-compute writes node1's traits between the service's read and its PUT.
        self.placement.before_put = lambda uuid: self.placement.edit(
            "node1", add={"COMPUTE_STATUS_DISABLED"})
        sync.reconcile()
        self.assertEqual({"COMPUTE_NODE", MANAGED, FOREIGN, CLOSED, "COMPUTE_STATUS_DISABLED"},
                         self.placement.traits_of("node1"))
        puts = [c[2] for c in self.placement.calls("PUT") if "resource_providers" in c[1]]
        self.assertEqual([409, 200], puts)
        self.assertEqual(1, sync.stats["conflicts"])
        self.assertIn("PUT 409 x1", sync.client.calls_summary())

    def test_placement_down_then_back(self):
        sync = self.service()
        clock = [1000.0]
        sync._monotonic = lambda: clock[0]
        self.publish(sync, "node1", 15.0)
        self.publish(sync, "node2", 2.0)
        self.assertLess(sync.step(), 2.0)  # the first reconciliation
        self.assertIn(CLOSED, self.placement.traits_of("node1"))
        self.placement.stop()
        self.publish(sync, "node2", 30.0)
        self.publish(sync, "node1", 1.0)
        with self.assertLogs("resex_nova.placement_sync", logging.DEBUG) as logs:
            waits = []
            for _ in range(4):
                clock[0] += 100.0
                waits.append(sync.step())
        self.assertEqual([1.0, 2.0, 4.0, 8.0], waits)
        warnings = [r for r in logs.records if r.levelno == logging.WARNING]
        self.assertEqual(1, len(warnings), [r.getMessage() for r in warnings])
        self.assertIn("Placement failed", warnings[0].getMessage())
        # What Placement holds is kept as known; nothing was lost.
        self.assertEqual({"node1": True, "node2": False}, sync.actual)
        self.placement.start()
        self.assertEqual(8.0, sync.step())  # still within the backoff
        clock[0] += 8.0
        with self.assertLogs("resex_nova.placement_sync", logging.INFO) as logs:
            sync.step()   # the writes that waited
            sync.step()   # then every host reconciled
        self.assertTrue(any("answers again" in r.getMessage() for r in logs.records))
        self.assertTrue(any(r.getMessage().startswith("reconciled") for r in logs.records))
        self.assertNotIn(CLOSED, self.placement.traits_of("node1"))
        self.assertIn(CLOSED, self.placement.traits_of("node2"))

    def test_a_restarted_service_resumes_from_placement_without_flipping_the_band(self):
        first = self.service()
        self.publish(first, "node1", 15.0)
        self.publish(first, "node2", 2.0)
        first.reconcile()
        self.assertIn(CLOSED, self.placement.traits_of("node1"))
        first.reader.stop()
        # The service restarts while node1 sits inside the hysteresis band: a
        # fresh reader's latch starts at 8.5 (open), Placement's trait says closed.
        self.board.publish(index_report("node1", 8.5))
        second = self.service()
        self.assertFalse(second.reader.entry("node1").admission.refuses(T))
        mark = len(self.placement.log)
        second.reconcile()
        self.assertIn(CLOSED, self.placement.traits_of("node1"))
        self.assertEqual([], [c for c in self.placement.log[mark:]
                              if c[0] == "PUT" and c[1].startswith("/resource_providers")])
        self.assertEqual({"node1": True, "node2": False}, second.actual)

    def test_a_trait_removed_by_another_writer_is_restored_and_the_gap_logged(self):
        sync = self.service()
        self.publish(sync, "node1", 15.0)
        self.publish(sync, "node2", 2.0)
        sync.reconcile()
        self.placement.edit("node1", remove={CLOSED})
        with self.assertLogs("resex_nova.placement_sync", logging.WARNING) as logs:
            sync.reconcile()
        self.assertIn(CLOSED, self.placement.traits_of("node1"))
        self.assertEqual(1, sync.stats["restored"])
        self.assertTrue(any("missing for at most" in r.getMessage() for r in logs.records))

    def test_a_foreign_trait_is_never_touched(self):
        sync = self.service()
        self.publish(sync, "node1", 15.0)
        self.publish(sync, "node2", 2.0)
        sync.reconcile()
        self.placement.edit("node1", add={"CUSTOM_ADDED_LATER"}, remove={FOREIGN})
        self.publish(sync, "node1", 1.0)
        sync.evaluate()
        self.assertEqual({"COMPUTE_NODE", MANAGED, "CUSTOM_ADDED_LATER"},
                         self.placement.traits_of("node1"))
        self.assertEqual({"COMPUTE_NODE"}, self.placement.traits_of("plain"))


class UnknownHostTest(SyncTestBase):

    def test_a_managed_node_without_a_report_is_closed_by_default(self):
        sync = self.service()
        self.publish(sync, "node1", 1.0)
        sync.reconcile()
        self.assertIn(CLOSED, self.placement.traits_of("node2"))
        self.assertNotIn(CLOSED, self.placement.traits_of("node1"))
        self.assertNotIn(CLOSED, self.placement.traits_of("plain"))

    def test_a_node_whose_report_goes_stale_is_closed(self):
        sync = self.service()
        self.publish(sync, "node1", 1.0, ts=time.time() - 55.0)
        self.publish(sync, "node2", 1.0)
        sync.reconcile()
        self.assertNotIn(CLOSED, self.placement.traits_of("node1"))
        # Ten seconds on, node1's report is 65 s old.
        self.assertEqual({"node1": True}, sync.evaluate(time.time() + 10.0))

    def test_the_other_policies(self):
        self.placement.edit("node2", add={CLOSED})
        keep = self.service(unknown_policy=traits.UNKNOWN_KEEP)
        keep.reconcile()
        self.assertIn(CLOSED, self.placement.traits_of("node2"))
        self.assertNotIn(CLOSED, self.placement.traits_of("node1"))
        opened = self.service(unknown_policy=traits.UNKNOWN_OPEN)
        opened.reconcile()
        self.assertNotIn(CLOSED, self.placement.traits_of("node2"))

    def test_an_unreadable_board_changes_no_trait(self):
        self.url = "sqlite://" + os.path.join(self.tmp, "no-such-board.sqlite")
        sync = self.service()
        self.assertTrue(sync.reader.failing or sync.reader.loaded_at is None)
        sync.reconcile()
        self.assertEqual([], self.placement.calls("PUT")[1:])  # only the trait's creation
        self.assertFalse(any(CLOSED in self.placement.traits_of(n)
                             for n in ("node1", "node2", "plain")))

    def test_a_host_whose_provider_is_named_otherwise(self):
        self.placement.add_provider("node3.example.org", {"COMPUTE_NODE"})
        sync = self.service(provider_names={"node3": "node3.example.org"})
        self.publish(sync, "node3", 20.0)
        sync.reconcile()
        self.assertIn(CLOSED, self.placement.traits_of("node3.example.org"))


class ServiceTest(SyncTestBase):

    def test_once_reconciles_every_host_and_exits_0(self):
        self.board.publish(index_report("node1", 25.0))
        self.board.publish(index_report("node2", 0.0))
        rc = placement_sync.main(["--config-file", self.write_conf(), "--once"])
        self.assertEqual(0, rc)
        self.assertIn(CLOSED, self.placement.traits_of("node1"))
        self.assertNotIn(CLOSED, self.placement.traits_of("node2"))

    def test_once_exits_1_when_placement_is_down(self):
        path = self.write_conf(retry_max_interval=1)
        self.placement.stop()
        with self.assertLogs("resex_nova.placement_sync", logging.WARNING):
            self.assertEqual(1, placement_sync.main(["--config-file", path, "--once"]))

    def test_no_credentials_is_a_clear_error(self):
        path = os.path.join(self.tmp, "empty.conf")
        with open(path, "w") as f:
            f.write("[resex]\nboard_url = %s\n" % self.url)
        self.assertEqual(2, placement_sync.main(["--config-file", path]))

    def test_the_loop_follows_the_board_until_stopped(self):
        self.board.publish(index_report("node1", 0.0))
        self.board.publish(index_report("node2", 0.0))
        # Unsmoothed: the reader may load 0 then 40 a few ms apart, which a
        # 20 s time constant would average to nearly 0.
        service = placement_sync.build(placement_sync.make_conf(
            ["--config-file", self.write_conf(NO_SMOOTHING)]))
        thread = threading.Thread(target=placement_sync.serve, args=(service,), daemon=True)
        thread.start()
        self.addCleanup(thread.join, 10)
        self.addCleanup(service.stop)
        self.board.publish(index_report("node2", 40.0))
        # Seconds when the machine is quiet; a loaded machine was seen to need more than 15.
        deadline = time.monotonic() + 60
        while CLOSED not in self.placement.traits_of("node2") and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIn(CLOSED, self.placement.traits_of("node2"))
        service.stop()
        thread.join(10)
        self.assertFalse(thread.is_alive())


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def scrape(address):
    """``{(name, sorted label items): value}`` of every sample at ``address``."""
    url = "http://%s:%d/metrics" % tuple(address[:2])
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode("utf-8")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in prom_parser.text_string_to_metric_families(text)
            for s in family.samples}


def value(samples, name, **labels):
    return samples.get((sync_metrics.PREFIX + name, tuple(sorted(labels.items()))), 0.0)


class MetricsTest(SyncTestBase):
    """The service's Prometheus endpoint, scraped over HTTP."""

    def wait_for(self, predicate, what):
        deadline = time.monotonic() + 60  # seconds when quiet; see the loop's test
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.05)
        raise AssertionError("never: %s" % what)

    def test_the_counters_move_as_the_traits_flip(self):
        self.board.publish(index_report("node1", 0.0))
        self.board.publish(index_report("node2", 0.0))
        service = placement_sync.build(placement_sync.make_conf(
            ["--config-file", self.write_conf(NO_SMOOTHING, metrics_port=free_port())]))
        self.assertIsInstance(service.metrics, sync_metrics.SyncMetrics)
        thread = threading.Thread(target=placement_sync.serve, args=(service,), daemon=True)
        thread.start()
        self.addCleanup(thread.join, 10)
        self.addCleanup(service.stop)
        self.wait_for(lambda: service.stats["reconciliations"], "a reconciliation")
        address = service.metrics.address
        first = scrape(address)
        self.assertEqual(1, value(first, "reconciliations_total", outcome="success"))
        self.assertEqual(0, value(first, "traits_set_total"))
        self.assertEqual(1, value(first, "reconcile_duration_seconds_count"))
        self.assertGreater(value(first, "last_reconcile_timestamp_seconds"), 0)
        self.assertLess(value(first, "seconds_since_last_reconcile"), 60)
        self.assertEqual(0, value(first, "placement_failing"))
        self.assertEqual(2, value(first, "placement_requests_total", method="GET",
                                  outcome="200"))  # the two listings
        self.board.publish(index_report("node2", 40.0))
        self.wait_for(lambda: CLOSED in self.placement.traits_of("node2"), "node2 closed")
        self.wait_for(lambda: value(scrape(address), "traits_set_total") == 1, "set counted")
        self.board.publish(index_report("node2", 0.0))
        self.wait_for(lambda: CLOSED not in self.placement.traits_of("node2"), "node2 open")
        self.wait_for(lambda: value(scrape(address), "traits_cleared_total") == 1,
                      "cleared counted")
        last = scrape(address)
        self.assertEqual(1, value(last, "traits_set_total"))
        self.assertEqual(2, value(last, "placement_requests_total", method="PUT",
                                  outcome="200"))
        service.stop()
        thread.join(10)
        self.assertFalse(thread.is_alive())
        self.assertIsNone(service.metrics.address)  # the endpoint closed with the loop

    def test_off_by_default(self):
        service = placement_sync.build(placement_sync.make_conf(
            ["--config-file", self.write_conf()]))
        self.assertNotIsInstance(service.metrics, sync_metrics.SyncMetrics)
        self.assertIsNone(service.metrics.start())

    def test_a_port_it_cannot_bind_is_a_configuration_error(self):
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen(1)
            path = self.write_conf(metrics_port=taken.getsockname()[1])
            self.assertEqual(2, placement_sync.main(["--config-file", path]))

    def test_conflicts_hosts_without_provider_failures_and_waits(self):
        metrics = sync_metrics.SyncMetrics(port=0)
        address = metrics.start()
        self.addCleanup(metrics.close)
        sync = self.service(rate=2.0, metrics=metrics)
        self.publish(sync, "node1", 15.0)
        self.publish(sync, "node2", 2.0)
        self.publish(sync, "ghost", 20.0)  # publishes, but has no resource provider
        self.placement.before_put = lambda uuid: self.placement.edit(
            "node1", add={"COMPUTE_STATUS_DISABLED"})
        self.assertLess(sync.step(), 2.0)
        self.placement.before_put = None
        samples = scrape(address)
        self.assertEqual(1, value(samples, "generation_conflicts_total"))
        self.assertEqual(1, value(samples, "placement_requests_total", method="PUT",
                                  outcome="409"))
        self.assertEqual(1, value(samples, "hosts_without_provider"))
        self.assertEqual(1, value(samples, "traits_set_total"))
        # Two calls a second: most of the pass's calls waited for a token.
        self.assertGreater(value(samples, "rate_limit_waits_total"), 0)
        self.assertGreater(value(samples, "rate_limit_wait_seconds_total"), 0)
        self.placement.stop()
        sync._next_reconcile = 0.0
        sync.step()
        samples = scrape(address)
        self.assertEqual(1, value(samples, "reconciliations_total", outcome="failure"))
        self.assertEqual(1, value(samples, "placement_failing"))
        self.assertEqual(1, value(samples, "reconcile_duration_seconds_count"))


class IsolationTest(unittest.TestCase):

    def test_the_service_imports_neither_libvirt_nor_the_agent(self):
        code = ("import sys; import resex_nova.placement_sync, resex_nova.sync_metrics; "
                "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
                "('libvirt', 'resex_agent')); print(bad); sys.exit(1 if bad else 0)")
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__)))))
        done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True,
                              text=True, timeout=120)
        self.assertEqual(0, done.returncode, done.stdout + done.stderr)
