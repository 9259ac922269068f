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

"""The market's cap/weight as raw scheduler parameters, per libvirt driver."""

import unittest

from hypothesis import given
from hypothesis import strategies as st

from resex_libvirt.hypervisor import base
from resex_libvirt.hypervisor import knobs

QEMU = knobs.QemuPosixMapping()


class QemuPosixCapTest(unittest.TestCase):

    def test_cap_of_one_vcpu_is_quota_over_default_period(self):
        self.assertEqual({"global_period": 100000, "global_quota": 50000},
                         QEMU.params_for(50, None, 1))
        self.assertEqual(5000, QEMU.params_for(5, None, 1)["global_quota"])

    def test_two_vcpu_vm_gets_the_whole_vm_cap_like_xen(self):
        # Xen: cap 150 on a 2-vCPU domain = 1.5 pCPU for the domain as a whole.
        params = QEMU.params_for(150, None, 2)
        self.assertEqual(150000, params["global_quota"])
        self.assertEqual(100000, params["global_period"])
        self.assertNotIn("vcpu_quota", params)

    def test_cap_is_bounded_by_the_vcpus(self):
        self.assertEqual(200000, QEMU.params_for(500, None, 2)["global_quota"])

    def test_no_cap_is_minus_one_never_zero(self):
        self.assertEqual(-1, QEMU.params_for(None, None, 1)["global_quota"])

    def test_caps_below_one_percent_lengthen_the_period_to_keep_quota_legal(self):
        params = QEMU.params_for(0.5, None, 1)
        self.assertEqual(1000, params["global_quota"])
        self.assertEqual(200000, params["global_period"])
        self.assertAlmostEqual(0.5, QEMU.cap_of(params, 1))

    def test_zero_or_tiny_cap_clamps_to_the_smallest_exact_cap_not_to_none(self):
        params = QEMU.params_for(0, None, 1)
        self.assertEqual({"global_period": 1000000, "global_quota": 1000}, params)
        self.assertAlmostEqual(knobs.QEMU_MIN_CAP_PCT, QEMU.cap_of(params, 1))

    def test_apply_refuses_a_zero_quota(self):
        with self.assertRaises(ValueError):
            QEMU.apply(None, {"global_period": 100000, "global_quota": 0})

    @given(cap=st.floats(min_value=0.0, max_value=1000.0), vcpus=st.integers(1, 8))
    def test_every_cap_maps_to_legal_cfs_bandwidth(self, cap, vcpus):
        params = QEMU.params_for(cap, None, vcpus)
        self.assertGreaterEqual(params["global_quota"], knobs.CFS_QUOTA_MIN_US)
        self.assertGreaterEqual(params["global_period"], 1000)
        self.assertLessEqual(params["global_period"], knobs.CFS_PERIOD_MAX_US)

    @given(cap=st.floats(min_value=0.1, max_value=800.0), vcpus=st.integers(1, 8))
    def test_read_back_cap_equals_requested_within_a_microsecond_of_quota(self, cap, vcpus):
        params = QEMU.params_for(cap, None, vcpus)
        expected = min(cap, 100.0 * vcpus)
        tolerance = 100.0 / params["global_period"]  # one microsecond of quota
        self.assertAlmostEqual(expected, QEMU.cap_of(params, vcpus), delta=tolerance)


class QemuPosixWeightTest(unittest.TestCase):

    def test_xen_default_weight_is_cgroup_default_shares(self):
        self.assertEqual(1024, QEMU.params_for(None, 256, 1)["cpu_shares"])
        self.assertEqual(256, QEMU.weight_of({"cpu_shares": 1024}))

    def test_weight_none_leaves_shares_alone(self):
        self.assertNotIn("cpu_shares", QEMU.params_for(50, None, 1))

    def test_shares_are_clamped_to_cgroup_bounds(self):
        self.assertEqual(knobs.CGROUP_SHARES_MIN, QEMU.params_for(None, 0, 1)["cpu_shares"])
        self.assertEqual(knobs.CGROUP_SHARES_MAX,
                         QEMU.params_for(None, 10 ** 6, 1)["cpu_shares"])

    def test_read_keeps_only_the_knobs_it_writes(self):
        raw = {"cpu_shares": 1024, "vcpu_period": 100000, "vcpu_quota": -1,
               "global_period": 100000, "global_quota": -1, "emulator_quota": -1}
        self.assertEqual({"cpu_shares": 1024, "global_period": 100000, "global_quota": -1},
                         QEMU.read(raw))


