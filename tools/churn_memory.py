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

"""Print what the agent keeps per churned VM: the soak's hour, without libvirtd.

``python tools/churn_memory.py [--churns 2000] [--warmup 300] [--events]``

The real agent (:func:`resex_agent.builder.build_agent`) on libvirt's
``test://`` driver with ``etc/resex/node-test.xml``: a transient guest is
created and destroyed again and again, the loop runs an interval after each
(an epoch every ``intervals_per_epoch`` of them), the configuration is
reloaded every 30 churns (SIGHUP), and the probe socket gets reports at
full rate from one guest and a flood of valid and invalid ones from another.
After ``--warmup`` churns a ``tracemalloc`` snapshot is taken, and another
after ``--churns`` more: it prints the bytes kept per 1,000 churns, the
allocation sites that grew most and the object types whose count grew.
Asserts nothing.
"""

import argparse
import collections
import gc
import logging
import os
import shutil
import socket
import tempfile
import tracemalloc

from oslo_config import cfg

from resex_agent import builder
from resex_agent import conf as agent_conf

NODE_XML = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "etc", "resex",
                                        "node-test.xml"))
SENSITIVE = "6a1e4b8c-0000-4000-8000-000000000001"
BULK = "6a1e4b8c-0000-4000-8000-000000000002"
CHURNED = "7b2f5d9c-0000-4000-8000-"

DOMAIN = """
<domain type='test'>
  <name>churn-%(k)d</name>
  <uuid>%(uuid)s</uuid>
  <metadata>
    <resex:sla xmlns:resex="http://resex-libvirt.org/xmlns/sla/1.0">
      <resex:latency_sla_us>%(sla)s</resex:latency_sla_us>
    </resex:sla>
  </metadata>
  <memory>65536</memory>
  <vcpu>1</vcpu>
  <os><type arch='i686'>hvm</type></os>
  <devices><controller type='virtio-serial' index='0'/></devices>
</domain>
"""


def make_conf(tmp, events):
    conf = cfg.ConfigOpts()
    agent_conf.register_opts(conf)
    sock_dir = os.path.join(tmp, "run")
    os.makedirs(sock_dir, mode=0o755)
    path = os.path.join(tmp, "resex-agent.conf")
    with open(path, "w") as f:
        f.write("[agent]\nhost = cmp1\nhost_driver = libvirt\nstate_dir = %s\n"
                "[libvirt]\nconnection_uri = test://%s\nevents = %s\n"
                "[latency]\nprobe_socket_path = %s\nchannel_hotplug = sensitive\n"
                "[metrics]\nenabled = true\nport = 0\n"
                "[board]\nurl = sqlite://%s\n"
                % (os.path.join(tmp, "state"), NODE_XML, "true" if events else "false",
                   os.path.join(sock_dir, "latency.sock"), os.path.join(tmp, "board.sqlite")))
    conf(["--config-file", path], project="resex")
    return conf


def report(vm, ok=True):
    if ok:
        return b'{"v":1,"vm":"%s","n":100,"mean_us":80.0,"std_us":5.0,"p99_us":150.0}\n' % (
            vm.encode())
    return b'{"v":1,"vm":"%s","n":-1,"mean_us":"x"}\n' % vm.encode()


class Churner:

    def __init__(self, agent, conf, probe_path):
        self.agent = agent
        self.conf = conf
        self.k = 0
        self.conn = agent.hypervisor._inner.connection.get()
        self.probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.probe.connect(probe_path)
        self.flood = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.flood.connect(probe_path)

    def churn(self, n):
        agent = self.agent
        for _ in range(n):
            self.k += 1
            uuid = CHURNED + "%012d" % self.k
            dom = self.conn.createXML(DOMAIN % {
                "k": self.k, "uuid": uuid, "sla": "x" if self.k % 3 == 0 else "120"})
            # Alive for 1 to 10 intervals: some across an epoch's end.
            for _ in range(1 + self.k % 10):
                self._tick()
            try:
                self.probe.sendall(report(SENSITIVE))
                self.flood.sendall(report(BULK, self.k % 2 == 0) + report(uuid)
                                   + report(uuid, False))
            except OSError:
                pass
            dom.destroy()
            self._tick()
            if self.k % 30 == 0:
                builder.reload_market(self.conf, agent)

    def _tick(self):
        agent = self.agent
        agent.run_interval()
        if agent.ticks % agent.settings.intervals_per_epoch == 0:
            agent.run_epoch()


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def type_counts():
    gc.collect()
    return collections.Counter(type(o).__qualname__ for o in gc.get_objects())


