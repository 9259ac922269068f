"""The shared control step: the deadband rule, sparse actuation with retries."""

import unittest

from resex_libvirt import control
from resex_libvirt import exceptions
from resex_libvirt import market as market_mod
from resex_libvirt.market import policy as policy_mod
from resex_libvirt.sim import host as host_mod
from resex_libvirt.sim import scenario as scenario_mod


class MovedTest(unittest.TestCase):

    def test_a_small_change_is_held_back_by_the_deadband(self):
        self.assertFalse(control.moved((50.0, 256), (50.5, 256), 1.0))
        self.assertTrue(control.moved((50.0, 256), (49.0, 256), 1.0))

    def test_without_a_deadband_any_change_but_no_change_is_written(self):
        self.assertTrue(control.moved((50.0, 256), (50.01, 256), 0.0))
        self.assertFalse(control.moved((50.0, 256), (50.0, 256), 0.0))

    def test_to_or_from_uncapped_and_weight_changes_always_count(self):
        self.assertTrue(control.moved((99.5, 256), (None, 256), 5.0))
        self.assertTrue(control.moved((None, 256), (99.5, 256), 5.0))
        self.assertTrue(control.moved((None, 256), (None, 512), 5.0))
        self.assertFalse(control.moved((None, 256), (None, 256), 5.0))


class _FlakyHost(host_mod.SimHost):
    """The simulated host, whose knob writes can be made to fail (and are counted)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.writes = []
        self.fail = 0

    def set_knobs(self, uuid, cap_pct, weight):
        self.writes.append((uuid, cap_pct, weight))
        if self.fail:
            self.fail -= 1
            raise exceptions.HypervisorError("injected failure")
        super().set_knobs(uuid, cap_pct, weight)


def _controller(policy="free_market"):
    sc = scenario_mod.load("paper_64k_vs_2m").with_duration(1.0)
    host = _FlakyHost(sc)
    link = host.link()
    params = market_mod.MarketParams(interval_s=sc.interval_s,
                                     intervals_per_epoch=sc.intervals_per_epoch,
                                     pcpus=host.pcpus(),
                                     link_bytes_per_s=link.capacity_bytes_per_s, mtu=link.mtu)
    ctl = control.Controller(market_mod.Market(params, policy_mod.load(policy)), host, host,
                             [host])
    ctl.prime(host.now())
    return ctl, host, sc


def _steps(ctl, host, sc, first, last):
    for i in range(first, last):
        host.advance_to(i * sc.interval_s)
        ctl.step(host.now())


class SparseActuationTest(unittest.TestCase):

    def test_only_the_vms_whose_decision_changed_are_visited(self):
        ctl, host, sc = _controller()
        _steps(ctl, host, sc, 1, 3)
        self.assertEqual(2, len(host.writes))   # each VM once, at adoption
        rec = next(iter(ctl.vms.values()))
        rec.applied = None                     # would be written if visited
        ctl.actuate(ctl.market.step({}, {}), changed=())
        self.assertEqual(2, len(host.writes))
        ctl.actuate(ctl.market.step({}, {}))   # no ``changed``: every VM is visited
        self.assertEqual(3, len(host.writes))

    def test_a_failed_write_is_retried_next_interval_without_a_new_decision(self):
        ctl, host, sc = _controller(policy="none")
        host.fail = 1
        _steps(ctl, host, sc, 1, 2)
        failed = host.writes[0][0]
        self.assertIsNone(ctl.vms[failed].applied)
        _steps(ctl, host, sc, 2, 4)
        self.assertEqual(((None, 256)), ctl.vms[failed].applied)
        self.assertEqual(3, len(host.writes))   # the failed one, then both

    def test_the_decisions_dict_is_not_copied_while_nothing_changes(self):
        ctl, host, sc = _controller(policy="none")
        _steps(ctl, host, sc, 1, 3)
        first = ctl.last.decisions
        _steps(ctl, host, sc, 3, 10)
        self.assertIs(first, ctl.last.decisions)
        self.assertEqual((), ctl.market.changed)
