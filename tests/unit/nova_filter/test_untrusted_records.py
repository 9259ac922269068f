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

"""Whatever record the board accepts, the weigher weighs: no request meets an exception.

The board's parser (:mod:`tests.unit.board.test_untrusted_records`) bounds
what a compute node can make the scheduler compute with; here every record
it accepts, hostile or extreme, goes through the reader's admission state
and :func:`resex_nova.weigher.raw_weight` for both kinds of request.
"""

import json
import math
import random
import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from resex_libvirt.board import admission
from resex_libvirt.board import reader as reader_mod
from resex_libvirt.board import report as report_mod
from resex_nova import rules
from resex_nova import weigher
from tests.unit.board import hostile
from tests.unit.board import reports

#: Figures at and past what a record may carry (the past ones are rejected).
EXTREMES = [
    {"latency_inflation_pct": 1.7e308}, {"latency_inflation_pct": report_mod.MAX_INFLATION_PCT},
    {"vms": 10 ** 400, "sensitive_vms": 10 ** 400, "heavy_io_vms": 10 ** 400},
    {"vms": report_mod.MAX_COUNT, "sensitive_vms": report_mod.MAX_COUNT,
     "heavy_io_vms": report_mod.MAX_COUNT},
    {"ts": 1.7e308}, {"link_utilisation": 1.0, "untaxable_utilisation": 1.0},
]
FLOORS = (0.0, 1e-6, 0.5, 1.0, 100.0)
REQUESTS = (
    (rules.Request(rules.SENSITIVE, 10.0), 10.0),
    (rules.Request(rules.SENSITIVE, 0.0), 0.0),
    (rules.Request(rules.SENSITIVE, 1e9), 1e9),
    (rules.Request(rules.BULK), 0),
)


class AcceptedRecordsWeighTest(unittest.TestCase):

    def weigh(self, records):
        state = None
        for rec in records:
            state = admission.advance(state, rec, 20.0, 0.3)
            entry = reader_mod.Entry(rec, state)
            for floor in FLOORS:
                for request, limit in REQUESTS:
                    for verdict in (rules.GOOD, rules.BAD):
                        w = weigher.raw_weight(request, verdict, entry, limit, floor)
                        self.assertTrue(math.isfinite(w), (rec, floor, request, verdict))

    def test_extreme_figures_are_rejected_or_weighed(self):
        # A 400-digit count made raw_weight raise OverflowError (0.5 * count),
        # and so did an inflation near the largest float with a noise floor
        # under 1 (round(latched / floor)).
        accepted = []
        for fields in EXTREMES:
            data = reports.make().to_dict()
            data.update(fields)
            try:
                accepted.append(report_mod.HostReport.from_json(json.dumps(data)))
            except report_mod.InvalidReport:
                self.assertTrue(any(isinstance(v, int) and v > report_mod.MAX_COUNT
                                    or v == 1.7e308 and k != "ts" for k, v in fields.items()))
        self.assertEqual(4, len(accepted))
        self.weigh(accepted)

    @settings(max_examples=30, deadline=None, database=None)
    @given(st.integers(0, 2 ** 64))
    def test_every_accepted_hostile_record_weighs_to_a_finite_number(self, seed):
        rng = random.Random(seed)
        accepted = []
        while len(accepted) < 10:
            try:
                accepted.append(report_mod.HostReport.from_json(hostile.record(rng, "c1")[0]))
            except report_mod.InvalidReport:
                pass
        self.weigh(accepted)
