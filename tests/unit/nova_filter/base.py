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

"""Real nova objects and a real SQLite board for the plugin's unit tests."""

import os
import tempfile

from nova import conf as nova_conf
from nova import objects
from nova.scheduler import host_manager
from oslo_config import fixture as config_fixture
import testtools

from resex_libvirt import board as board_mod
from resex_libvirt.board import reader as reader_mod
from resex_nova import filter as resex_filter  # noqa: F401 (registers [resex])
from tests.unit.board import reports

CONF = nova_conf.CONF
objects.register_all()


def request(**extra_specs):
    """A RequestSpec whose flavor carries ``extra_specs``."""
    return objects.RequestSpec(
        flavor=objects.Flavor(extra_specs=extra_specs), scheduler_hints={},
        instance_uuid="00000000-0000-0000-0000-000000000001")


def host(name, **aggregate_metadata):
    state = host_manager.HostState(name, name + "-node", None)
    if aggregate_metadata:
        state.aggregates = [objects.Aggregate(id=1, name="agg-" + name,
                                              metadata=aggregate_metadata)]
    return state


SENSITIVE = {"resex:latency_sla_us": "50"}
BULK = {"resex:io_class": "bulk"}


class PluginTestCase(testtools.TestCase):
    """A temporary board, nova's CONF pointed at it, the shared reader stopped after."""

    def setUp(self):
        super().setUp()
        tmp = tempfile.TemporaryDirectory(prefix="resex-plugin-")
        self.addCleanup(tmp.cleanup)
        self.board_url = "sqlite://" + os.path.join(tmp.name, "board.sqlite")
        self.board = board_mod.open_board(self.board_url)
        self.addCleanup(self.board.close)
        self.conf = self.useFixture(config_fixture.Config(CONF))
        self.conf.config(board_url=self.board_url, refresh_interval=300,
                         first_load_timeout=10, group="resex")
        self.addCleanup(reader_mod.stop_all)

    def publish(self, **per_host):
        for name, fields in per_host.items():
            self.board.publish(reports.make(name, **fields))
        reader_mod.shared(self.board_url).refresh()
