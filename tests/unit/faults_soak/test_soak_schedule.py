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

"""The soak's schedule (no lab)."""

import unittest

from hypothesis import given
from hypothesis import strategies as st

from tests.faults import soak_schedule as schedule


class ScheduleTest(unittest.TestCase):

    def test_an_hour_has_a_guest_every_5_s_and_two_restarts_of_each_part(self):
        events = schedule.build(3600.0)
        self.assertEqual({schedule.CHURN: 719, schedule.SIGHUP: 119,
                          schedule.LIBVIRTD_RESTART: 2, schedule.ETCD_RESTART: 2},
                         schedule.counts(events))
        at = {kind: [e.at for e in events if e.kind == kind] for kind in schedule.FAULTS}
        self.assertEqual([1200.0, 3000.0], at[schedule.LIBVIRTD_RESTART])
        self.assertEqual([600.0, 2400.0], at[schedule.ETCD_RESTART])

    def test_three_minutes_scale_the_restarts_into_the_run(self):
        events = schedule.build(180.0)
        restarts = [(e.at, e.kind) for e in events if e.kind in schedule.FAULTS]
        self.assertEqual([(30.0, schedule.ETCD_RESTART), (60.0, schedule.LIBVIRTD_RESTART),
                          (120.0, schedule.ETCD_RESTART), (150.0, schedule.LIBVIRTD_RESTART)],
                         restarts)
        self.assertEqual(35, schedule.counts(events)[schedule.CHURN])

    def test_a_period_of_zero_never_comes(self):
        plan = schedule.Plan(churn_every_s=0, sighup_every_s=0, libvirtd_restarts=0,
                             etcd_restarts=1)
        self.assertEqual([schedule.Event(100.0, schedule.ETCD_RESTART, 0)],
                         schedule.build(300.0, plan))

    def test_no_run_no_events(self):
        self.assertEqual([], schedule.build(0.0))

    def test_a_negative_plan_is_refused(self):
        with self.assertRaises(ValueError):
            schedule.Plan(churn_every_s=-1.0)
        with self.assertRaises(ValueError):
            schedule.Plan(etcd_restarts=-1)

    @given(st.floats(1.0, 20000.0), st.floats(0.5, 600.0), st.floats(0.5, 600.0),
           st.integers(0, 5), st.integers(0, 5))
    def test_events_fall_inside_the_run_in_order_and_numbered_per_kind(
            self, seconds, churn, hup, libvirtd, etcd):
        plan = schedule.Plan(churn, hup, libvirtd, etcd)
        events = schedule.build(seconds, plan)
        self.assertEqual(sorted(events), events)
        self.assertTrue(all(0.0 < e.at < seconds for e in events))
        for kind, count in schedule.counts(events).items():
            self.assertEqual(list(range(count)),
                             [e.index for e in events if e.kind == kind])
        got = schedule.counts(events)
        self.assertEqual(libvirtd, got.get(schedule.LIBVIRTD_RESTART, 0))
        self.assertEqual(etcd, got.get(schedule.ETCD_RESTART, 0))
        # Every period fits once more than the run has whole periods, never more.
        self.assertLessEqual(abs(got.get(schedule.CHURN, 0) - seconds / churn), 1.0)
