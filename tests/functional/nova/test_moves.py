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

"""Moves of existing servers in an in-process Nova with the ResEx filter and weigher
enabled, every host above the congestion threshold: each move succeeds (advisory),
as it does without the plugin, and fails only where the operator asked for strict.
"""

import time


from resex_libvirt.board import reader as reader_mod
from tests.functional.nova import test_congestion_placement as base
from tests.unit.board import reports

SENSITIVE = {"resex:latency_sla_us": "50"}


class MovesAreAdvisoryTest(base.NovaWithResEx):
    """Evacuation, live and cold migration, resize and unshelve are never blocked."""

    def setUp(self):
        super().setUp()
        self.flavor = self._flavor(**SENSITIVE)
        self.bigger = self._create_flavor(memory_mb=1024, vcpu=1, disk=1, ephemeral=0,
                                          extra_spec=SENSITIVE)
        # Quiet 50 s ago (max_age is 60 s): the server boots on host1 (the others weigh less).
        self._publish_at(time.time() - 50, host1=0.0, host2=0.02, host3=0.02)
        self.server = self._create_server(flavor_id=self.flavor, networks="none")
        self.assertEqual("host1", self.server["OS-EXT-SRV-ATTR:host"])
        # Now every host is congested (index about 900 %, threshold 10 %), host3 least.
        self._publish_at(time.time(), host1=0.9, host2=0.9, host3=0.8)
        self.assertEqual(
            [], [h for h in base.HOSTS
                 if not reader_mod.shared(self.board_url).entry(h).admission.refuses(10.0)])

    def _publish_at(self, ts, **utilisation):
        for host, util in utilisation.items():
            self.board.publish(reports.make(host, ts=ts, link_utilisation=util))
        reader_mod.shared(self.board_url).refresh()

    def test_a_new_sensitive_server_finds_no_host(self):
        server = self._create_server(flavor_id=self.flavor, networks="none",
                                     expected_state="ERROR")
        self.assertIn("No valid host", server["fault"]["message"])

    def test_evacuation_off_a_failed_host_succeeds(self):
        service = self.admin_api.get_services(host="host1", binary="nova-compute")[0]
        self.computes["host1"].stop()
        self.admin_api.put_service(service["id"], {"forced_down": "true"})
        server = self._evacuate_server(self.server)
        # The weigher still ranks: the least congested host wins.
        self.assertEqual("host3", server["OS-EXT-SRV-ATTR:host"])

    def test_live_migration_succeeds(self):
        server = self._live_migrate(self.server)
        self.assertEqual("host3", server["OS-EXT-SRV-ATTR:host"])

    def test_cold_migration_succeeds(self):
        server = self._migrate_server(self.server)
        self.assertEqual("host3", server["OS-EXT-SRV-ATTR:host"])
        self._confirm_resize(server)

    def test_resize_succeeds(self):
        server = self._resize_server(self.server, self.bigger)
        self.assertEqual("host3", server["OS-EXT-SRV-ATTR:host"])

    def test_unshelve_succeeds(self):
        self._shelve_server(self.server)
        server = self._unshelve_server(self.server)
        self.assertEqual("host3", server["OS-EXT-SRV-ATTR:host"])

    def test_a_strict_move_kind_is_filtered_and_the_others_stay_advisory(self):
        self.flags(strict_moves=["cold_migrate"], group="resex")
        self.api.post_server_action(self.server["id"], {"migrate": None})
        self._wait_for_migration_status(self.server, ["error"])
        server = self._wait_for_state_change(self.server, "ACTIVE")
        self.assertEqual("host1", server["OS-EXT-SRV-ATTR:host"])
        # Resize is another kind: still advisory.
        server = self._resize_server(self.server, self.bigger)
        self.assertEqual("host3", server["OS-EXT-SRV-ATTR:host"])

    def test_a_destination_the_operator_names_is_taken_even_when_strict(self):
        self.flags(strict_moves=["live_migrate"], group="resex")
        server = self._live_migrate(self.server, host="host2")
        self.assertEqual("host2", server["OS-EXT-SRV-ATTR:host"])
