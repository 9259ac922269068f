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

"""The policy contract: a read-only step in, an answer out; reasons are the market's."""

import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st
import numpy as np

from resex_libvirt.market import market as market_mod
from resex_libvirt.market import memo
from resex_libvirt.market import policy as policy_mod
from resex_libvirt.market import records
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
        out.append(sorted((vm, tuple(d), market.reason(vm)) for vm, d in decisions.items()))
        if rec["end_epoch"]:
            out.append(market.end_epoch().columns["balance"].tolist())
    return out


def _market(policy, vms=("a", "b"), **params):
    market = market_mod.Market(market_mod.MarketParams(**params), policy, guard=True)
    for vm in vms:
        market.add(make_fixture.spec_of({"vm": vm, "vcpus": 1, "sla": {}}))
    return market


class Probe(policy_mod.Policy):
    """Runs ``act(step)`` in its decide and keeps the step and what the act raised."""

    name = "probe"

    def __init__(self, act):
        self.act, self.steps, self.raised = act, [], []

    def decide(self, step):
        self.steps.append(step)
        try:
            self.act(step)
        except (AttributeError, ValueError, TypeError) as exc:
            self.raised.append(exc)
        return None


#: The step's columns by their full names (the market's and the interval's samples).
COLUMNS = sorted(policy_mod.MARKET_COLUMNS) + sorted(policy_mod.SAMPLE_COLUMNS)


class ContractTest(unittest.TestCase):

    def test_every_builtin_policy_reads_the_markets_columns_as_they_are(self):
        # guard=True checks, every step, that the views are of the market's columns.
        stream = make_fixture.make_stream(*make_fixture.STREAMS[1])
        for name, kwargs in POLICIES:
            with self.subTest(policy=name, **kwargs):
                self.assertEqual(_run(stream, name, kwargs, guard=False),
                                 _run(stream, name, kwargs, guard=True))

    def test_a_market_that_replaces_a_column_behind_the_policys_view_is_caught(self):
        market = _market(policy_mod.NoControl())
        market.step({}, {})
        market.table.cap = market.table.cap.copy()
        with self.assertRaisesRegex(RuntimeError, "cap"):
            market.step({}, {})

    def test_the_step_names_its_columns_in_full(self):
        probe = Probe(lambda step: None)
        market = _market(probe)
        market.step({"a": records.Sample("a", 0.0, 30.0, tx_mtus=4)}, {})
        vms = probe.steps[0].vms
        self.assertEqual(("a", "b"), vms.names)
        self.assertEqual([30.0, 0.0], vms.cpu_pct.tolist())
        self.assertEqual([True, False], vms.sampled.tolist())
        self.assertEqual([100.0, 100.0], vms.limit_pct.tolist())
        self.assertEqual([policy_mod.UNCAPPED] * 2, vms.reason.tolist())
        for short in ("t", "intf", "win", "dweight", "t_cap_area", "cap", "limit"):
            with self.assertRaises(AttributeError):
                getattr(vms, short)

    def test_a_policy_may_write_the_columns_it_declares(self):
        class Own(policy_mod.Policy):
            name = "own"
            columns = {"mine": (0.0, np.float64)}

            def decide(self, step):
                step.state.mine[:] = step.vms.cap_pct
                step.state.mine = step.state.mine + 1.0

        market = _market(Own(), vms=("a",))
        market.step({}, {})
        self.assertEqual([101.0], market.state.mine.tolist())

    def test_the_answer_is_applied_clamped_with_its_reasons_and_weights(self):
        class Half(policy_mod.Policy):
            name = "half"

            def decide(self, step):
                answer = policy_mod.Answer().cap([0], 50.0, 2.0).cap([1], 0.0, 1.0)
                answer.weights = {0: 2.0}
                return answer.why([0, 1], ["half", "floor"])

        market = _market(Half())
        decisions = market.step({}, {})
        self.assertEqual((50.0, 512, 2.0), tuple(decisions["a"]))
        self.assertEqual((1.0, 256, 1.0), tuple(decisions["b"]))     # the minimum cap
        self.assertEqual({"a": "half", "b": "floor"}, market.reasons())

    def test_a_reason_stays_until_the_policy_changes_it_and_leaves_with_its_vm(self):
        answers = [policy_mod.Answer().why([0, 1], policy_mod.TAX), None,
                   policy_mod.Answer().why([0], policy_mod.DECAY)]       # b, alone

        class Scripted(policy_mod.Policy):
            name = "scripted"

            def decide(self, step):
                return answers.pop(0) if answers else None

        market = _market(Scripted())
        market.step({}, {})
        market.step({}, {})
        self.assertEqual({"a": policy_mod.TAX, "b": policy_mod.TAX}, market.reasons())
        market.remove("a")                    # b moves up to row 0
        market.step({}, {})
        self.assertEqual({"b": policy_mod.DECAY}, market.reasons())
        market.add(make_fixture.spec_of({"vm": "a", "vcpus": 1, "sla": {}}))
        self.assertEqual(policy_mod.UNCAPPED, market.reason("a"))
        self.assertEqual(policy_mod.UNCAPPED, market.reason("nobody"))

    def test_the_epoch_hook_answers_reasons_only(self):
        class CapsAtEpoch(policy_mod.Policy):
            name = "caps_at_epoch"

            def decide(self, step):
                return None

            def start_epoch(self, step):
                return policy_mod.Answer().cap([0], 10.0)

        market = _market(CapsAtEpoch())
        market.step({}, {})
        with self.assertRaisesRegex(ValueError, "only reasons"):
            market.end_epoch()

    def test_the_epoch_hook_sees_the_first_interval_of_the_next_epoch(self):
        probe = Probe(lambda step: None)
        probe.start_epoch = probe.decide
        market = _market(probe, intervals_per_epoch=4)
        for _ in range(3):
            market.step({}, {})
        market.end_epoch()
        self.assertEqual([0, 1, 2, 0], [s.interval for s in probe.steps])
        self.assertEqual([0, 0, 0, 1], [s.epoch for s in probe.steps])
        self.assertEqual(1.0, probe.steps[-1].epoch_fraction_left + 0.25)


