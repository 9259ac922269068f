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

"""An in-process Nova (API, conductor, scheduler, placement, three fake
computes) places servers with the ResEx filter and weigher enabled through
nova.conf, reading host reports from a real SQLite board.
"""

import os
import sys
import tempfile

from nova import conf as nova_conf
from nova.tests.functional.api import client
from nova.tests.functional import integrated_helpers

from resex_libvirt.board import open_board
from resex_libvirt.board import reader as reader_mod
from resex_nova import filter as resex_filter  # noqa: F401 (registers [resex])
from tests.unit.board import reports

CONF = nova_conf.CONF
API_PASTE = os.path.join(sys.prefix, "etc", "nova", "api-paste.ini")
HOSTS = ("host1", "host2", "host3")


class NovaWithResEx(integrated_helpers.ProviderUsageBaseTestCase):
    """An in-process nova with the ResEx filter (last) and weigher, on a SQLite board."""

    compute_driver = "fake.MediumFakeDriver"
    microversion = "latest"

    def setUp(self):
        tmp = tempfile.TemporaryDirectory(prefix="resex-nova-")
        self.addCleanup(tmp.cleanup)
        self.board_url = "sqlite://" + os.path.join(tmp.name, "board.sqlite")
        self.board = open_board(self.board_url)
        self.addCleanup(self.board.close)
        self.addCleanup(reader_mod.stop_all)
        self.flags(api_paste_config=API_PASTE, group="wsgi")
        self.flags(available_filters=["nova.scheduler.filters.all_filters",
                                      "resex_nova.filter.ResExCongestionFilter"],
                   enabled_filters=list(CONF.filter_scheduler.enabled_filters)
                   + ["ResExCongestionFilter"],
                   weight_classes=["resex_nova.weigher.ResExCongestionWeigher"],
                   group="filter_scheduler")
        self.flags(board_url=self.board_url, refresh_interval=0.2, first_load_timeout=5.0,
                   group="resex")
        super().setUp()
        for host in HOSTS:
            self._start_compute(host)

    def _clear_attrs(self):
        # nova's TestCase deletes every public attribute in a cleanup; under
        # pytest the cleanups of this class still need them afterwards.
        pass

    def _publish(self, **per_host):
        for host, fields in per_host.items():
            self.board.publish(reports.make(host, **fields))
        # The scheduler reads through the shared reader: refresh it now
        # rather than waiting for its thread (no timing in tests).
        reader_mod.shared(self.board_url).refresh()

    def _flavor(self, **extra_specs):
        return self._create_flavor(memory_mb=512, vcpu=1, disk=1, ephemeral=0,
                                   extra_spec=extra_specs or None)


class CongestionPlacementTest(NovaWithResEx):
    """Servers land where ResEx's reports say they should."""

    def test_latency_sensitive_flavor_lands_on_the_uncongested_host(self):
        self._publish(host1=dict(link_utilisation=0.6),
                      host2=dict(link_utilisation=0.02),
                      host3=dict(link_utilisation=0.3, latency_inflation_pct=25.0))
        flavor = self._flavor(**{"resex:latency_sla_us": "50"})
        for _ in range(2):
            server = self._create_server(flavor_id=flavor, networks="none")
            self.assertEqual("host2", server["OS-EXT-SRV-ATTR:host"])

    def test_bulk_flavor_avoids_the_host_with_the_sensitive_tenant(self):
        self._publish(host1=dict(sensitive_vms=1, link_utilisation=0.01),
                      host2=dict(sensitive_vms=2, link_utilisation=0.01),
                      host3=dict(sensitive_vms=0, heavy_io_vms=2, link_utilisation=0.5))
        flavor = self._flavor(**{"resex:io_class": "bulk"})
        server = self._create_server(flavor_id=flavor, networks="none")
        self.assertEqual("host3", server["OS-EXT-SRV-ATTR:host"])

    def test_no_valid_host_when_every_host_is_too_congested(self):
        self._publish(host1=dict(link_utilisation=0.5),
                      host2=dict(link_utilisation=0.2),
                      host3=dict(link_utilisation=0.01, latency_inflation_pct=40.0))
        flavor = self._flavor(**{"resex:latency_sla_us": "50",
                                 "resex:interference_threshold_pct": "15"})
        server = self._create_server(flavor_id=flavor, networks="none",
                                     expected_state="ERROR")
        self.assertIn("No valid host", server["fault"]["message"])

    def test_the_api_answers_400_to_a_bad_resex_extra_spec(self):
        flavor = self._flavor()
        for key, value in (("resex:latency_sla_us", "fast"),
                           ("resex:latency_sla_us", "0"),
                           ("resex:io_class", "huge"),
                           ("resex:shares", "0"),
                           ("resex:no_such_key", "1")):
            exc = self.assertRaises(
                client.OpenStackApiException, self.admin_api.post_extra_spec,
                flavor, {"extra_specs": {key: value}})
            self.assertEqual(400, exc.response.status_code, (key, value))
        self.admin_api.post_extra_spec(flavor, {"extra_specs": {"resex:latency_sla_us": "50"}})
