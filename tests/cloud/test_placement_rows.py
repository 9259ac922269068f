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


"""The Placement rows' readings of the board and of Placement's log (no cloud)."""

import unittest

from tests.cloud import scenarios

NODE1 = "997cd685-ef0c-4c81-9e3d-21bb3a2ef123"
NODE2 = "93e7230b-1eb1-4c4f-b8aa-3680b74e509d"
#: Placement's request log as the cloud wrote it: nova-compute's calls carry
#: a global request id, resex-placement-sync's do not.
PLACEMENT_LOG = (
    '2026-11-28 12:58:09.278 15133 INFO placement.requestlog [None req-fa7e f66c ec32 - - '
    'default default] 127.0.0.1 "PUT /resource_providers/%(n1)s/traits" status: 200 len: '
    '1853 microversion: 1.18\n'
    '2026-11-28 12:58:41.260 15133 INFO placement.requestlog [req-3b72 req-4793 f66c ec32 - - '
    'default default] 127.0.0.1 "PUT /resource_providers/%(n1)s/traits" status: 200 len: '
    '1880 microversion: 1.6\n'
    '2026-11-28 12:58:41.300 15133 INFO placement.requestlog [req-3b73 req-4794 f66c ec32 - - '
    'default default] 127.0.0.1 "PUT /resource_providers/%(n1)s/traits" status: 409 len: '
    '300 microversion: 1.6\n'
    '2026-11-28 12:58:41.385 15133 INFO placement.requestlog [req-1186 req-0708 f66c ec32 - - '
    'default default] 127.0.0.1 "PUT /resource_providers/%(n1)s/traits" status: 200 len: '
    '1853 microversion: 1.6\n'
    '2026-11-28 12:58:42.000 15133 INFO placement.requestlog [req-1187 req-0709 f66c ec32 - - '
    'default default] 127.0.0.1 "PUT /resource_providers/%(n2)s/traits" status: 200 len: '
    '1853 microversion: 1.6\n'
    '2026-11-28 12:58:43.000 15133 INFO placement.requestlog [req-1188 req-0710 f66c ec32 - - '
    'default default] 127.0.0.1 "GET /resource_providers/%(n1)s/traits" status: 200 len: '
    '1853 microversion: 1.6\n' % {"n1": NODE1, "n2": NODE2})


class NovaTraitWritesTest(unittest.TestCase):

    def test_only_nova_computes_successful_writes_of_that_provider_count(self):
        self.assertEqual(2, scenarios.nova_trait_writes(PLACEMENT_LOG, NODE1))
        self.assertEqual(1, scenarios.nova_trait_writes(PLACEMENT_LOG, NODE2))

    def test_none_in_a_log_of_the_service_alone(self):
        self.assertEqual(0, scenarios.nova_trait_writes(PLACEMENT_LOG.splitlines()[0], NODE1))


class ClosingRecordsTest(unittest.TestCase):

    RECORDS = {100.0: 2.0, 101.0: 18.0, 102.0: 19.0, 110.0: 18.5, 111.0: 18.7}

    def test_the_closing_record_is_the_last_published_before_the_set(self):
        closing, first = scenarios.closing_records(self.RECORDS, 110.3, 10.0)
        self.assertEqual(110.0, closing)
        self.assertEqual(101.0, first)

    def test_a_record_published_at_the_set_itself_counts(self):
        self.assertEqual(110.0, scenarios.closing_records(self.RECORDS, 110.0, 10.0)[0])

    def test_none_when_nothing_was_published_before_or_over(self):
        self.assertEqual((None, None), scenarios.closing_records({100.0: 2.0}, 99.0, 10.0))
