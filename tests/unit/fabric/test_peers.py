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

"""Bytes per peer: the nftables script, the parser of its answers, the adapter's calls.

The kernel's side (a real nftables table counting veth traffic in a
network namespace) is tests/functional/fabric/test_peers_kernel.py.
"""

import json
import unittest

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from resex_libvirt.fabric import peers


def answer(elements, name="tx4"):
    """An ``nft -j list set`` answer holding ``elements``: ``[(tap, peer, bytes)]``."""
    return json.dumps({"nftables": [
        {"metainfo": {"version": "1.0.6", "json_schema_version": 1}},
        {"set": {"family": "netdev", "name": name, "table": peers.TABLE,
                 "type": ["ifname", "ipv4_addr"], "handle": 2, "size": 65535,
                 "elem": [{"elem": {"val": {"concat": [t, p]},
                                    "counter": {"packets": 1, "bytes": b}}}
                          for t, p, b in elements]}}]})


class ScriptTest(unittest.TestCase):

    def test_the_chain_is_replaced_with_the_taps_in_one_transaction_sets_kept(self):
        text = peers.script(["tap2", "tap1", "tap1"])
        self.assertIn("add set netdev resex_peers tx4 { type ifname . ipv4_addr; "
                      "flags dynamic,timeout; timeout 600s; counter; size 65535; }", text)
        self.assertIn('devices = { "tap1", "tap2" }', text)
        self.assertIn("update @tx6 { iifname . ip6 daddr }", text)
        self.assertLess(text.index("delete chain"), text.index("add chain netdev resex_peers "
                                                               "ingress {"))
        again = peers.script(["tap1"], create=False)
        self.assertNotIn("add set", again)          # the sets' counters stay
        self.assertIn('devices = { "tap1" }', again)

    def test_no_tap_deletes_the_chain_and_counts_nothing(self):
        text = peers.script([], create=False)
        self.assertIn("delete chain", text)
        self.assertNotIn("hook ingress", text)

    def test_a_name_that_could_break_the_script_is_refused(self):
        for bad in ('tap"; flush ruleset', "a" * 16, "", "tap 1", None):
            with self.assertRaises(ValueError):
                peers.script(["tap1", bad])


class ParseTest(unittest.TestCase):

    def test_each_tap_and_peer_with_its_bytes(self):
        got = peers.parse(answer([("tap1", "10.0.0.2", 3084), ("tap1", "10.0.0.3", 256),
                                  ("tap2", "10.0.0.2", 76)]))
        self.assertEqual({"tap1": {"10.0.0.2": 3084, "10.0.0.3": 256},
                          "tap2": {"10.0.0.2": 76}}, got)

    def test_an_empty_set_and_elements_of_other_shapes_count_nothing(self):
        self.assertEqual({}, peers.parse(answer([])))
        odd = json.loads(answer([("tap1", "10.0.0.2", 5)]))
        elems = odd["nftables"][1]["set"]["elem"]
        elems += [{"elem": {"val": "x"}}, {"elem": {"val": {"concat": ["a"]},
                                                    "counter": {"bytes": 1}}},
                  {"elem": {"val": {"concat": ["a", "b"]}, "counter": {"bytes": -1}}},
                  {"elem": {"val": {"concat": ["a", "b"]}, "counter": {"bytes": True}}}, 7]
        self.assertEqual({"tap1": {"10.0.0.2": 5}}, peers.parse(json.dumps(odd)))

    def test_what_is_not_an_answer_is_refused(self):
        for bad in ("", "[]", "{}", '{"nftables": 3}', "not json"):
            with self.assertRaises(ValueError):
                peers.parse(bad)

    @settings(max_examples=400, deadline=None)
    @given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                        lambda kids: st.lists(kids, max_size=4)
                        | st.dictionaries(st.sampled_from(["nftables", "set", "elem", "val",
                                                           "concat", "counter", "bytes"]),
                                          kids, max_size=4), max_leaves=30))
    def test_any_json_is_parsed_or_refused_never_raising_anything_else(self, doc):
        try:
            got = peers.parse(json.dumps(doc))
        except ValueError:
            return
        for tap, found in got.items():
            self.assertIsInstance(tap, str)
            self.assertTrue(all(isinstance(b, int) and b >= 0 for b in found.values()))


class CounterTest(unittest.TestCase):
    """The adapter's calls to ``nft``, recorded."""

    def setUp(self):
        self.calls = []
        self.sets = {"tx4": answer([("tap1", "10.0.0.2", 100)]),
                     "tx6": answer([("tap1", "fd00::2", 40)], name="tx6")}

        def run(args, stdin=None):
            self.calls.append((tuple(args), stdin))
            if args[:2] == ["-j", "list"]:
                return self.sets[args[-1]]
            return ""
        self.counter = peers.PeerCounter(run=run)

    def test_the_table_is_written_once_per_change_of_taps(self):
        self.assertTrue(self.counter.sync(["tap1", "bad name"]))
        self.assertFalse(self.counter.sync(["tap1"]))
        self.assertTrue(self.counter.sync(["tap1", "tap2"]))
        writes = [stdin for args, stdin in self.calls if args == ("-f", "-")]
        self.assertEqual(2, len(writes))
        self.assertIn("add set", writes[0])
        self.assertNotIn("add set", writes[1])
        self.assertEqual(frozenset({"tap1", "tap2"}), self.counter.taps)

    def test_totals_merge_both_families(self):
        self.assertEqual({"tap1": {"10.0.0.2": 100, "fd00::2": 40}}, self.counter.totals())

    def test_a_failed_write_is_tried_again_at_the_next_sync(self):
        def failing(args, stdin=None):
            raise RuntimeError("nft -f -: Could not process rule: No such file or directory")
        counter = peers.PeerCounter(run=failing)
        with self.assertRaises(RuntimeError):
            counter.sync(["tap1"])
        self.assertEqual(frozenset(), counter.taps)
        counter._run = lambda args, stdin=None: ""
        self.assertTrue(counter.sync(["tap1"]))


if __name__ == "__main__":
    unittest.main()
