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

"""The trait decisions (pure) and the Placement client's write protocol (a fake adapter)."""

import random
import unittest

from hypothesis import given
from hypothesis import strategies as st
from keystoneauth1 import exceptions as ks_exc

from resex_libvirt.board import admission
from resex_libvirt.board import reader as reader_mod
from resex_nova import placement as placement_mod
from resex_nova import traits
from tests.unit.board import reports

T = 10.0
H = 0.3
TAU = 20.0
NOW = 1_800_000_000.0


def report(index, ts=NOW, **fields):
    return reports.make("c1", ts=ts, link_utilisation=index / (100.0 + index), **fields)


def entry(index, ts=NOW, **fields):
    rec = report(index, ts, **fields)
    return reader_mod.Entry(rec, admission.start(rec))


class AdmissionClosedTest(unittest.TestCase):

    @given(st.lists(st.floats(0.0, 40.0), min_size=1, max_size=300),
           st.floats(0.0, 60.0), st.floats(0.0, 0.9))
    def test_the_trait_flips_exactly_when_the_admission_latch_flips(self, indices, tau, h):
        # Followed from the first report, the trait-latch is the reader's latch.
        state, trait = None, None
        for i, index in enumerate(indices):
            state = admission.advance(state, report(index, NOW + i), tau, h)
            trait = traits.admission_closed(state.smoothed, state.latched, T, h, trait)
            self.assertEqual(state.refuses(T), trait, (i, state))

    def test_a_noisy_steady_host_flips_its_trait_at_most_once_per_time_constant(self):
        rng = random.Random(5)
        for mean in (7.0, 8.5, 10.0, 11.5):
            state, trait, flips = None, None, 0
            for i in range(3600):
                state = admission.advance(state, report(max(0.0, rng.gauss(mean, 3.0)),
                                                        NOW + i), TAU, H)
                new = traits.admission_closed(state.smoothed, state.latched, T, H, trait)
                flips += trait is not None and new != trait
                trait = new
            self.assertLessEqual(flips, 3600 / TAU, mean)

    def test_inside_the_band_the_trait_keeps_what_placement_holds(self):
        # 8.5 is inside (7, 10]: a restarted service keeps either state.
        self.assertTrue(traits.admission_closed(8.5, 8.5, T, H, True))
        self.assertFalse(traits.admission_closed(8.5, 8.5, T, H, False))
        self.assertFalse(traits.admission_closed(8.5, 8.5, T, H, None))
        self.assertTrue(traits.admission_closed(10.5, 10.5, T, H, False))
        self.assertFalse(traits.admission_closed(7.0, 10.0, T, H, True))


class ClosedTest(unittest.TestCase):

    def closed(self, e, was=None, now=NOW, policy=traits.UNKNOWN_CLOSED, failing=False):
        return traits.closed(e, was, now, 60.0, T, H, policy, board_failing=failing)

    def test_a_reporting_host(self):
        self.assertTrue(self.closed(entry(15.0)))
        self.assertFalse(self.closed(entry(2.0)))

    def test_a_host_without_a_fresh_report_follows_the_policy(self):
        for e, now in ((None, NOW), (entry(2.0), NOW + 61.0),
                       (entry(2.0, state="blind"), NOW)):
            self.assertTrue(self.closed(e, False, now))
            self.assertFalse(self.closed(e, True, now, traits.UNKNOWN_OPEN))
            self.assertIsNone(self.closed(e, True, now, traits.UNKNOWN_KEEP))

    def test_a_service_that_cannot_read_the_board_changes_nothing(self):
        for policy in traits.UNKNOWN_POLICIES:
            self.assertIsNone(self.closed(None, False, NOW, policy, failing=True))
        # A fresh entry still counts (the reader serves its cache through an outage).
        self.assertTrue(self.closed(entry(15.0), False, NOW, failing=True))


class TraitSetTest(unittest.TestCase):

    names = st.sets(st.sampled_from(["COMPUTE_NODE", "HW_CPU_X86_AVX2", traits.CLOSED,
                                     traits.MANAGED, "CUSTOM_OTHER", "COMPUTE_STATUS_DISABLED"]))

    @given(names, st.booleans())
    def test_only_the_one_trait_changes(self, current, present):
        out = traits.with_trait(current, traits.CLOSED, present)
        self.assertEqual(current - {traits.CLOSED}, out - {traits.CLOSED})
        self.assertEqual(present, traits.CLOSED in out)
        self.assertIsNot(current, out)

    def test_changes_writes_only_known_differences(self):
        self.assertEqual({"a": True, "d": False},
                         traits.changes({"a": True, "b": None, "c": False, "d": False},
                                        {"a": False, "b": True, "d": True}))


class FakeResponse:

    def __init__(self, status, body=None):
        self.status_code = status
        self._body = body
        self.text = "" if body is None else str(body)

    def json(self):
        return self._body