class ReadOnlyStepTest(unittest.TestCase):
    """A policy that tries to write into the step fails, and the market is unchanged."""

    @settings(max_examples=60, deadline=None)
    @given(st.sampled_from(COLUMNS), st.lists(st.integers(0, 2), min_size=1, max_size=3),
           st.booleans())
    def test_no_column_of_the_step_can_be_written(self, column, rows, assign):
        def act(step):
            if assign:
                setattr(step.vms, column, np.zeros(len(step.vms)))
            else:
                getattr(step.vms, column)[rows] = 0
        probe = Probe(act)
        market = _market(probe, vms=("a", "b", "c"))
        samples = {vm: records.Sample(vm, 0.0, 40.0, tx_mtus=8) for vm in "abc"}
        before = market.step(samples, {})
        snapshot = {name: market.table.mapping(c) for name, c in {
            **policy_mod.MARKET_COLUMNS, **policy_mod.SAMPLE_COLUMNS}.items()}
        self.assertEqual(1, len(probe.raised))
        self.assertIsInstance(probe.raised[0], AttributeError if assign else ValueError)
        self.assertEqual(dict(before), dict(market.step(samples, {})))
        self.assertEqual(snapshot["cpu_pct"], market.table.mapping("cpu_pct"))
        self.assertEqual(snapshot["limit_pct"], market.table.mapping("limit"))

    @settings(max_examples=20, deadline=None)
    @given(st.sampled_from(("interval", "epoch", "vms", "state", "reports", "pcpus")))
    def test_the_step_itself_cannot_be_changed(self, field):
        probe = Probe(lambda step: setattr(step, field, None))
        _market(probe).step({}, {})
        self.assertIsInstance(probe.raised[0], AttributeError)

    def test_the_latency_reports_cannot_be_written(self):
        def act(step):
            step.reports.interference_pct[:] = 0.0
        probe = Probe(act)
        market = _market(probe, vms=())
        market.add(records.VMSpec("v", sla=make_fixture.sla_mod.SLA(latency_sla_us=100.0)))
        market.step({}, {"v": records.LatencyWindow(4, 150.0, 1.0, 150.0)})
        self.assertIsInstance(probe.raised[0], ValueError)
        self.assertEqual({"v": 50.0}, market.last_interference)


class HalfCap(policy_mod.PerVM):
    """A third-party policy deciding each VM alone: a sampled VM at half its limit."""

    name = "half_cap"

    def __init__(self):
        self.epochs = []

    def decide_vm(self, vm, step):
        assert isinstance(vm, policy_mod.VM)
        return (vm.limit_pct / 2.0, 1.0, "half") if vm.sampled else None

    def start_epoch(self, step):
        self.epochs.append((step.interval, step.vms.cap_pct.tolist()))


class PerVMTest(unittest.TestCase):

    def test_a_per_vm_policy_answers_vm_by_vm_through_the_adapter(self):
        inner = HalfCap()
        market = _market(inner, intervals_per_epoch=2)
        samples = {"a": records.Sample("a", 0.0, 10.0)}
        decisions = market.step(samples, {})
        self.assertEqual((50.0, 100.0), (decisions["a"].cap_pct, decisions["b"].cap_pct))
        self.assertEqual(("half", policy_mod.UNCAPPED), (market.reason("a"),
                                                         market.reason("b")))
        market.step(samples, {})
        self.assertEqual((), market.changed)       # the same answers: nothing to write
        market.end_epoch()
        self.assertEqual([(0, [50.0, 100.0])], inner.epochs)


class MemoTest(unittest.TestCase):

    def test_a_value_is_worked_out_again_only_when_its_key_changes(self):
        made = []
        cached = memo.Memo(lambda key: made.append(key) or len(made))
        self.assertEqual([1, 1, 2, 2], [cached(7), cached(7), cached(8), cached(8)])
        cached.clear()
        self.assertEqual(3, cached(8))
        self.assertEqual([7, 8, 8], made)


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
