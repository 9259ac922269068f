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


"""The cloud smoke in ``make test``: bring-up, scenarios (a)-(c), teardown.

Every agent runs under the shipped systemd unit's restrictions
(:mod:`tests.cloud.unit_sandbox`); ``agent_restricted`` checks it.

A real OpenStack on this machine (:mod:`tests.cloud.cloud`): keystone,
glance, placement, nova-api/conductor/scheduler, two compute nodes each
with its libvirtd, nova-compute and resex-agent, etcd as the board; the
plugin configured by ``devstack/plugin.sh``. Needs root (namespaces,
bridges, libvirtd); skips, saying so, otherwise. Holds
``/tmp/resex-lab.lock`` from bring-up to teardown and leaves nothing
behind (every process by PID, every link, the data).
"""

import os
import tempfile
import unittest

from tests.cloud import cloud as cloud_mod
from tests.cloud import guests
from tests.cloud import scenarios as scenarios_mod


@unittest.skipUnless(os.geteuid() == 0, "the cloud needs root (libvirtd, namespaces, bridges)")
class CloudSmokeTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        # A state directory of this run's own: its process table must be
        # nobody else's, or a run queued behind another's cloud would take
        # that cloud's lab-lock holder for its own and not wait.
        # The lab lock dies with this process: a runner killed mid-run must
        # not leave the machine's lab locked.
        cls.cloud = cloud_mod.Cloud(state_dir=os.environ.get(
            "RESEX_CLOUD_TEST_DIR") or tempfile.mkdtemp(prefix="resex-cloud-test-",
                                                        dir="/var/tmp"),
            lock_with_caller=True)
        try:
            cls.cloud.up()
            guests.publish(cls.cloud)
            cls.scenarios = scenarios_mod.Scenarios(cls.cloud)
        except BaseException:
            cls.cloud.down()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            cls.scenarios.close()
            print("\ncloud figures: bring-up %.0f s; %s" % (
                cls.cloud.figures["bring_up_s"],
                ", ".join("%s %s" % (k, "%.1f" % v if isinstance(v, float) else v)
                          for k, v in sorted(cls.scenarios.figures.items()))))
        finally:
            cls.cloud.down(keep_logs=False)
            assert not cls.cloud.table.load(), cls.cloud.table.load()

    def test_0_install_rst_snippets_are_the_configuration_the_cloud_runs(self):
        self.scenarios.install_rst_config()

    def test_1_bad_resex_extra_specs_are_refused_by_nova_api_with_400(self):
        self.scenarios.bad_extra_specs()

    def test_2_the_scheduler_refuses_a_node_its_agent_reports_congested(self):
        self.scenarios.congested_node_refused()

    def test_3_the_agent_controls_nova_guests_and_restores_novas_values_on_sigterm(self):
        self.scenarios.agent_controls_nova_guest()

    def test_3b_the_agents_run_under_the_shipped_units_restrictions_and_still_work(self):
        self.scenarios.agent_restricted()

    def test_4_with_every_node_congested_a_sensitive_server_finds_no_valid_host(self):
        self.scenarios.every_node_congested()