class FakeAdapter:
    """Answers from a script of ``(method, url) -> response``; records what it was sent."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.sent = []

    def request(self, url, method, **kwargs):
        self.sent.append((method, url, kwargs.get("json"), kwargs.get("microversion")))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def traits_body(names, generation):
    return FakeResponse(200, {"traits": sorted(names), "resource_provider_generation": generation})


class PlacementClientTest(unittest.TestCase):

    def test_set_trait_reads_then_writes_the_whole_set_with_the_generation(self):
        adapter = FakeAdapter([traits_body({"COMPUTE_NODE", "CUSTOM_X"}, 4),
                               traits_body({"COMPUTE_NODE", "CUSTOM_X", traits.CLOSED}, 5)])
        client = placement_mod.PlacementClient(adapter)
        self.assertEqual((True, 0), client.set_trait("u1", traits.CLOSED, True))
        put = adapter.sent[1]
        self.assertEqual(("PUT", "/resource_providers/u1/traits"), put[:2])
        self.assertEqual({"traits": ["COMPUTE_NODE", "CUSTOM_RESEX_CLOSED", "CUSTOM_X"],
                          "resource_provider_generation": 4}, put[2])
        self.assertTrue(all(s[3] == placement_mod.MICROVERSION for s in adapter.sent))
        self.assertGreaterEqual(tuple(map(int, placement_mod.MICROVERSION.split("."))), (1, 6))

    def test_a_409_rereads_and_keeps_what_the_other_writer_added(self):
        adapter = FakeAdapter([traits_body({"COMPUTE_NODE"}, 4), FakeResponse(409),
                               traits_body({"COMPUTE_NODE", "COMPUTE_STATUS_DISABLED"}, 5),
                               traits_body(set(), 6)])
        client = placement_mod.PlacementClient(adapter)
        self.assertEqual((True, 1), client.set_trait("u1", traits.CLOSED, True))
        self.assertEqual({"traits": ["COMPUTE_NODE", "COMPUTE_STATUS_DISABLED",
                                     traits.CLOSED], "resource_provider_generation": 5},
                         adapter.sent[3][2])
        self.assertEqual("GET 200 x2, PUT 200 x1, PUT 409 x1", client.calls_summary())

    def test_nothing_is_written_when_the_provider_already_is_as_asked(self):
        adapter = FakeAdapter([traits_body({"COMPUTE_NODE"}, 4)])
        client = placement_mod.PlacementClient(adapter)
        self.assertEqual((False, 0), client.set_trait("u1", traits.CLOSED, False))
        self.assertEqual(1, len(adapter.sent))

    def test_endless_conflicts_give_up(self):
        answers = []
        for g in range(placement_mod.CONFLICT_ATTEMPTS):
            answers += [traits_body(set(), g), FakeResponse(409)]
        client = placement_mod.PlacementClient(FakeAdapter(answers))
        with self.assertRaises(placement_mod.Conflict):
            client.set_trait("u1", traits.CLOSED, True)

    def test_unreachable_and_errors_become_placement_errors(self):
        client = placement_mod.PlacementClient(FakeAdapter([
            ks_exc.ConnectFailure("connection refused"), FakeResponse(503, "down"),
            FakeResponse(404)]))
        with self.assertRaisesRegex(placement_mod.PlacementError, "connection refused"):
            client.providers(required=traits.CLOSED)
        with self.assertRaisesRegex(placement_mod.PlacementError, "HTTP 503"):
            client.providers(name="c1")
        with self.assertRaises(placement_mod.ProviderGone):
            client.traits("u1")
        self.assertEqual("GET 404 x1, GET 503 x1, GET ConnectFailure x1",
                         client.calls_summary())

    def test_listings_are_url_encoded(self):
        adapter = FakeAdapter([FakeResponse(200, {"resource_providers": [
            {"name": "c 1", "uuid": "u1", "generation": 0}]})])
        client = placement_mod.PlacementClient(adapter)
        self.assertEqual({"c 1": "u1"}, client.providers(name="c 1"))
        self.assertEqual("/resource_providers?name=c+1", adapter.sent[0][1])


class RateLimiterTest(unittest.TestCase):

    def test_calls_are_paced_after_the_burst(self):
        clock = [0.0]
        waits = []

        def wait(seconds):
            waits.append(seconds)
            clock[0] += seconds
            return False

        limiter = placement_mod.RateLimiter(4.0, clock=lambda: clock[0])
        for _ in range(12):
            self.assertTrue(limiter.acquire(wait))
        # 4 at once, then one every 0.25 s.
        self.assertAlmostEqual(2.0, clock[0])
        self.assertEqual(8, len(waits))

    def test_a_stopping_service_is_not_held(self):
        limiter = placement_mod.RateLimiter(1.0, clock=lambda: 0.0)
        self.assertTrue(limiter.acquire(lambda s: True))
        self.assertFalse(limiter.acquire(lambda s: True))

    def test_zero_is_no_limit(self):
        limiter = placement_mod.RateLimiter(0.0)
        for _ in range(1000):
            self.assertTrue(limiter.acquire(lambda s: self.fail("waited")))
