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

"""Bytes per peer counted by this machine's kernel: nftables over veth "taps" in a namespace.

Each "tap" is the host end of a veth pair whose other end plays the guest
(what the guest sends enters the host on the tap, as on a real tap); the
guest end sends UDP datagrams of known sizes to a few addresses (static
neighbours: nothing answers). The counter runs ``nft`` inside the
namespace, so the host's own ruleset is never touched; the namespace is
deleted at the end.
"""

import os
import shutil
import subprocess
import sys
import unittest
import uuid

from resex_libvirt.fabric import peers

SENDER = r"""
import socket, sys
dst, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET6 if ":" in dst else socket.AF_INET, socket.SOCK_DGRAM)
for _ in range(n):
    s.sendto(b"x" * size, (dst, 9))
"""


@unittest.skipUnless(os.geteuid() == 0 and shutil.which("nft") and shutil.which("ip"),
                     "needs root, nft (Debian package nftables) and ip")
class PeerCountingKernelTest(unittest.TestCase):

    def setUp(self):
        self.ns = "resex-peers-%s" % uuid.uuid4().hex[:8]
        self.ip("netns", "add", self.ns)
        self.addCleanup(subprocess.run, ["ip", "netns", "delete", self.ns], check=False)
        for k, net in ((0, "10.77.0"), (1, "10.78.0")):
            self.ip("-n", self.ns, "link", "add", "vtap%d" % k, "type", "veth", "peer", "name",
                    "vguest%d" % k)
            for dev in ("vtap%d" % k, "vguest%d" % k):
                self.ip("-n", self.ns, "link", "set", dev, "up")
            self.ip("-n", self.ns, "addr", "add", "%s.1/24" % net, "dev", "vguest%d" % k)
            for host in (98, 99):
                self.ip("-n", self.ns, "neigh", "add", "%s.%d" % (net, host), "lladdr",
                        "02:00:00:00:%02d:%02d" % (k, host), "dev", "vguest%d" % k)
        self.ip("-n", self.ns, "link", "set", "lo", "up")
        self.ip("-n", self.ns, "addr", "add", "fd00:77::1/64", "dev", "vguest0", "nodad")
        self.ip("-n", self.ns, "neigh", "add", "fd00:77::99", "lladdr", "02:00:00:00:00:77",
                "dev", "vguest0")
        self.counter = peers.PeerCounter(run=self.nft)

    def ip(self, *args):
        subprocess.run(["ip"] + list(args), check=True, capture_output=True)

    def nft(self, args, stdin=None):
        done = subprocess.run(["ip", "netns", "exec", self.ns, "nft"] + list(args), input=stdin,
                              capture_output=True, text=True, timeout=10)
        if done.returncode:
            raise RuntimeError(done.stderr)
        return done.stdout

    def send(self, dst, n, size):
        subprocess.run(["ip", "netns", "exec", self.ns, sys.executable, "-c", SENDER, dst,
                        str(n), str(size)], check=True, timeout=30)

    def test_each_taps_bytes_are_counted_by_destination(self):
        self.counter.sync(["vtap0", "vtap1"])
        self.send("10.77.0.99", 3, 1000)
        self.send("10.77.0.98", 2, 100)
        self.send("10.78.0.99", 4, 50)
        self.send("fd00:77::99", 2, 300)
        got = self.counter.totals()
        # The guests' own IPv6 multicast (neighbour discovery, MLD) is counted too.
        ours = {tap: {p: b for p, b in found.items() if not p.startswith("ff02:")}
                for tap, found in got.items()}
        udp_ip, udp_ip6 = 8 + 20, 8 + 40
        self.assertEqual({"vtap0": {"10.77.0.99": 3 * (1000 + udp_ip),
                                    "10.77.0.98": 2 * (100 + udp_ip),
                                    "fd00:77::99": 2 * (300 + udp_ip6)},
                          "vtap1": {"10.78.0.99": 4 * (50 + udp_ip)}}, ours)

    def test_a_tap_left_out_stops_counting_the_others_keep_their_totals(self):
        self.counter.sync(["vtap0", "vtap1"])
        self.send("10.77.0.99", 2, 500)
        self.assertTrue(self.counter.sync(["vtap1"]))
        self.send("10.77.0.99", 5, 500)
        self.send("10.78.0.98", 1, 10)
        got = self.counter.totals()
        self.assertEqual(2 * 528, got["vtap0"]["10.77.0.99"])
        self.assertEqual(38, got["vtap1"]["10.78.0.98"])
        self.assertEqual(frozenset({"vtap1"}), self.counter.taps)

    def test_close_removes_the_table(self):
        self.counter.sync(["vtap0"])
        self.counter.close()
        self.assertNotIn(peers.TABLE, self.nft(["list", "tables"]))
        self.counter.close()        # gone already: nothing raised


if __name__ == "__main__":
    unittest.main()