class CgroupVersionSharesTest(unittest.TestCase):

    def test_cgroup_v2_shares_stay_in_cpu_weights_range_with_its_default_for_xens(self):
        v2 = knobs.QemuPosixMapping(cgroup_version=2)
        self.assertEqual(100, v2.params_for(None, 256, 1)["cpu_shares"])
        self.assertEqual(10000, v2.params_for(None, 65535, 1)["cpu_shares"])
        self.assertEqual(1, v2.params_for(None, 0, 1)["cpu_shares"])
        self.assertEqual(256, v2.weight_of({"cpu_shares": 100}))

    def test_cgroup_v1_range_is_2_to_262144(self):
        v1 = knobs.QemuPosixMapping(cgroup_version=1)
        self.assertEqual((2, 262144), (v1.params_for(None, 0, 1)["cpu_shares"],
                                       v1.params_for(None, 10 ** 6, 1)["cpu_shares"]))

    def test_an_unknown_cgroup_version_is_refused(self):
        with self.assertRaises(ValueError):
            knobs.QemuPosixMapping(cgroup_version=3)

    @given(st.sampled_from((1, 2)), st.integers(1, 300000), st.floats(0, 70000))
    def test_shares_never_go_below_what_nova_set_nor_leave_the_range(
            self, version, floor, weight):
        mapping = knobs.QemuPosixMapping(cgroup_version=version, shares_floor=floor)
        shares = mapping.params_for(None, weight, 1)["cpu_shares"]
        low, high = knobs.SHARES_RANGE[version]
        self.assertGreaterEqual(shares, min(max(floor, low), high))
        self.assertTrue(low <= shares <= high)


class OriginalsTest(unittest.TestCase):

    def setUp(self):
        super().setUp()
        self.qemu = knobs.QemuPosixMapping(period_us=10000)

    def test_novas_flavor_gives_the_shares_and_no_cap(self):
        originals, refused = self.qemu.originals({"cpu_shares": 2048}, {"cpu_shares": 3072})
        self.assertIsNone(refused)
        self.assertEqual({"global_period": 100000, "global_quota": -1, "cpu_shares": 3072},
                         originals)

    def test_novas_per_vcpu_quota_is_kept_for_restore(self):
        originals, _ = self.qemu.originals({}, {"vcpu_period": 20000, "vcpu_quota": 10000})
        self.assertEqual((20000, 10000), (originals["vcpu_period"], originals["vcpu_quota"]))
        self.assertIn("vcpu_quota", self.qemu.restorable)

    def test_a_persistent_cap_of_the_operator_is_the_original(self):
        originals, refused = self.qemu.originals(
            {"global_period": 100000, "global_quota": 20000}, {})
        self.assertIsNone(refused)
        self.assertEqual((100000, 20000), (originals["global_period"],
                                           originals["global_quota"]))

    def test_a_global_cap_in_a_nova_instance_is_never_an_original_whatever_its_period(self):
        # A small cap is written with a longer period (51813 us for 1.93 %):
        # no period pattern tells whose it is, but Nova never sets one.
        for period, quota in ((10000, 3000), (51813, 1000), (100000, 20000)):
            originals, refused = self.qemu.originals(
                {"global_period": period, "global_quota": quota}, {"cpu_shares": 1536},
                nova=True)
            self.assertIn("Nova never sets a global cap", refused)
            self.assertEqual((100000, -1, 1536), (originals["global_period"],
                                                  originals["global_quota"],
                                                  originals["cpu_shares"]))

    def test_without_nova_a_persistent_cap_of_any_period_is_the_operators(self):
        originals, refused = self.qemu.originals(
            {"global_period": 10000, "global_quota": 3000}, {})
        self.assertIsNone(refused)
        self.assertEqual((10000, 3000), (originals["global_period"], originals["global_quota"]))

    def test_an_operator_held_knob_holds_its_whole_group(self):
        params = self.qemu.params_for(20.0, 256, 1)
        self.assertEqual({"cpu_shares"}, set(self.qemu.without(params, {"global_quota"})))
        self.assertEqual({"global_period", "global_quota"},
                         set(self.qemu.without(params, {"cpu_shares"})))
        self.assertEqual(params, self.qemu.without(params, set()))

    def test_without_any_setting_the_cgroup_default_shares_are_the_original(self):
        self.assertEqual(1024, self.qemu.originals({}, {})[0]["cpu_shares"])
        v2 = knobs.QemuPosixMapping(cgroup_version=2)
        self.assertEqual(100, v2.originals({}, {})[0]["cpu_shares"])

    def test_xen_originals_are_uncapped_with_the_persistent_weight(self):
        xen = knobs.XenCreditMapping("credit")
        self.assertEqual(({"cap": 0, "weight": 512}, None), xen.originals({"cpu_shares": 512}, {}))


