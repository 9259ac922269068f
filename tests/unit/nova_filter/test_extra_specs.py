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

"""The resex: extra-spec validators, as nova-api loads them (entry point)."""

import unittest

from nova.api.validation.extra_specs import validators
from nova import exception

from resex_libvirt import sla
from resex_nova import extra_specs


class ExtraSpecsTest(unittest.TestCase):

    def assertInvalid(self, key, value, fragment):
        with self.assertRaises(exception.ValidationError) as ctx:
            validators.validate(key, value)
        self.assertIn(fragment, str(ctx.exception))

    def test_every_sla_key_has_a_validator_registered_through_the_entry_point(self):
        self.assertEqual(set(sla.KEYS), {v.name for v in extra_specs.register()})
        for key in sla.KEYS:
            self.assertIsInstance(validators.VALIDATORS[key], extra_specs.SLAKeyValidator)
        self.assertIn("resex", validators.NAMESPACES)

    def test_good_values_pass(self):
        for key, value in (("resex:latency_sla_us", "209"), ("resex:latency_sla_us", "2.5e2"),
                           ("resex:interference_threshold_pct", "10"),
                           ("resex:cpu_reservation_pct", "0"), ("resex:cpu_limit_pct", "150.5"),
                           ("resex:shares", "65535"), ("resex:io_class", "bulk")):
            validators.validate(key, value)

    def test_bad_values_fail_with_the_keys_own_reason(self):
        self.assertInvalid("resex:latency_sla_us", "fast", "resex:latency_sla_us='fast': must "
                                                           "be a number")
        self.assertInvalid("resex:latency_sla_us", "nan", "resex:latency_sla_us='nan': must "
                                                          "be finite")
        self.assertInvalid("resex:latency_sla_us", "0", "resex:latency_sla_us='0': must be >= 1")
        self.assertInvalid("resex:interference_threshold_pct", "5000", "must be <= 1000")
        self.assertInvalid("resex:cpu_limit_pct", "0.5", "must be >= 1")
        self.assertInvalid("resex:shares", "1.5", "resex:shares='1.5': must be an integer")
        self.assertInvalid("resex:shares", "0", "resex:shares='0': must be >= 1")
        self.assertInvalid("resex:io_class", "huge",
                           "resex:io_class='huge': must be one of normal, bulk, sensitive")
        self.assertInvalid("resex:latency_statistic", "p50",
                           "resex:latency_statistic='p50': must be one of mean, p99")

    def test_a_spelling_only_the_keys_parser_tolerates_fails_novas_check(self):
        self.assertInvalid("resex:io_class", "BULK", "is not one of: normal, bulk, sensitive")
        self.assertInvalid("resex:latency_sla_us", "1_000", "is not of the format")

    def test_an_unknown_resex_key_is_rejected(self):
        self.assertInvalid("resex:latency_sla", "50", "does not appear to be a valid extra spec")

    def test_the_number_pattern_accepts_exactly_what_the_sla_parser_accepts(self):
        key = sla.KEYS["resex:latency_sla_us"]
        validator = validators.VALIDATORS[key.name]
        for value in ("1", "1.", ".5e1", "+3", "1e3", " 5", "inf", "0x10", "1_000", ""):
            try:
                key.parse(value)
                parsed = True
            except Exception:  # noqa: B902 - any refusal
                parsed = False
            try:
                validator.validate(key.name, value)
                validated = True
            except exception.ValidationError:
                validated = False
            if validated:
                self.assertTrue(parsed, value)
