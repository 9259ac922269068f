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

import dataclasses
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


_SLAS = st.builds(
    sla.SLA,
    latency_sla_us=st.one_of(st.none(), st.floats(1.0, 1e6)),
    reservation_pct=st.floats(0.0, 400.0),
    limit_pct=st.one_of(st.none(), st.floats(400.0, 3200.0)),
    shares=st.integers(1, 10000),
    io_class=st.sampled_from(sla.IO_CLASSES))
_NAMES = st.sampled_from(["p1", "p2", "8d6f0c2a4b1e4f3a", "m1.bulk", "m1.small", ""])


class ConsentTest(unittest.TestCase):
    """Who may be capped below the limit: the tenant's opt-in, or the operator's lists."""

    def test_a_vm_of_a_listed_project_or_flavor_opts_in(self):
        rule = sla.Consent("opted_in", projects={"8d6f0c2a-4b1e-4f3a-9c7d-5e2b1a0f9e8d"},
                           flavors={"m1.bulk"})
        plain = sla.SLA(reservation_pct=5.0)
        self.assertIs(plain, rule(plain, project="8D6F0C2A4B1E4F3A9C7D5E2B1A0F9E8D"))
        self.assertIs(plain, rule(plain, flavor="m1.bulk"))
        self.assertEqual(100.0, rule(plain, project="other", flavor="m1.small")
                         .effective_reservation(1))
        self.assertEqual(100.0, rule(plain).effective_reservation(1))

    def test_a_sensitive_vm_never_opts_in_by_the_operators_rule(self):
        rule = sla.Consent("opted_in", projects={"p1"}, flavors={"m1.bulk"})
        for vm in (sla.SLA(latency_sla_us=200.0), sla.SLA(io_class="sensitive")):
            held = rule(vm, project="p1", flavor="m1.bulk")
            self.assertEqual(held.effective_limit(2), held.effective_reservation(2))

    def test_the_default_rule_is_opted_in_and_describes_itself(self):
        self.assertEqual("opted_in", sla.Consent().rule)
        self.assertEqual("opted_in (io_class=bulk)", sla.Consent().describe())
        self.assertEqual(
            "opted_in (io_class=bulk; projects: 2; flavors: m1.bulk, m1.xbulk)",
            sla.Consent("opted_in", {"a", "b", ""}, {"m1.xbulk", "m1.bulk"}).describe())
        self.assertTrue(sla.Consent("all").describe().startswith("all "))
        with self.assertRaises(ValueError):
            sla.Consent("nobody")

    @given(_SLAS, st.frozensets(_NAMES, max_size=3), st.frozensets(_NAMES, max_size=3),
           st.one_of(st.none(), _NAMES), st.one_of(st.none(), _NAMES), st.integers(1, 64))
    def test_under_opted_in_a_vm_that_did_not_consent_is_held_at_its_limit(
            self, vm, projects, flavors, project, flavor, vcpus):
        rule = sla.Consent("opted_in", projects, flavors)
        applied = rule(vm, project=project, flavor=flavor)
        listed = bool(project) and project in projects or bool(flavor) and flavor in flavors
        consents = vm.io_class == "bulk" or (listed and vm.io_class != "sensitive")
        self.assertEqual(consents, rule.consents(vm, project, flavor))
        if consents:
            self.assertIs(vm, applied)
        else:
            self.assertEqual(applied.effective_limit(vcpus), applied.effective_reservation(vcpus))
            self.assertEqual(vm.effective_limit(vcpus), applied.effective_limit(vcpus))
            self.assertEqual(dataclasses.replace(vm, reservation_pct=0.0),
                             dataclasses.replace(applied, reservation_pct=0.0))
        if vm.sensitive:
            self.assertFalse(rule.consents(vm, project, flavor))
        # The paper's market: every VM as it asked.
        self.assertIs(vm, sla.Consent("all", projects, flavors)(vm, project, flavor))


class OverflowTest(unittest.TestCase):

    def test_huge_numbers_are_an_sla_error_not_a_crash(self):
        for key in ("resex:latency_sla_us", "resex:shares"):
            with self.assertRaises(exceptions.SLAError):
                sla.parse({key: 10**400})
