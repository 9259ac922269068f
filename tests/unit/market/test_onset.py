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

"""The onset rule: a sustained window over the bound cuts the heavy senders at once."""

import types
import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy as np

from resex_libvirt.market import latency_target
from resex_libvirt.market import onset
from resex_libvirt.market import policy
from resex_libvirt.market import table as table_mod
from resex_libvirt import sla
from tests.unit.market.test_beyond_paper import make_market
from tests.unit.market.test_beyond_paper import plant
from tests.unit.market.test_beyond_paper import sample
from tests.unit.market.test_beyond_paper import SENSITIVE
from tests.unit.market.test_beyond_paper import window

BOUND = 200.0 * 1.10


def run(intervals=300, victim_mtus=64, bulk_mtus=2048, bulk_sla=None, **kwargs):
    """The victim against one bulk sender (``plant``: +30% uncapped); the bulk's caps."""
    pol = latency_target.LatencyTarget(**kwargs)
    m = make_market(pol, [("victim", SENSITIVE), ("bulk", bulk_sla or sla.SLA())])
    caps, reasons = [], []
    for _ in range(intervals):
        cap = m.decision("bulk").cap_pct
        m.step({"victim": sample("victim", victim_mtus), "bulk": sample("bulk", bulk_mtus)},
               {"victim": window(plant(cap))})
        caps.append(m.decision("bulk").cap_pct)
        reasons.append(m.reason("bulk"))
    return pol, caps, reasons


def first_within(caps):
    return next(i for i, c in enumerate(caps) if plant(c) <= BOUND)


class OnsetTest(unittest.TestCase):

    def test_the_first_window_over_the_bound_cuts_to_the_models_cap(self):
        pol, caps, reasons = run(intervals=12)
        # Nothing before the window (10 intervals) is over.
        self.assertEqual([100.0] * 9, caps[:9])
        # +30% over the SLA, aiming at 8.5%: the cap x 0.085 / 0.30 (the
        # controller's own update of the same interval may lower it by its step).
        model = 100.0 * pol.opts.target * 0.10 / 0.30
        self.assertLessEqual(caps[9], model + 1e-9)
        self.assertGreaterEqual(caps[9], model * (1.0 - pol.opts.max_step) - 1e-9)
        self.assertEqual(policy.TARGET, reasons[9])

    def test_it_protects_sooner_than_the_controller_alone(self):
        _pol, fast, _ = run(intervals=2000)
        _pol, slow, _ = run(intervals=2000, onset_window=0.0)
        self.assertLessEqual(first_within(fast), 10)
        self.assertGreater(first_within(slow), 10 * first_within(fast))

    def test_after_the_cut_the_controller_moves_the_cap_by_bounded_steps(self):
        pol, caps, _ = run(intervals=2000)
        cut = first_within(caps)
        for before, after in zip(caps[cut:], caps[cut + 1:]):
            self.assertLessEqual(after, before * (1.0 + pol.opts.max_step) + 1e-9)
            self.assertGreaterEqual(after, before * (1.0 - pol.opts.max_step) - 1e-9)
        # It settles where the controller alone does.
        _pol, slow, _ = run(intervals=2000, onset_window=0.0)
        self.assertAlmostEqual(sum(slow[1000:]) / 1000.0, sum(caps[1000:]) / 1000.0, delta=2.0)

    def test_an_equal_sender_is_left_to_the_controller(self):
        pol, caps, _ = run(intervals=12, victim_mtus=2048)
        self.assertGreaterEqual(caps[9], 100.0 * (1.0 - pol.opts.max_step) - 1e-9)

    def test_a_vm_with_a_latency_sla_is_never_cut_at_the_onset(self):
        pol, caps, _ = run(intervals=12, bulk_sla=sla.SLA(latency_sla_us=5000.0))
        self.assertGreaterEqual(caps[9], 100.0 * (1.0 - pol.opts.max_step) - 1e-9)

    def test_the_floor_bounds_the_cut(self):
        _pol, caps, _ = run(intervals=12, onset_floor=0.9)
        self.assertGreaterEqual(caps[9], 90.0 * 0.75 - 1e-9)


