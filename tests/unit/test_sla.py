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

"""The resex: keys: one schema for the agent, the simulator and Nova."""

import unittest

from hypothesis import given
from hypothesis import strategies as st

from resex_libvirt import exceptions
from resex_libvirt import sla


class ParseTest(unittest.TestCase):

    def test_every_key_parses_from_its_string_form(self):
        got = sla.parse({"resex:latency_sla_us": "209", "resex:interference_threshold_pct": "5",
                         "resex:cpu_reservation_pct": "10", "resex:cpu_limit_pct": "150",
                         "resex:shares": "200", "resex:io_class": "BULK"})
        self.assertEqual(209.0, got.latency_sla_us)
        self.assertEqual(5.0, got.interference_threshold_pct)
        self.assertEqual(10.0, got.reservation_pct)
        self.assertEqual(150.0, got.limit_pct)
        self.assertEqual(200, got.shares)
        # A latency SLA makes the VM sensitive whatever io_class says.
        self.assertEqual("sensitive", got.io_class)

    def test_the_sla_statistic_is_the_mean_unless_a_flavor_says_p99(self):
        self.assertEqual("mean", sla.parse({"resex:latency_sla_us": "209"}).latency_statistic)
        got = sla.parse({"resex:latency_sla_us": "265", "resex:latency_statistic": " P99 "})
        self.assertEqual("p99", got.latency_statistic)
        self.assertEqual({"resex:latency_sla_us": 265.0, "resex:latency_statistic": "p99"},
                         sla.to_specs(got))
        with self.assertRaisesRegex(exceptions.SLAError,
                                    "resex:latency_statistic=.*one of mean, p99"):
            sla.parse({"resex:latency_statistic": "p95"})

    def test_keys_outside_the_namespace_are_ignored(self):
        self.assertEqual(sla.SLA(), sla.parse({"hw:cpu_policy": "dedicated"}))

    def test_unknown_resex_key_is_an_error_naming_it(self):
        with self.assertRaisesRegex(exceptions.SLAError, "resex:latency_us.*unknown"):
            sla.parse({"resex:latency_us": "5"})

    def test_bad_values_name_the_key_and_the_rule(self):
        cases = {"resex:latency_sla_us": ("-3", ">= 1"), "resex:shares": ("1.5", "integer"),
                 "resex:io_class": ("heavy", "one of"), "resex:cpu_limit_pct": ("nan", "finite"),
                 "resex:interference_threshold_pct": ("abc", "number")}
        for key, (raw, rule) in cases.items():
            with self.assertRaisesRegex(exceptions.SLAError, "%s=.*%s" % (key, rule)):
                sla.parse({key: raw})

    def test_limit_below_reservation_is_refused_as_a_conflict_between_keys(self):
        with self.assertRaisesRegex(exceptions.SLAConflict, "cpu_limit_pct"):
            sla.parse({"resex:cpu_reservation_pct": "50", "resex:cpu_limit_pct": "20"})
        with self.assertRaises(exceptions.SLAError) as ctx:
            sla.parse({"resex:cpu_limit_pct": "0"})
        self.assertNotIsInstance(ctx.exception, exceptions.SLAConflict)

    def test_under_consent_all_every_vm_keeps_its_reservation(self):
        plain = sla.SLA(reservation_pct=10.0)
        self.assertIs(plain, sla.under_consent(plain, "all"))

    def test_under_consent_opted_in_only_bulk_vms_may_go_below_their_limit(self):
        bulk = sla.SLA(io_class="bulk", reservation_pct=5.0)
        self.assertIs(bulk, sla.under_consent(bulk, "opted_in"))
        for vm in (sla.SLA(), sla.SLA(latency_sla_us=200.0), sla.SLA(io_class="sensitive")):
            held = sla.under_consent(vm, "opted_in")
            self.assertEqual(200.0, held.effective_reservation(2))
            self.assertEqual(held.effective_limit(2), held.effective_reservation(2))
        limited = sla.under_consent(sla.SLA(limit_pct=150.0), "opted_in")
        self.assertEqual(150.0, limited.effective_reservation(4))
        with self.assertRaises(ValueError):
            sla.under_consent(sla.SLA(), "nobody")

    def test_on_error_reports_and_keeps_the_default(self):
        errors = []
        got = sla.parse({"resex:shares": "0", "resex:latency_sla_us": "100"},
                        base=sla.SLA(shares=300), on_error=errors.append)
        self.assertEqual(300, got.shares)
        self.assertEqual(100.0, got.latency_sla_us)
        self.assertEqual(["resex:shares"], [e.key for e in errors])

    def test_effective_limit_is_bounded_by_the_vcpus(self):
        self.assertEqual(200.0, sla.SLA().effective_limit(2))
        self.assertEqual(150.0, sla.SLA(limit_pct=150.0).effective_limit(2))
        self.assertEqual(100.0, sla.SLA(limit_pct=150.0).effective_limit(1))
        self.assertEqual(100.0, sla.SLA(reservation_pct=300.0).effective_reservation(1))

    @given(st.dictionaries(st.sampled_from(sorted(sla.KEYS)),
                           st.one_of(st.text(max_size=12), st.integers(), st.floats())))
    def test_parse_either_succeeds_or_raises_sla_error(self, specs):
        try:
            got = sla.parse(specs)
        except exceptions.SLAError:
            return
        self.assertEqual(got, sla.parse(sla.to_specs(got)))


class OverflowTest(unittest.TestCase):

    def test_huge_numbers_are_an_sla_error_not_a_crash(self):
        for key in ("resex:latency_sla_us", "resex:shares"):
            with self.assertRaises(exceptions.SLAError):
                sla.parse({key: 10**400})
