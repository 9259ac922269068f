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

"""The shared link: processor sharing among the transfers in flight."""

import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from resex_libvirt.sim import link as link_mod

GIB = float(1 << 30)


class Owner:
    def __init__(self):
        self.tx_bytes = 0.0


def drain(link):
    """Run ``link`` until idle; return {owner: completion time ns}."""
    now = 0
    done = {}
    while link.active:
        dt = link.next_completion_ns()
        for t in link.advance(dt):
            done[t.owner] = now + dt
        now += dt
    return done


class LinkTest(unittest.TestCase):

    def test_a_lone_transfer_gets_the_whole_link(self):
        link = link_mod.Link(GIB)
        a = Owner()
        link.post(link_mod.Transfer(a, 65536, 0))
        done = drain(link)
        # 64 KiB at 1 GiB/s is 61.035 us.
        self.assertAlmostEqual(61035, done[a], delta=1)
        self.assertAlmostEqual(65536, a.tx_bytes, places=3)

    def test_two_equal_transfers_split_the_bandwidth_and_finish_together(self):
        link = link_mod.Link(GIB)
        a, b = Owner(), Owner()
        link.post(link_mod.Transfer(a, 65536, 0))
        link.post(link_mod.Transfer(b, 65536, 0))
        done = drain(link)
        self.assertAlmostEqual(2 * 61035, done[a], delta=2)
        self.assertEqual(done[a], done[b])

    def test_a_small_transfer_beside_a_large_one_takes_twice_as_long(self):
        link = link_mod.Link(GIB)
        small, large = Owner(), Owner()
        link.post(link_mod.Transfer(small, 65536, 0))
        link.post(link_mod.Transfer(large, 2 << 20, 0))
        done = drain(link)
        self.assertAlmostEqual(2 * 61035, done[small], delta=2)
        # The large one got half the link meanwhile, then all of it: total bytes / rate.
        self.assertAlmostEqual((65536 + (2 << 20)) / GIB * 1e9, done[large], delta=2)

    def test_byte_counters_are_exact_mid_transfer(self):
        link = link_mod.Link(GIB)
        a, b = Owner(), Owner()
        link.post(link_mod.Transfer(a, 1 << 20, 0))
        link.post(link_mod.Transfer(b, 1 << 20, 0))
        link.advance(100_000)   # 100 us: 107374 bytes carried, half each
        self.assertAlmostEqual(GIB * 1e-4 / 2, a.tx_bytes, places=3)
        self.assertAlmostEqual(a.tx_bytes, b.tx_bytes)

    def test_dropping_an_owner_aborts_its_transfers_only(self):
        link = link_mod.Link(GIB)
        a, b = Owner(), Owner()
        link.post(link_mod.Transfer(a, 1 << 20, 0))
        link.post(link_mod.Transfer(b, 1 << 20, 0))
        link.drop_owner(a)
        self.assertEqual([b], [t.owner for t in link.active])

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.integers(min_value=1, max_value=4 << 20), min_size=1, max_size=6))
    def test_the_link_is_work_conserving(self, sizes):
        """Processor sharing never idles with work queued: all done at sum(bytes) / rate."""
        link = link_mod.Link(GIB)
        owners = [Owner() for _ in sizes]
        for o, size in zip(owners, sizes):
            link.post(link_mod.Transfer(o, size, 0))
        done = drain(link)
        self.assertAlmostEqual(sum(sizes) / GIB * 1e9, max(done.values()), delta=len(sizes) + 1)
        for o, size in zip(owners, sizes):
            self.assertAlmostEqual(size, o.tx_bytes, places=3)
        # Smaller transfers never finish after larger ones.
        order = sorted(zip(sizes, (done[o] for o in owners)))
        self.assertEqual(sorted(t for _s, t in order), [t for _s, t in order])

    @settings(max_examples=60, deadline=None)
    @given(st.lists(st.integers(min_value=1, max_value=4 << 20), min_size=1, max_size=6),
           st.lists(st.integers(min_value=1, max_value=3_000_000), min_size=1, max_size=12),
           st.sampled_from([2, 10 ** 9]))
    def test_step_is_next_completion_then_advance_to_the_last_bit(self, sizes, limits, vf):
        """Link.step (the engine's one call per event) takes the steps of the two calls."""
        from unittest import mock

        def run(stepped):
            link = link_mod.Link(GIB)
            owners = [Owner() for _ in sizes]
            for o, size in zip(owners, sizes):
                link.post(link_mod.Transfer(o, size, 0))
            now, trace = 0, []
            for limit in limits:
                until = now + limit
                if stepped:
                    now, done = link.step(now, until)
                else:
                    if link.active:
                        until = min(until, now + link.next_completion_ns())
                    done = link.advance(until - now)
                    now = until
                trace.append((now, [sizes[owners.index(t.owner)] for t in done]))
            link.flush()
            return trace, [o.tx_bytes for o in owners], link.busy_ns

        with mock.patch.object(link_mod, "VECTOR_FROM", vf):
            self.assertEqual(run(False), run(True))

    def test_step_without_transfers_goes_to_the_time_asked(self):
        self.assertEqual((500, ()), link_mod.Link(GIB).step(100, 500))

    def test_bad_capacity_is_refused(self):
        self.assertRaises(ValueError, link_mod.Link, 0)