def columns(rows):
    """``(vms, own)``: the step's columns the onset rule reads and its own, one row per dict."""
    n = len(rows)
    vms = types.SimpleNamespace()
    for name, fill, dtype in (("reported", False, bool), ("window_count", 0, np.int64),
                              ("window_mean_us", np.nan, np.float64), ("tx_mtus", 0, np.int64),
                              ("sensitive", False, bool),
                              ("latency_sla_us", np.nan, np.float64),
                              ("threshold_pct", np.nan, np.float64),
                              ("cap_pct", 100.0, np.float64), ("limit_pct", 100.0, np.float64),
                              ("floor_pct", 1.0, np.float64)):
        column = np.full(n, fill, dtype=dtype)
        for k, r in enumerate(rows):
            column[k] = r.get(name, fill)
        column.setflags(write=False)          # the rule reads the step, never writes it
        setattr(vms, name, column)
    own = table_mod.Table()
    for name, (fill, dtype) in onset.COLUMNS.items():
        own.column(name, fill, dtype)
    for k in range(n):
        own.add("vm%d" % k)
    return vms, own


VM = st.fixed_dictionaries({
    "sensitive": st.booleans(),
    "latency_sla_us": st.floats(50.0, 5000.0),
    "threshold_pct": st.floats(1.0, 100.0),
    "window_mean_us": st.floats(10.0, 20000.0),
    "window_count": st.integers(0, 30),
    "tx_mtus": st.integers(0, 5000),
    "cap_pct": st.floats(1.0, 100.0),
    "floor_pct": st.floats(1.0, 20.0),
})


class OnsetPropertiesTest(unittest.TestCase):

    @settings(max_examples=200, deadline=None)
    @given(st.lists(VM, min_size=1, max_size=6), st.floats(0.01, 1.0), st.floats(0.0, 3.0),
           st.floats(0.0, 1.0))
    def test_cuts_need_a_victim_over_its_bound_and_stay_within_their_bounds(
            self, vms, floor, heavier, target):
        for r in vms:
            r["reported"] = r["sensitive"]
            if not r["sensitive"]:
                r["latency_sla_us"] = r["threshold_pct"] = np.nan
            r["floor_pct"] = min(r["floor_pct"], r["cap_pct"])
        t, own = columns(vms)
        before = t.cap_pct.copy()
        opts = types.SimpleNamespace(onset_window=0.01, onset_floor=floor,
                                     onset_heavier=heavier)
        aim = target * t.threshold_pct / 100.0
        state = onset.Onset()
        for _ in range(10):
            onset.observe(t, own)
            everyone = np.ones(len(own), dtype=bool)
            rows, caps, _load = onset.cuts(state, t, own, opts, 1000, aim, everyone)
        sens = t.sensitive
        count = np.array([r["window_count"] for r in vms])
        # The window's mean as the rule sums it: ten intervals' count x mean.
        total = np.zeros(len(vms))
        for _ in range(10):
            total += np.array([r["window_mean_us"] for r in vms]) * count
        mean = np.divide(total, 10 * count, out=np.zeros(len(vms)), where=count > 0)
        over = sens & (count > 0) & (mean > t.latency_sla_us * (1.0 + t.threshold_pct / 100.0))
        if not over.any():
            self.assertEqual(0, len(rows))
            return
        sent = np.zeros(len(vms))
        for _ in range(10):
            sent += np.array([r["tx_mtus"] for r in vms])
        demand = np.where(before < 100.0, sent * 100.0 / before, sent)
        for k, cap in zip(rows.tolist(), caps.tolist()):
            self.assertFalse(sens[k])                            # never a VM with an SLA
            self.assertLessEqual(cap, before[k] + 1e-9)          # never raised
            self.assertGreaterEqual(cap, t.floor_pct[k] - 1e-9)  # never under its floor
            self.assertGreaterEqual(cap, min(before[k], max(t.floor_pct[k], floor * before[k]))
                                    - 1e-9)
            # It interferes with a victim over its bound: it sent at least
            # ``heavier`` times that victim's own I/O.
            self.assertTrue(any(demand[k] >= heavier * demand[v] and demand[k] > 0.0
                                for v in over.nonzero()[0].tolist() if v != k))
        self.assertTrue(own.on_cut[rows].all())
