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

"""The lab's network: a bridge with a host address and one shared bottleneck.

The ResEx testbed shares one InfiniBand link among the VMs (paper Section
VI-B); here every guest's transmit path is squeezed through one ``ifb``
device instead:

* a Linux bridge with one host address (the sink and the BenchEx clients
  live there; the lab adds no other address anywhere);
* on each guest's tap an ``ingress`` qdisc whose ``u32`` match-all filter
  (``match u32 0 0``) redirects every packet with ``mirred egress redirect``
  into the ``ifb``; a tap's *ingress* is what the guest *transmits*
  (tc-mirred(8), ifb: "Intermediate Functional Block");
* one ``tbf`` on the ``ifb`` (tc-tbf(8)): ``rate``, ``burst`` and
  ``latency`` (the longest a packet may wait, which sets the queue length).

Measured here: this kernel has no netem, fq_codel, sfq, matchall or police,
and libvirt's own ``<bandwidth>`` fails here leaving a half-built htb, so the
bottleneck is built with ``tc`` by hand. Everything created is recorded and
removed by :meth:`Bottleneck.teardown`, which is idempotent and ignores
devices that are already gone (a destroyed domain takes its tap with it).
"""

import logging
import shutil
import subprocess

from tests.lab import harness

LOG = logging.getLogger(__name__)

#: Names chosen not to collide with what others create (ifb0/ifb1 come with the
#: ifb module's ``numifbs=2``; the harness's default bridge is ``resexbr0``).
BRIDGE = "resexlab0"
IFB = "resexifb0"
HOST_CIDR = "10.231.0.1/24"
NETMASK_BITS = 24


def host_ip(cidr=HOST_CIDR):
    return cidr.split("/", 1)[0]


def guest_ip(index, cidr=HOST_CIDR):
    """The ``index``-th guest address (1 -> .2, 2 -> .3 ...) in the host's /24."""
    head = host_ip(cidr).rsplit(".", 1)[0]
    return "%s.%d" % (head, 1 + index)


class NetworkError(RuntimeError):
    """A ``tc``/``ip`` command failed while building the lab network."""


def _run(*cmd, check=True):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode:
        raise NetworkError("%s failed (%d): %s"
                           % (" ".join(cmd), proc.returncode, proc.stderr.strip()))
    return proc


def link_exists(name):
    return _run("ip", "link", "show", "dev", name, check=False).returncode == 0


class Bottleneck(harness.SetUpTearDown):
    """Bridge + host address + one ifb with a tbf, and the taps redirected into it.

    ``rate_mbit`` is the bottleneck's rate (megabits per second, tc's
    ``mbit`` = 10^6 bit/s); ``latency_ms`` the longest queueing delay tbf
    allows (tc-tbf(8): it sets the queue length ``limit = rate x latency +
    burst``); ``burst_bytes`` must be at least ``rate / HZ`` or tbf cannot
    reach its rate.
    """

    def __init__(self, rate_mbit=20.0, latency_ms=50.0, burst_bytes=16384,
                 bridge=BRIDGE, ifb=IFB, host_cidr=HOST_CIDR):
        self.rate_mbit = rate_mbit
        self.latency_ms = latency_ms
        self.burst_bytes = burst_bytes
        self.bridge = bridge
        self.ifb = ifb
        self.host_cidr = host_cidr
        self.created = []       # links we added, removed in reverse order
        self.taps = []          # taps whose ingress qdisc we added

    @property
    def host_ip(self):
        return host_ip(self.host_cidr)

    def setup(self):
        """Create the bridge (with the host address) and the shaped ifb."""
        if shutil.which("modprobe"):
            # Without it, ``ip link add ... type ifb`` below asks the kernel to load it.
            _run("modprobe", "ifb", "numifbs=0", check=False)
        for name, kind in ((self.bridge, "bridge"), (self.ifb, "ifb")):
            if link_exists(name):
                raise NetworkError("%s already exists: another lab is running or a "
                                   "previous one was not torn down" % name)
            _run("ip", "link", "add", name, "type", kind)
            self.created.append(name)
        _run("ip", "addr", "add", self.host_cidr, "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        _run("ip", "link", "set", self.ifb, "up")
        self.set_rate(self.rate_mbit)
        return self

    def set_rate(self, rate_mbit):
        """(Re)place the tbf on the ifb with ``rate_mbit``."""
        self.rate_mbit = rate_mbit
        _run("tc", "qdisc", "replace", "dev", self.ifb, "root", "tbf",
             "rate", "%gmbit" % rate_mbit, "burst", str(self.burst_bytes),
             "latency", "%gms" % self.latency_ms)

    def redirect(self, tap):
        """Send everything ``tap`` receives from its guest through the ifb."""
        _run("tc", "qdisc", "add", "dev", tap, "handle", "ffff:", "ingress")
        self.taps.append(tap)
        _run("tc", "filter", "add", "dev", tap, "parent", "ffff:", "protocol", "all",
             "u32", "match", "u32", "0", "0",
             "action", "mirred", "egress", "redirect", "dev", self.ifb)

    def stats(self):
        """``{"sent_bytes", "sent_pkts", "dropped", "overlimits", "backlog_bytes"}`` of the tbf."""
        out = _run("tc", "-s", "qdisc", "show", "dev", self.ifb, check=False).stdout
        return parse_tbf_stats(out)

    def teardown(self):
        """Remove the taps' ingress qdiscs, the ifb and the bridge (idempotent)."""
        for tap in self.taps:
            if link_exists(tap):
                _run("tc", "qdisc", "del", "dev", tap, "handle", "ffff:", "ingress",
                     check=False)
        self.taps = []
        for name in reversed(self.created):
            if link_exists(name):
                proc = _run("ip", "link", "del", name, check=False)
                if proc.returncode:
                    LOG.warning("could not remove %s: %s", name, proc.stderr.strip())
        self.created = []


def parse_tbf_stats(text):
    """The counters of ``tc -s qdisc show`` output (first qdisc)."""
    stats = {"sent_bytes": 0, "sent_pkts": 0, "dropped": 0, "overlimits": 0,
             "backlog_bytes": 0}
    words = text.replace(",", " ").replace("(", " ").replace(")", " ").split()
    for i, word in enumerate(words):
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if word == "Sent" and nxt.isdigit():
            stats["sent_bytes"] = int(nxt)
            if i + 3 < len(words) and words[i + 3].isdigit():
                stats["sent_pkts"] = int(words[i + 3])
        elif word in ("dropped", "overlimits") and nxt.isdigit():
            stats[word] = int(nxt)
        elif word == "backlog":
            stats["backlog_bytes"] = _size_bytes(nxt)
    return stats


def _size_bytes(text):
    units = {"b": 1, "kb": 1024, "mb": 1024 * 1024}
    text = text.lower()
    for unit in ("mb", "kb", "b"):
        if text.endswith(unit) and text[:-len(unit)].isdigit():
            return int(text[:-len(unit)]) * units[unit]
    return int(text) if text.isdigit() else 0