class _RecordingXenDomain:
    """A recording stand-in for a libvirt domain on Xen/libxl.

    Used ONLY for the Xen contract: no Xen hypervisor runs here, so the calls
    the mapping makes are recorded and checked against libxl's contract
    (libxl's parameter names, uint types, ranges, flags 0 only).
    """

    def __init__(self):
        self.calls = []

    def setSchedulerParameters(self, params):
        self.calls.append(("setSchedulerParameters", dict(params)))

    def setSchedulerParametersFlags(self, params, flags):
        raise AssertionError("libxl accepts no scheduler flags (got %#x)" % flags)


class XenCreditContractTest(unittest.TestCase):
    """Contract tests of the Xen mapping (no Xen here; see _RecordingXenDomain)."""

    def setUp(self):
        super().setUp()
        self.xen = knobs.XenCreditMapping("credit")

    def test_parameters_are_cap_and_weight_uints_written_with_flags_zero(self):
        dom = _RecordingXenDomain()
        self.xen.apply(dom, self.xen.params_for(37.4, 512, 2))
        self.assertEqual([("setSchedulerParameters", {"cap": 37, "weight": 512})], dom.calls)
        for value in dom.calls[0][1].values():
            self.assertIs(int, type(value))

    def test_no_cap_is_zero(self):
        self.assertEqual(0, self.xen.params_for(None, None, 1)["cap"])
        self.assertIsNone(self.xen.cap_of({"cap": 0}, 1))

    def test_a_tiny_cap_never_becomes_zero_which_would_uncap(self):
        self.assertEqual(1, self.xen.params_for(0.2, None, 1)["cap"])
        self.assertEqual(1, self.xen.params_for(0, None, 1)["cap"])

    def test_cap_is_at_most_100_times_vcpus(self):
        self.assertEqual(400, self.xen.params_for(1000, None, 4)["cap"])

    @given(cap=st.one_of(st.none(), st.floats(0, 10000)), weight=st.integers(-5, 10 ** 6),
           vcpus=st.integers(1, 64))
    def test_every_request_is_within_libxl_ranges(self, cap, weight, vcpus):
        params = self.xen.params_for(cap, weight, vcpus)
        self.assertEqual({"cap", "weight"}, set(params))
        self.assertTrue(0 <= params["cap"] <= 100 * vcpus)
        self.assertTrue(1 <= params["weight"] <= 65535)
        if cap is not None:
            self.assertGreaterEqual(params["cap"], 1)

    def test_credit2_is_the_same_mapping_under_its_own_name(self):
        mapping = knobs.discover("credit2", {"cap": 0, "weight": 256})
        self.assertEqual("xen-credit2", mapping.knobs.driver)
        self.assertTrue(mapping.knobs.cap and mapping.knobs.weight)


class DiscoverTest(unittest.TestCase):

    def test_posix_with_global_quota_is_qemu(self):
        mapping = knobs.discover("posix", {"cpu_shares": 1024, "global_period": 100000,
                                           "global_quota": -1})
        self.assertEqual("qemu-posix", mapping.knobs.driver)

    def test_posix_without_global_quota_is_monitor_only(self):
        # LXC's posix scheduler has cpu_shares and vcpu_* but no global quota.
        self.assertIsNone(knobs.discover("posix", {"cpu_shares": 1024}))

    def test_test_driver_fair_scheduler_is_monitor_only(self):
        self.assertIsNone(knobs.discover("fair", {"weight": 50}))
        self.assertFalse(base.MONITOR_ONLY.actuated)


class QemuPosixPeriodTest(unittest.TestCase):

    def test_a_configured_period_sets_the_burst_length(self):
        # Xen's 10 ms slice: a 30% cap runs 3 ms of every 10 ms.
        params = knobs.QemuPosixMapping(10000).params_for(30.0, None, 1)
        self.assertEqual({"global_period": 10000, "global_quota": 3000}, params)
        self.assertAlmostEqual(30.0, knobs.QemuPosixMapping(10000).cap_of(params, 1))

    def test_a_short_period_still_keeps_the_quota_legal(self):
        params = knobs.QemuPosixMapping(10000).params_for(5.0, None, 1)
        self.assertGreaterEqual(params["global_quota"], knobs.CFS_QUOTA_MIN_US)
        self.assertAlmostEqual(5.0, 100.0 * params["global_quota"] / params["global_period"])

    def test_a_period_outside_the_cfs_bounds_is_refused(self):
        for bad in (999, 1000001):
            with self.assertRaises(ValueError):
                knobs.QemuPosixMapping(bad)

    def test_discover_passes_the_period_on(self):
        mapping = knobs.discover("posix", {"global_quota": -1, "global_period": 100000},
                                 qemu_period_us=20000)
        self.assertEqual(20000, mapping.period_us)
