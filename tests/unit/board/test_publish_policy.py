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

"""When the agent publishes: every epoch in a small fleet, on change in a large one."""

import unittest

from resex_libvirt.board import publish_policy
from tests.unit.board import reports
from tests.unit.board import test_ensembles
from tests.unit.board import test_remote_claims


class PublishPolicyTest(unittest.TestCase):

    def setUp(self):
        self.policy = publish_policy.PublishPolicy(on_change_fleet_size=100, max_interval_s=20)
        self.base = reports.make(link_utilisation=0.2, sensitive_vms=1)

    def test_a_small_fleet_publishes_every_epoch(self):
        self.policy.observe_fleet(99)
        self.policy.published(self.base, 0.0)
        self.assertTrue(self.policy.should_publish(self.base, 1.0))

    def test_a_large_fleet_publishes_the_first_report(self):
        self.policy.observe_fleet(100)
        self.assertTrue(self.policy.should_publish(self.base, 0.0))

    def test_a_large_fleet_skips_an_unchanged_report_until_the_max_interval(self):
        self.policy.observe_fleet(5000)
        self.policy.published(self.base, 0.0)
        same = reports.make(link_utilisation=0.22, sensitive_vms=1, io_price=1.05)
        self.assertFalse(self.policy.should_publish(same, 19.9))
        self.assertTrue(self.policy.should_publish(same, 20.0))

    def test_meaningful_changes_are_published_at_once(self):
        self.policy.observe_fleet(5000)
        self.policy.published(self.base, 0.0)
        for change in (dict(sensitive_vms=2), dict(heavy_io_vms=1),
                       dict(link_utilisation=0.26),
                       dict(latency_inflation_pct=30.0),
                       dict(io_price=1.2), dict(cpu_price=0.8), dict(state="blind")):
            new = reports.make(**dict(dict(link_utilisation=0.2, sensitive_vms=1), **change))
            self.assertTrue(self.policy.should_publish(new, 1.0), change)

    def test_a_zero_fleet_threshold_means_always_every_epoch(self):
        policy = publish_policy.PublishPolicy(on_change_fleet_size=0)
        policy.observe_fleet(10 ** 6)
        policy.published(self.base, 0.0)
        self.assertTrue(policy.should_publish(self.base, 0.1))

    def test_a_report_with_remote_claims_and_the_one_after_it_are_always_published(self):
        p = publish_policy.PublishPolicy(on_change_fleet_size=10, max_interval_s=20.0,
                                         fleet_size=100)
        claim = test_remote_claims.a_claim()._asdict()
        first = reports.make(sensitive_vms=1, remote_claims=[claim])
        self.assertTrue(p.should_publish(first, 0.0))
        p.published(first, 0.0)
        self.assertTrue(p.should_publish(first, 1.0))
        p.published(first, 1.0)
        ended = reports.make(sensitive_vms=1)
        self.assertTrue(p.should_publish(ended, 2.0))
        p.published(ended, 2.0)
        self.assertFalse(p.should_publish(ended, 3.0))

    def test_a_report_with_ensemble_members_and_the_one_after_it_are_always_published(self):
        p = publish_policy.PublishPolicy(on_change_fleet_size=10, max_interval_s=20.0,
                                         fleet_size=100)
        member = test_ensembles.a_member()._asdict()
        first = reports.make(sensitive_vms=1, ensembles=[member])
        p.published(first, 0.0)
        self.assertTrue(p.should_publish(first, 1.0))
        p.published(first, 1.0)
        ended = reports.make(sensitive_vms=1)
        self.assertTrue(p.should_publish(ended, 2.0))
        p.published(ended, 2.0)
        self.assertFalse(p.should_publish(ended, 3.0))
