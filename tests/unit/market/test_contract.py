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

"""The market's step is a contract: policies touch only the columns they declare."""

import unittest

import numpy as np

from resex_libvirt.market import market as market_mod
from resex_libvirt.market import policy as policy_mod
from resex_libvirt.market import table
from tests.unit.market.replay import make_fixture

#: Every policy this package installs, with parameters that reach all its rules.
POLICIES = (("none", {}), ("free_market", {}), ("io_shares", {}),
            ("io_shares", {"use_balance": True}), ("latency_target", {}),
            ("latency_target", {"use_balance": True, "boost": 2.0}))


def _run(stream, name, kwargs, guard, steps=1500):
    params = market_mod.MarketParams(interval_s=0.001,
                                     intervals_per_epoch=stream["intervals_per_epoch"],
                                     pcpus=stream["pcpus"])
    market = market_mod.Market(params, policy_mod.load(name, **kwargs), guard=guard)
    out = []
    for rec in stream["steps"][:steps]:
        for vm in rec["leave"]:
            market.remove(vm)
        for d in rec["join"]:
            market.add(make_fixture.spec_of(d))
        samples, windows = make_fixture.inputs(rec)
        decisions = market.step(samples, windows)
        out.append(sorted((vm, tuple(d)) for vm, d in decisions.items()))
        if rec["end_epoch"]:
            out.append(market.end_epoch().columns["balance"].tolist())
    return out


class CapPolicy(policy_mod.Policy):
    """Writes the market's ``cap`` column: what the contract forbids."""

    name = "cheat"

    def decide_slots(self, view):
        view.t.cap[:] = 1.0


class PeekPolicy(policy_mod.Policy):
    """Reads the controller's bookkeeping through the market: not a declared column."""

    name = "peek"

    def decide_slots(self, view):
        view.t.t_cap_area


class ContractTest(unittest.TestCase):

    def test_every_builtin_policy_decides_the_same_through_the_read_only_view(self):
        stream = make_fixture.make_stream(*make_fixture.STREAMS[1])
        for name, kwargs in POLICIES:
            with self.subTest(policy=name, **kwargs):
                self.assertEqual(_run(stream, name, kwargs, guard=False),
                                 _run(stream, name, kwargs, guard=True))

    def test_a_policy_writing_a_market_column_is_refused(self):
        market = market_mod.Market(market_mod.MarketParams(), CapPolicy(), guard=True)
        market.add(make_fixture.spec_of({"vm": "a", "vcpus": 1, "sla": {}}))
        with self.assertRaises(ValueError):
            market.step({}, {})

    def test_a_policy_reading_an_undeclared_column_is_refused(self):
        market = market_mod.Market(market_mod.MarketParams(), PeekPolicy(), guard=True)
        market.add(make_fixture.spec_of({"vm": "a", "vcpus": 1, "sla": {}}))
        with self.assertRaises(AttributeError):
            market.step({}, {})

    def test_a_policy_may_write_the_columns_it_declares(self):
        class Own(policy_mod.Policy):
            name = "own"
            columns = {"mine": (0.0, np.float64)}

            def decide_slots(self, view):
                view.t.mine[:] = view.t.cap
                view.t.mine = view.t.mine + 1.0

        market = market_mod.Market(market_mod.MarketParams(), Own(), guard=True)
        market.add(make_fixture.spec_of({"vm": "a", "vcpus": 1, "sla": {}}))
        market.step({}, {})
        self.assertEqual([101.0], market.view.t.mine.tolist())


class HalfCap(policy_mod.Policy):
    """A third-party policy with the mapping interface: every VM at half its limit."""

    name = "half_cap"

    def __init__(self):
        self.epochs = []

    def decide(self, view):
        assert isinstance(view, policy_mod.MarketView)
        return {vm: (view.limit(vm) / 2.0, 1.0) for vm in view.samples}

    def start_epoch(self, view):
        self.epochs.append((view.tick, sorted(view.caps.items())))


class MappingPolicyTest(unittest.TestCase):

    def test_a_mapping_policy_is_asked_through_the_column_interface_by_an_adapter(self):
        inner = HalfCap()
        market = market_mod.Market(market_mod.MarketParams(intervals_per_epoch=2), inner,
                                   guard=True)
        self.assertIsInstance(market.policy, policy_mod.MappingPolicy)
        self.assertEqual("half_cap", market.policy.name)
        for vm in ("a", "b"):
            market.add(make_fixture.spec_of({"vm": vm, "vcpus": 1, "sla": {}}))
        samples = {"a": make_fixture.records.Sample("a", 0.0, 10.0)}
        decisions = market.step(samples, {})
        self.assertEqual((50.0, 100.0), (decisions["a"].cap_pct, decisions["b"].cap_pct))
        market.step(samples, {})
        self.assertEqual((), market.changed)       # the same answers: nothing to write
        market.end_epoch()
        self.assertEqual([(0, [("a", 50.0), ("b", 100.0)])], inner.epochs)


class LayoutTest(unittest.TestCase):

    def test_the_layout_is_the_same_object_until_a_vm_joins_or_leaves(self):
        t = table.Table()
        t.add("a")
        first = t.layout()
        self.assertIs(first, t.layout())
        t.add("b")
        self.assertEqual((("a", "b"), t.version), tuple(t.layout()))
        self.assertIsNot(first, t.layout())

    def test_align_keeps_rows_by_vm_and_fills_new_ones(self):
        t = table.Table()
        t.column("x", -1.0)
        for vm in "abc":
            t.add(vm)
        t.x[:] = [1.0, 2.0, 3.0]
        t.align(("c", "a", "d"))
        self.assertEqual(["c", "a", "d"], t.names)
        self.assertEqual({"c": 0, "a": 1, "d": 2}, t.slots)
        self.assertEqual([3.0, 1.0, -1.0], t.x.tolist())