def holders(prefixes, agent):
    """``{where: n}``: the containers still naming a churned VM (uuid or name), by owner."""
    gc.collect()
    found = collections.Counter()
    live = set(agent.vms)
    names = {rec.info.name for rec in agent.vms.values()}
    for obj in gc.get_objects():
        if isinstance(obj, dict):
            keys = obj.keys()
        elif isinstance(obj, (set, frozenset)):
            keys = obj
        elif isinstance(obj, (list, collections.deque)):
            keys = obj
        else:
            continue
        n = 0
        for key in keys:
            for part in key if isinstance(key, tuple) else (key,):
                if (isinstance(part, str) and part.startswith(prefixes)
                        and part not in live and part not in names):
                    n += 1
                    break
        if n:
            found[owner(obj)] += n
    return found


def owner(container):
    """``Class.attribute`` of the instance whose attribute ``container`` is, if one is."""
    for ref in gc.get_referrers(container):
        if not isinstance(ref, dict):
            # An instance whose attributes live without a dict object.
            for name, value in getattr(ref, "__dict__", {}).items():
                if value is container:
                    return "%s.%s" % (type(ref).__qualname__, name)
        else:
            for name, value in ref.items():
                if value is container:
                    for inst in gc.get_referrers(ref):
                        if getattr(inst, "__dict__", None) is ref:
                            return "%s.%s" % (type(inst).__qualname__, name)
                    return "{...}[%r]" % (name,)
    return type(container).__qualname__


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--churns", type=int, default=2000)
    parser.add_argument("--warmup", type=int, default=400)
    parser.add_argument("--events", action="store_true",
                        help="libvirt events on (the agent's default)")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--step", type=int, default=0,
                        help="print the RSS every this many churns")
    parser.add_argument("--no-trace", action="store_true",
                        help="RSS only, without tracemalloc's own memory in it")
    parser.add_argument("--frames", type=int, default=1,
                        help="frames per traceback; with more, the top sites' callers")
    args = parser.parse_args()
    # Every line is formatted, as by the agent's handler, and thrown away.
    logging.basicConfig(stream=open(os.devnull, "w"), level=logging.INFO)
    tmp = tempfile.mkdtemp(prefix="resex-churn-")
    try:
        conf = make_conf(tmp, args.events)
        agent = builder.build_agent(conf)
        try:
            agent.start()
            agent.controller.prime(agent.clock.now())
            churner = Churner(agent, conf, conf.latency.probe_socket_path)
            if not args.no_trace:
                tracemalloc.start(args.frames)
            churner.churn(args.warmup)
            before_types = type_counts()
            before = tracemalloc.take_snapshot() if not args.no_trace else None
            rss_before = rss_kib()
            for done in range(0, args.churns, args.step or args.churns):
                churner.churn(min(args.step or args.churns, args.churns - done))
                if args.step:
                    print("RSS after %d churns: %d KiB" % (done + args.step, rss_kib()),
                          flush=True)
            after_types = type_counts()
            after = tracemalloc.take_snapshot() if not args.no_trace else None
            rss_after = rss_kib()
            kept = holders((CHURNED, "churn-"), agent)
        finally:
            agent.shutdown()
    finally:
        shutil.rmtree(tmp, True)
    if args.no_trace:
        print("RSS: %+d KiB over %d churns, %+.0f KiB per 1,000 churns"
              % (rss_after - rss_before, args.churns,
                 (rss_after - rss_before) * 1000.0 / args.churns))
        stats = []
    else:
        stats = after.compare_to(before, "traceback" if args.frames > 1 else "lineno")
        grown = sum(s.size_diff for s in stats)
        print("kept: %+d bytes over %d churns, %+.0f bytes per 1,000 churns (RSS %+d KiB)"
              % (grown, args.churns, grown * 1000.0 / args.churns, rss_after - rss_before))
    if stats:
        print("\nallocation sites that grew most:")
    for s in stats[:args.top]:
        print("  %+9d B %+6d blocks  %s" % (
            s.size_diff, s.count_diff,
            " < ".join("%s:%d" % (f.filename, f.lineno) for f in s.traceback)))
    print("\nchurned VMs (gone) still named by:")
    for where, n in kept.most_common():
        print("  %6d %s" % (n, where))
    print("\nobject types whose count grew:")
    diff = after_types
    diff.subtract(before_types)
    for name, n in sorted(diff.items(), key=lambda kv: -kv[1])[:args.top]:
        if n > 0:
            print("  %+7d %s" % (n, name))


if __name__ == "__main__":
    main()
