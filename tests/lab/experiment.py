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

"""The ResEx experiment on real VMs: ``python -m tests.lab.experiment --out DIR``.

With ``--transport rdma`` the same experiment runs on RDMA verbs
(:mod:`tests.lab.verbs_experiment`); this module is the TCP one.

Paper Sections IV and VII on this machine: a latency-sensitive guest runs
the BenchEx server (the static C ``benchex`` inside a busybox initramfs); an
interfering guest sends bulk TCP to a sink on the host as fast as it can
(a TCG vCPU sends about 1 Mbit/s per percent of a pCPU, so a CPU cap
throttles it, ResEx's premise); both guests transmit through one shared
bottleneck (:mod:`tests.lab.network`: their taps redirected into one ifb
with a tbf). BenchEx clients on the host (:mod:`tests.lab.probe`) measure
the sensitive guest's request latency and report it to the REAL agent
(``resex-agent`` as a subprocess, generated configuration: libvirt driver on
``qemu:///system``, ``[fabric] source = libvirt_iface``, the host probe
socket). Runs, one fresh agent each:

* ``base``: the sensitive guest alone (the interferer's sink is closed, so
  it sends nothing); its mean latency becomes its declared
  ``resex:latency_sla_us`` (libvirt metadata) for the runs that follow;
* ``interfered``: both guests, ``[market] policy = none``;
* each policy of ``--runs``: the project's (``free_market``, ``io_shares``,
  ``latency_target``), the paper's variants and the peers
  (``koordinator_suppress``, ``crane_throttle``, ``ewma_step``), the last
  two kinds research policies the lab installs for its agent
  (:func:`research_install`), never production entry points.

For each: the sensitive guest's latency p50, p99, mean and standard
deviation, the interferer's throughput (bytes the sink received per second)
and its cap over time, read back from libvirt's scheduler parameters (and
the domain's cgroup) every half second. A table on stdout, ``results.json``
and PNG plots (matplotlib, Agg) in ``--out``.

Then a static sweep (no agent): fixed caps on the interferer, set through
the agent's actuator, each measured the same way: the latency/throughput
frontier on which every cap policy lies in this lab.

Last the peers table (:mod:`tests.lab.sidebyside`): ``resex-sim compare
--peers``' columns on these runs.

The figure of merit: IOShares should cut the interference, the
sensitive guest's p99 above its base, by at least 70 % while the
interferer keeps at least half of its uncontrolled throughput.

Everything is set up by this code and torn down by PID and by name at the
end, also on failure, SIGTERM or Ctrl-C: the agent and probe processes,
every domain, libvirtd, the taps' ingress qdiscs, the ifb and the bridge.
"""

import argparse
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import libvirt

from resex_libvirt.hypervisor import metadata as metadata_mod
from resex_libvirt.market import latency as latency_mod
from resex_libvirt.market import policy as policy_mod
from resex_research import policy_catalog
from tests.lab import harness
from tests.lab import network
from tests.lab import sidebyside
from tests import machine

LOG = logging.getLogger(__name__)

BENCHEX_PORT = 7788
SINK_PORT = 5001
SENSITIVE = "resex-lat"
INTERFERER = "resex-bulk"
TAPS = {SENSITIVE: "rxtap-lat", INTERFERER: "rxtap-bulk"}
#: The runs of ``--runs`` by default: the project's policies, then the peers.
RUNS = ("base", "interfered", "free_market", "io_shares", "latency_target",
        "koordinator_suppress", "crane_throttle", "ewma_step")

#: Shell run by the guest before its role: the address from ``resex.ip=`` on eth0.
NET_UP = b"""#!/bin/busybox sh
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        resex.ip=*) ip="${arg#resex.ip=}";;
    esac
done
ip link set lo up
ip addr add "$ip/24" dev eth0
ip link set eth0 up
echo "resex: eth0 $ip"
"""

#: The experiment's guest roles (:func:`tests.lab.harness.build_initramfs`).
ROLES = {
    # BenchEx server (the static C twin of benchex): queues, prices, replies.
    "benchex": ("/bin/resex-net-up\n"
                "echo resex: benchex server\n"
                "/bin/benchex server --bind 0.0.0.0 --port %d\n" % BENCHEX_PORT),
    # Bulk TCP to the host's sink as fast as the vCPU goes; when the sink is closed
    # (the base run) the connection is refused and it retries every second.
    "bulk": ("/bin/resex-net-up\n"
             "for arg in $(cat /proc/cmdline); do\n"
             "    case \"$arg\" in\n"
             "        resex.sink=*) sink=\"${arg#resex.sink=}\";;\n"
             "        resex.source=*) source=\"${arg#resex.source=}\";;\n"
             "    esac\n"
             "done\n"
             "echo resex: bulk sender to $sink from /dev/$source\n"
             "while :; do nc $sink %d < /dev/$source; sleep 1; done\n" % SINK_PORT),
}


def build_benchex(outdir):
    """The static C BenchEx (``benchex/build.sh``) for the busybox guest."""
    script = os.path.join(harness.ROOT, "benchex", "build.sh")
    subprocess.run([script, outdir], check=True, capture_output=True)
    return os.path.join(outdir, "benchex")


# -- the sink ------------------------------------------------------------------

class Sink:
    """A TCP sink on the host: counts the bytes the interferer delivers.

    Listening only while ``open``; :meth:`close_listener` refuses new
    connections and resets the current ones, so the guest's ``nc`` stops.
    """

    def __init__(self, host, port=SINK_PORT):
        self.host = host
        self.port = port
        self.bytes = 0
        self._lock = threading.Lock()
        self._listener = None
        self._conns = []
        self._threads = []
        self._stop = threading.Event()

    def open(self):
        self._stop.clear()
        lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lst.bind((self.host, self.port))
        lst.listen(8)
        lst.settimeout(0.2)
        self._listener = lst
        t = threading.Thread(target=self._accept, name="lab-sink-accept", daemon=True)
        t.start()
        self._threads.append(t)
        return self

    def _accept(self):
        lst = self._listener
        while not self._stop.is_set():
            try:
                conn, _addr = lst.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn.settimeout(0.2)
            with self._lock:
                self._conns.append(conn)
            t = threading.Thread(target=self._drain, args=(conn,), name="lab-sink",
                                 daemon=True)
            t.start()
            self._threads.append(t)

    def _drain(self, conn):
        buf = bytearray(1 << 16)
        while not self._stop.is_set():
            try:
                n = conn.recv_into(buf)
            except socket.timeout:
                continue
            except OSError:
                return
            if n == 0:
                return
            with self._lock:
                self.bytes += n

    def received(self):
        with self._lock:
            return self.bytes

    def close(self):
        self._stop.set()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._conns = self._conns, []
        for conn in conns:
            try:
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            except OSError:
                pass
            conn.close()
        for t in self._threads:
            t.join(2.0)
        self._threads = []


# -- reading knobs back ------------------------------------------------------------

def cap_of(params):
    """Percent of one pCPU the scheduler parameters allow (100 x quota / period), or None."""
    quota = params.get("global_quota", -1)
    if quota is None or quota <= 0:
        return None
    return 100.0 * quota / params.get("global_period", 100000)


class CapPoller:
    """Polls each guest's knobs and the sink's byte count every ``period_s``.

    Per poll: libvirt's scheduler parameters and the domain cgroup's quota of
    each guest, and the sink's byte count (a thread; :meth:`stop` joins it).
    """

    def __init__(self, guests, sink=None, period_s=0.5):
        self.guests = guests
        self.sink = sink
        self.period_s = period_s
        self.rows = []
        self._stop = threading.Event()
        self._thread = None
        self.errors = 0

    def start(self):
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="lab-cap-poller", daemon=True)
        self._thread.start()
        return self

    def _run(self):
        conn = libvirt.open(harness.URI)
        try:
            doms = {g.name: conn.lookupByName(g.name) for g in self.guests}
            while not self._stop.is_set():
                row = {"t": round(time.monotonic() - self._t0, 3)}
                for g in self.guests:
                    try:
                        params = doms[g.name].schedulerParameters()
                    except libvirt.libvirtError:
                        self.errors += 1
                        continue
                    cg = harness.cgroup_cpu_quota(g)
                    row[g.name] = {"global_quota": params.get("global_quota"),
                                   "global_period": params.get("global_period"),
                                   "cpu_shares": params.get("cpu_shares"),
                                   "cap_pct": cap_of(params),
                                   "cgroup": list(cg[:2]) if cg else None}
                if self.sink is not None:
                    row["sink_bytes"] = self.sink.received()
                self.rows.append(row)
                self._stop.wait(self.period_s)
        finally:
            conn.close()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
        return self.rows


# -- the agent -------------------------------------------------------------------

AGENT_CONF = """[DEFAULT]
debug = false
use_stderr = false

[agent]
host = resex-lab
host_driver = libvirt
state_dir = %(state_dir)s
print_table = true
# The paper's market, as every lab figure was measured: every VM may be
# capped (the interferer opted in; the free-market rows cap the others too).
cap_consent = all

[libvirt]
connection_uri = %(uri)s
qemu_cap_period_us = %(period_us)d

[fabric]
source = libvirt_iface
link_capacity_gbps = %(link_gbps)g
link_mtu = 1500

[latency]
probe_socket_path = %(probe_socket)s
log_interval_s = 1.0
window_reports = %(window_reports)d

[market]
policy = %(policy)s
%(policy_group)s
[board]
url = sqlite:///%(board)s
"""


def research_policies():
    """``{name: class}`` the lab installs for its agent beyond the plugins.

    The paper's variants (``resex-sim``'s) and the peers
    (:mod:`resex_research.peers`; Koordinator's and Crane's with the
    host's capacity, :mod:`tests.lab.peer_plugins`).
    """
    from resex_research.peers import ewma_step
    from tests.lab import peer_plugins
    classes = dict(policy_catalog.RESEARCH)
    classes.update({"koordinator_suppress": peer_plugins.KoordinatorSuppress,
                    "crane_throttle": peer_plugins.CraneThrottle,
                    "ewma_step": ewma_step.EWMAStep})
    return classes


def policy_class(name):
    """The class the lab's agent loads for ``name``: a research policy, else a plugin."""
    return research_policies().get(name) or policy_catalog.factory(name)


def policy_spec(spec):
    """``(name, {option: value})`` of a lab policy ``name[@option=value...]``.

    ``io_shares@ceiling_delays=60`` runs ``io_shares`` with that option set in
    its group (the table names the run by the whole spec). An option the
    policy does not have, or a value its option refuses, is a ValueError.
    """
    name, *pairs = spec.split("@")
    known = {o.name: o for o in policy_mod.options_of(policy_class(name))}
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in known:
            raise ValueError("%s: %r is not an option=value of the policy (its options: %s)"
                             % (spec, pair, ", ".join(sorted(known)) or "none"))
        options[key] = known[key].check(float(value))
    return name, options


def policy_group(policy, decay_half_life, options=None):
    """The policy's own option group: ``options``, and ``decay_half_life`` if it has it."""
    known = {o.name for o in policy_mod.options_of(policy_class(policy))}
    lines = dict(options or {})
    if "decay_half_life" in known:
        lines.setdefault("decay_half_life", decay_half_life)
    if not lines:
        return ""
    return "\n[market_%s]\n%s\n" % (
        policy, "".join("%s = %g\n" % kv for kv in sorted(lines.items())))


#: :mod:`tests.lab.peer_plugins` as the agent imports it (a copy beside the entry points,
#: so that the agent never imports the ``tests`` package).
PEER_PLUGINS_MODULE = "resex_lab_peers"


def research_install(directory):
    """A distribution that registers the lab's research policies as agent plugins.

    The paper's variants and the peers are not plugins of the agent
    (``resex-sim``'s only, :func:`research_policies`); the lab runs them on
    the real agent as any third-party policy is installed: a
    ``*.dist-info`` with their entry points, on the agent's ``PYTHONPATH``,
    with :mod:`tests.lab.peer_plugins` copied beside it as
    :data:`PEER_PLUGINS_MODULE`. Returns the environment to start it with.
    """
    from tests.lab import peer_plugins
    info = os.path.join(directory, "resex_lab_research-1.0.dist-info")
    os.makedirs(info, exist_ok=True)
    shutil.copyfile(peer_plugins.__file__,
                    os.path.join(directory, PEER_PLUGINS_MODULE + ".py"))
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\nName: resex-lab-research\nVersion: 1.0\n")
    with open(os.path.join(info, "entry_points.txt"), "w") as f:
        f.write("[%s]\n" % policy_mod.NAMESPACE)
        for name, cls in sorted(research_policies().items()):
            module = (PEER_PLUGINS_MODULE if cls.__module__ == peer_plugins.__name__
                      else cls.__module__)
            f.write("%s = %s:%s\n" % (name, module, cls.__name__))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (directory, env.get("PYTHONPATH")) if p)
    return env


def agent_command():
    """``resex-agent`` next to this interpreter (the venv's console script), else ``-m``."""
    script = os.path.join(os.path.dirname(sys.executable), "resex-agent")
    if os.path.exists(script):
        return [script]
    return [sys.executable, "-m", "resex_agent.resex_agent"]


class AgentProcess:
    """The real ``resex-agent`` with a generated configuration, stopped by SIGTERM."""

    def __init__(self, workdir, name, policy, link_gbps, window_reports=16,
                 decay_half_life=0.05, period_us=10000):
        self.dir = os.path.join(workdir, "agent-%s" % name)
        os.makedirs(self.dir, exist_ok=True)
        self.conf_path = os.path.join(self.dir, "resex-agent.conf")
        self.log_path = os.path.join(self.dir, "agent.log")
        self.out_path = os.path.join(self.dir, "agent.out")
        self.probe_socket = os.path.join(self.dir, "latency.sock")
        self.state_dir = os.path.join(self.dir, "state")
        policy, options = policy_spec(policy)
        with open(self.conf_path, "w") as f:
            f.write(AGENT_CONF % {
                "state_dir": self.state_dir, "uri": harness.URI, "link_gbps": link_gbps,
                "probe_socket": self.probe_socket, "policy": policy,
                "window_reports": window_reports,
                "policy_group": policy_group(policy, decay_half_life, options),
                "period_us": period_us, "board": os.path.join(self.dir, "board.sqlite")})
        self.env = (research_install(os.path.join(self.dir, "research"))
                    if policy in research_policies() else None)
        self.proc = None
        self.returncode = None

    def start(self, vms=2, timeout=60.0):
        with open(self.out_path, "ab") as out:
            self.proc = subprocess.Popen(
                agent_command() + ["--config-file", self.conf_path,
                                   "--log-file", self.log_path],
                cwd=harness.ROOT, stdout=out, stderr=subprocess.STDOUT, env=self.env,
                stdin=subprocess.DEVNULL, start_new_session=True)
        if not machine.wait_for(lambda: self._ready(vms), timeout, step=0.2):
            raise RuntimeError("resex-agent not ready after %.0f s; see %s"
                               % (timeout, self.log_path))
        return self

    def _ready(self, vms):
        """Its probe socket is up and it adopted ``vms`` VMs; raises if it exited."""
        if self.proc.poll() is not None:
            raise RuntimeError("resex-agent exited with %s; see %s and %s"
                               % (self.proc.returncode, self.log_path, self.out_path))
        return os.path.exists(self.probe_socket) and self.log().count("adopted VM") >= vms

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self, timeout=30.0):
        """SIGTERM (the agent restores every knob), SIGKILL only after ``timeout``."""
        if self.proc is None:
            return self.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            machine.stop_pid(self.proc.pid)
            self.returncode = self.proc.poll()
        self.proc = None
        return self.returncode

    def journal_left(self):
        path = os.path.join(self.state_dir, "journal.json")
        if not os.path.exists(path):
            return {}
        from resex_agent import journal as journal_mod
        return journal_mod.Journal(path).originals()

    def journal_operator(self):
        """The live values operators set, as the journal keeps them."""
        path = os.path.join(self.state_dir, "journal.json")
        from resex_agent import journal as journal_mod
        try:
            return journal_mod.Journal(path).operator_values()
        except (OSError, journal_mod.JournalCorrupt):
            return {}


EPOCH_LINE = re.compile(r"epoch (\d+): .*\| (.*)$")
VM_PART = re.compile(r"(\S+) cap (\d+)/(\d+)% rate ([0-9.]+)")


def epoch_caps(log_text):
    """``[(epoch, {vm name: (cap mean, cap min, rate)})]`` from the agent's summary lines."""
    out = []
    for line in log_text.splitlines():
        m = EPOCH_LINE.search(line)
        if not m:
            continue
        vms = {}
        for part in m.group(2).split("; "):
            pm = VM_PART.match(part.strip())
            if pm:
                vms[pm.group(1)] = (float(pm.group(2)), float(pm.group(3)), float(pm.group(4)))
        out.append((int(m.group(1)), vms))
    return out


# -- the experiment ----------------------------------------------------------------

def latency_stats(latencies):
    """p50, p99 (nearest rank), mean, population std of a list of microseconds."""
    from benchex import stats as stats_mod
    ordered = sorted(latencies)
    window = latency_mod.summarize(ordered) if ordered else None
    return {"n": len(ordered),
            "p50_us": stats_mod.percentile(ordered, 50),
            "p99_us": stats_mod.percentile(ordered, 99),
            "mean_us": window.mean_us if window else 0.0,
            "std_us": window.std_us if window else 0.0}


class Experiment(harness.SetUpTearDown):
    """The lab (libvirtd, bottleneck, two guests) and runs on it.

    ``setup()`` brings everything up; ``run(name, policy, seconds, ...)``
    runs one measured run with a fresh agent; ``teardown()`` removes it all
    (idempotent). A context manager too.
    """

    def __init__(self, workdir=None, rate_mbit=20.0, queue_ms=200.0, probe_rate=100.0,
                 install=True, interval_s=0.5, bulk_source="zero", period_us=10000):
        self.workdir = workdir or tempfile.mkdtemp(prefix="resex-lab-exp-")
        self.period_us = period_us
        self.lab = harness.Lab(workdir=self.workdir, install=install)
        self.net = network.Bottleneck(rate_mbit=rate_mbit, latency_ms=queue_ms)
        self.sink = None
        self.probe_rate = probe_rate
        self.poll_s = interval_s
        self.bulk_source = bulk_source
        self.sensitive = None
        self.interferer = None
        self.originals = {}
        self._procs = []
        self.runs = []
        self._locked = False

    # -- setup/teardown ------------------------------------------------------
    def setup(self, sla_us=1000.0, threshold_pct=10.0, wait_s=0.0):
        """Bring the lab up; first wait up to ``wait_s`` for another lab's libvirtd to go."""
        if not self._locked:     # another lab (a test, a cloud) finishes first
            self.lab.lock.acquire()
            self._locked = True
        self.lab.setup(wait_s=wait_s)
        benchex = build_benchex(os.path.join(self.workdir, "bin"))
        with open(benchex, "rb") as f:
            benchex_bytes = f.read()
        e1000 = harness.kernel_module(self.lab.modules_dir, "e1000")
        initrd = self.lab.initramfs(roles=ROLES, modules=(e1000,),
                                    files={"/bin/benchex": benchex_bytes,
                                           "/bin/resex-net-up": NET_UP},
                                    name="experiment-initramfs.img")
        self.net.setup()
        self.sink = Sink(self.net.host_ip)
        self.sensitive = self.lab.guest(
            SENSITIVE, initrd, role="benchex", bridge=self.net.bridge, tap=TAPS[SENSITIVE],
            sla={"resex:latency_sla_us": sla_us,
                 "resex:interference_threshold_pct": threshold_pct},
            extra_cmdline="resex.ip=%s" % network.guest_ip(1))
        self.interferer = self.lab.guest(
            INTERFERER, initrd, role="bulk", bridge=self.net.bridge, tap=TAPS[INTERFERER],
            sla={"resex:io_class": "bulk"},
            extra_cmdline="resex.ip=%s resex.sink=%s resex.source=%s" % (
                network.guest_ip(2), self.net.host_ip, self.bulk_source))
        for g in (self.sensitive, self.interferer):
            self.net.redirect(TAPS[g.name])
        self.wait_benchex()
        conn = libvirt.open(harness.URI)
        try:
            for g in (self.sensitive, self.interferer):
                self.originals[g.name] = conn.lookupByName(g.name).schedulerParameters()
        finally:
            conn.close()
        return self

    def wait_benchex(self, timeout=120.0):
        """Until the sensitive guest's BenchEx server answers a TCP connect."""
        addr = (network.guest_ip(1), BENCHEX_PORT)

        def answers():
            try:
                socket.create_connection(addr, timeout=1.0).close()
                return True
            except OSError:
                return False
        if not machine.wait_for(answers, timeout, step=0.5):
            raise RuntimeError("BenchEx server in %s not reachable at %s:%d; see %s"
                               % (SENSITIVE, addr[0], addr[1], self.sensitive.console))

    def teardown(self):
        for proc in self._procs:
            if proc.poll() is None:
                machine.stop_pid(proc.pid)
        self._procs = []
        if self.sink is not None:
            self.sink.close()
        try:
            self.lab.teardown()
        finally:
            self.net.teardown()
            if self._locked:
                self._locked = False
                self.lab.lock.release()

    # -- SLA ------------------------------------------------------------------
    def set_sla(self, latency_sla_us, threshold_pct):
        """Declare the sensitive guest's SLA in its libvirt metadata (live and config)."""
        xml = ("<sla><latency_sla_us>%.1f</latency_sla_us>"
               "<interference_threshold_pct>%g</interference_threshold_pct></sla>"
               % (latency_sla_us, threshold_pct))
        conn = libvirt.open(harness.URI)
        try:
            dom = conn.lookupByName(SENSITIVE)
            dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, xml, metadata_mod.PREFIX,
                            metadata_mod.NAMESPACE,
                            libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG)
        finally:
            conn.close()

    def knobs_now(self):
        conn = libvirt.open(harness.URI)
        try:
            return {g.name: conn.lookupByName(g.name).schedulerParameters()
                    for g in (self.sensitive, self.interferer)}
        finally:
            conn.close()

    # -- one run ----------------------------------------------------------------
    def probe(self, seconds, out, report_socket=None):
        """Run :mod:`tests.lab.probe` for ``seconds``; its exit status (samples in ``out``)."""
        cmd = [sys.executable, "-m", "tests.lab.probe", "--host", network.guest_ip(1),
               "--port", str(BENCHEX_PORT), "--rate", str(self.probe_rate),
               "--seconds", str(seconds), "--out", out]
        if report_socket:
            cmd += ["--report-socket", report_socket, "--vm", self.sensitive.uuid]
        with open(out + ".err", "wb") as err:
            probe = subprocess.Popen(cmd, cwd=harness.ROOT, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=err)
        self._procs.append(probe)
        return probe.wait(seconds + 120.0)

    def sweep(self, caps, seconds, warmup_s=5.0, settle_s=2.0):
        """Static caps on the interferer, no agent: what ANY cap policy could reach here.

        Each cap is set through the agent's actuator
        (:meth:`LibvirtHypervisor.set_knobs`), held for ``seconds`` while the
        probe measures; the original knobs are restored at the end. Returns
        ``[{"cap_pct", "interferer_mbit_s", "latency"}]`` (``cap_pct`` None =
        uncapped).
        """
        from resex_libvirt.hypervisor import libvirt_host
        hyp = libvirt_host.LibvirtHypervisor(harness.URI, backoff_min=0.2, backoff_max=2.0,
                                             qemu_period_us=self.period_us)
        rows = []
        uuid = self.interferer.uuid
        original = None
        try:
            hyp.vms()
            original = hyp.get_knobs(uuid)
            self.sink.open()
            time.sleep(warmup_s)
            for cap in caps:
                hyp.set_knobs(uuid, cap, None)
                time.sleep(settle_s)
                out = os.path.join(self.workdir, "sweep-%s.json" % cap)
                sink0, t0 = self.sink.received(), time.monotonic()
                self.probe(seconds, out)
                mbit = 8.0 * (self.sink.received() - sink0) / (time.monotonic() - t0) / 1e6
                with open(out) as f:
                    latencies = [lat for _t, lat in json.load(f)["samples"]]
                rows.append({"cap_pct": cap, "interferer_mbit_s": mbit,
                             "latency": latency_stats(latencies)})
        finally:
            self.sink.close()
            if original is not None:
                hyp.restore_knobs(uuid, original)
            hyp.close()
        return rows

    def run(self, name, policy, seconds, interfere=True, warmup_s=5.0, link_gbps=None,
            window_reports=16, decay_half_life=0.05):
        """One measured run with a fresh agent; returns (and keeps) its result dict."""
        link_gbps = link_gbps or self.net.rate_mbit / 1000.0
        agent = AgentProcess(self.workdir, name, policy, link_gbps,
                             window_reports=window_reports, decay_half_life=decay_half_life,
                             period_us=self.period_us)
        poller = None
        before = self.knobs_now()
        try:
            if interfere:
                self.sink.open()
            agent.start()
            self._procs.append(agent.proc)
            time.sleep(warmup_s)
            poller = CapPoller((self.sensitive, self.interferer),
                               self.sink if interfere else None, self.poll_s).start()
            sink0, t0 = self.sink.received(), time.monotonic()
            probe_out = os.path.join(agent.dir, "probe.json")
            probe_rc = self.probe(seconds, probe_out, agent.probe_socket)
            elapsed = time.monotonic() - t0
            sink_bytes = self.sink.received() - sink0
            rows = poller.stop()
            poller = None
        finally:
            if poller is not None:
                poller.stop()
            agent_rc = agent.stop()
            if interfere:
                self.sink.close()
        after = self.knobs_now()
        with open(probe_out) as f:
            probe_result = json.load(f)
        log = agent.log()
        latencies = [lat for _t, lat in probe_result["samples"]]
        result = {
            "name": name, "policy": policy, "interfere": interfere,
            "seconds": round(elapsed, 2), "probe_rate": self.probe_rate,
            "probe_exit": probe_rc, "probe_summary": probe_result["summary"],
            "reports_sent": probe_result["reports_sent"],
            "reports_dropped": probe_result["reports_dropped"],
            "latency": latency_stats(latencies),
            "latency_series": per_second(probe_result["samples"]),
            "interferer_bytes": sink_bytes,
            "interferer_mbit_s": 8.0 * sink_bytes / elapsed / 1e6,
            "polls": rows,
            "agent_exit": agent_rc,
            "agent_log": agent.log_path,
            "claims_logged": log.count("VM %s claims latency" % self.sensitive.uuid),
            "epochs": epoch_caps(log),
            "knobs_before": before, "knobs_after": after,
            "journal_left": agent.journal_left(),
            "bottleneck": self.net.stats(),
        }
        caps = [r[INTERFERER]["cap_pct"] for r in rows if INTERFERER in r]
        result["interferer_cap_mean_pct"] = (
            sum(100.0 if c is None else c for c in caps) / len(caps) if caps else None)
        result["interferer_cap_min_pct"] = min(
            (100.0 if c is None else c for c in caps), default=None)
        result["cap_swing_pct"] = cap_swing(result)
        self.runs.append(result)
        return result


def per_second(samples):
    """``[(second, n, mean_us, p99_us)]`` of ``(t, latency)`` samples binned by second."""
    from benchex import stats as stats_mod
    bins = {}
    for t, lat in samples:
        bins.setdefault(int(t), []).append(lat)
    out = []
    for sec in sorted(bins):
        vals = sorted(bins[sec])
        out.append((sec, len(vals), sum(vals) / len(vals), stats_mod.percentile(vals, 99)))
    return out


# -- figures -----------------------------------------------------------------------

def figures(runs):
    """The goal's two ratios, from the runs named base, interfered and io_shares."""
    by = {r["name"]: r for r in runs}
    out = {}
    base, none = by.get("base"), by.get("interfered")
    if base is None or none is None:
        return out
    intf_none = none["latency"]["p99_us"] - base["latency"]["p99_us"]
    for name, run in by.items():
        if name in ("base", "interfered"):
            continue
        intf = run["latency"]["p99_us"] - base["latency"]["p99_us"]
        mean_none = none["latency"]["mean_us"] - base["latency"]["mean_us"]
        mean_intf = run["latency"]["mean_us"] - base["latency"]["mean_us"]
        out[name] = {
            "p99_interference_us": intf,
            "p99_interference_uncontrolled_us": intf_none,
            "interference_cut_pct": 100.0 * (1.0 - intf / intf_none) if intf_none > 0 else None,
            "mean_interference_cut_pct": (100.0 * (1.0 - mean_intf / mean_none)
                                          if mean_none > 0 else None),
            "throughput_kept_pct": (100.0 * run["interferer_mbit_s"] / none["interferer_mbit_s"]
                                    if none["interferer_mbit_s"] > 0 else None),
        }
    return out


def _pct(value):
    return "-" if value is None else "%.0f%%" % value


def cap_swing(run, settle_fraction=0.5):
    """Max minus min of the interferer's polled cap after ``settle_fraction`` of the run."""
    return sidebyside.swing([p[INTERFERER]["cap_pct"] for p in run.get("polls", [])
                             if INTERFERER in p], settle_fraction)


def frontier(runs, sweep, threshold_pct):
    """Each policy run against the static-cap sweep: one row per static cap and per policy.

    The p99 target is the base run's p99 plus ``threshold_pct``. A static
    cap's row says whether it meets it; a policy's row gives the frontier at
    its own tail (the most throughput any static cap reached with a p99 no
    worse than the policy's) and its throughput as a percentage of that, the
    frontier at the target (when some static cap meets it), and its cap's
    swing over the second half of the run.
    """
    by = {r["name"]: r for r in runs}
    base, none = by.get("base"), by.get("interfered")
    if base is None or none is None or not sweep:
        return {}
    b99 = base["latency"]["p99_us"]
    target = b99 * (1.0 + threshold_pct / 100.0)
    intf_none = none["latency"]["p99_us"] - b99
    uncontrolled = none["interferer_mbit_s"]

    def common(lat, mbit):
        return {"p99_us": lat["p99_us"], "mean_us": lat["mean_us"], "mbit_s": mbit,
                "p99_cut_pct": (100.0 * (1.0 - (lat["p99_us"] - b99) / intf_none)
                                if intf_none > 0 else None),
                "kept_pct": 100.0 * mbit / uncontrolled if uncontrolled > 0 else None,
                "meets_p99": lat["p99_us"] <= target}

    static = []
    for row in sweep:
        rec = common(row["latency"], row["interferer_mbit_s"])
        rec["cap_pct"] = row["cap_pct"]
        static.append(rec)
    meeting = [r for r in static if r["meets_p99"]]
    at_target = max((r["mbit_s"] for r in meeting), default=None)
    policies = []
    for r in runs:
        if r["name"] in ("base", "interfered"):
            continue
        rec = common(r["latency"], r["interferer_mbit_s"])
        rec.update(name=r["name"], policy=r["policy"], cap_mean_pct=r["interferer_cap_mean_pct"],
                   cap_min_pct=r["interferer_cap_min_pct"], swing_pct=cap_swing(r))
        same_tail = max((s["mbit_s"] for s in static if s["p99_us"] <= rec["p99_us"]),
                        default=None)
        rec["frontier_same_p99_mbit_s"] = same_tail
        rec["pct_of_frontier_same_p99"] = (100.0 * rec["mbit_s"] / same_tail
                                           if same_tail else None)
        rec["pct_of_frontier_at_target"] = (100.0 * rec["mbit_s"] / at_target
                                            if at_target and rec["meets_p99"] else None)
        policies.append(rec)
    return {"p99_target_us": target, "frontier_at_target_mbit_s": at_target,
            "static": static, "policies": policies}


def format_frontier(data):
    """The policy-vs-static-cap table (see :func:`frontier`)."""
    head = ("run", "cap mean/min %", "swing", "p99 us", "p99 cut", "mean us", "Mbit/s",
            "kept", "frontier@p99", "% of it")
    lines = ["%-20s %14s %6s %9s %8s %9s %7s %5s %12s %7s" % head]
    for r in data["static"]:
        lines.append("%-20s %14s %6s %9.0f %8s %9.0f %7.2f %5s %12s %7s" % (
            "static " + ("none" if r["cap_pct"] is None else "%g" % r["cap_pct"]),
            "-" if r["cap_pct"] is None else "%g" % r["cap_pct"], "0", r["p99_us"],
            _pct(r["p99_cut_pct"]), r["mean_us"], r["mbit_s"], _pct(r["kept_pct"]),
            "-", "-"))
    for r in data["policies"]:
        lines.append("%-20s %14s %6s %9.0f %8s %9.0f %7.2f %5s %12s %7s" % (
            r["name"], "-" if r["cap_mean_pct"] is None else "%.1f/%.1f" % (
                r["cap_mean_pct"], r["cap_min_pct"]),
            "-" if r["swing_pct"] is None else "%.1f" % r["swing_pct"], r["p99_us"],
            _pct(r["p99_cut_pct"]), r["mean_us"], r["mbit_s"], _pct(r["kept_pct"]),
            "-" if r["frontier_same_p99_mbit_s"] is None
            else "%.2f" % r["frontier_same_p99_mbit_s"], _pct(r["pct_of_frontier_same_p99"])))
    at = data["frontier_at_target_mbit_s"]
    lines.append("p99 target %.0f us (base p99 + threshold): %s" % (
        data["p99_target_us"], "no static cap meets it" if at is None else
        "the best static cap keeps %.2f Mbit/s" % at))
    return "\n".join(lines)


def plot_frontier(data, outdir):
    """``frontier.png``: p99 against interferer throughput, the sweep and each policy."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    static = sorted(data["static"], key=lambda r: r["mbit_s"])
    ax.plot([r["mbit_s"] for r in static], [r["p99_us"] / 1000.0 for r in static],
            marker="o", color="grey", label="static caps")
    for r in static:
        ax.annotate("none" if r["cap_pct"] is None else "%g%%" % r["cap_pct"],
                    (r["mbit_s"], r["p99_us"] / 1000.0), fontsize=7)
    for r in data["policies"]:
        ax.plot([r["mbit_s"]], [r["p99_us"] / 1000.0], marker="D", linestyle="none",
                label=r["name"])
    ax.axhline(data["p99_target_us"] / 1000.0, color="red", linestyle="--", label="p99 target")
    ax.set_yscale("log")
    ax.set_xlabel("interferer throughput (Mbit/s)")
    ax.set_ylabel("sensitive p99 (ms)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = os.path.join(outdir, "frontier.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def format_table(runs):
    head = ("run", "p50 us", "p99 us", "mean us", "std us", "reqs", "intf Mbit/s",
            "cap mean %", "cap min %")
    lines = ["%-20s %9s %9s %9s %9s %6s %12s %10s %9s" % head]
    for r in runs:
        lat = r["latency"]
        lines.append("%-20s %9.0f %9.0f %9.0f %9.0f %6d %12.2f %10s %9s" % (
            r["name"], lat["p50_us"], lat["p99_us"], lat["mean_us"], lat["std_us"], lat["n"],
            r["interferer_mbit_s"],
            "-" if r["interferer_cap_mean_pct"] is None else "%.1f" % r["interferer_cap_mean_pct"],
            "-" if r["interferer_cap_min_pct"] is None else "%.1f" % r["interferer_cap_min_pct"]))
    for name, fig in figures(runs).items():
        cut, kept = fig["interference_cut_pct"], fig["throughput_kept_pct"]
        mean_cut = fig["mean_interference_cut_pct"]
        lines.append(
            "%s: p99 interference %.0f us (uncontrolled %.0f us): cut %s (mean: cut %s); "
            "interferer keeps %s of its uncontrolled throughput (goal: p99 cut >= 70%%, "
            "keep >= 50%%)" % (
                name, fig["p99_interference_us"], fig["p99_interference_uncontrolled_us"],
                _pct(cut), _pct(mean_cut), _pct(kept)))
    return "\n".join(lines)


def format_sweep(rows, base):
    head = ("cap %", "intf Mbit/s", "p50 us", "p99 us", "mean us", "p99 above base")
    lines = ["%10s %12s %9s %9s %9s %14s" % head]
    for r in rows:
        lat = r["latency"]
        lines.append("%10s %12.2f %9.0f %9.0f %9.0f %14.0f" % (
            "none" if r["cap_pct"] is None else "%g" % r["cap_pct"], r["interferer_mbit_s"],
            lat["p50_us"], lat["p99_us"], lat["mean_us"], lat["p99_us"] - base["p99_us"]))
    return "\n".join(lines)


def plot(runs, outdir):
    """Writes ``timeline.png`` and ``latency_cdf.png`` to ``outdir``.

    The timeline: the sensitive guest's p99 per second, the interferer's cap
    and its throughput, one line per run.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    paths = []
    colors = {r["name"]: "C%d" % i for i, r in enumerate(runs)}
    fig, axes = plt.subplots(3, 1, figsize=(9, 10), sharex=True)
    for r in runs:
        style = {"label": r["name"], "color": colors[r["name"]]}
        series = r["latency_series"]
        axes[0].plot([s[0] for s in series], [s[3] / 1000.0 for s in series], **style)
        polls = r["polls"]
        axes[1].plot([p["t"] for p in polls],
                     [(p[INTERFERER]["cap_pct"] or 100.0) if INTERFERER in p else float("nan")
                      for p in polls], **style)
        if r["interfere"] and len(polls) > 1:
            xs, ys = [], []
            for a, b in zip(polls, polls[1:]):
                dt = b["t"] - a["t"]
                if dt > 0:
                    xs.append(b["t"])
                    ys.append(8.0 * (b["sink_bytes"] - a["sink_bytes"]) / dt / 1e6)
            axes[2].plot(xs, ys, **style)
    axes[0].set_ylabel("sensitive p99 per second (ms)")
    axes[0].set_yscale("log")
    axes[1].set_ylabel("interferer cap (% of a pCPU)")
    axes[2].set_ylabel("interferer throughput (Mbit/s)")
    axes[2].set_xlabel("seconds into the run")
    for ax in axes:
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    path = os.path.join(outdir, "timeline.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    paths.append(path)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in runs:
        with open(os.path.join(os.path.dirname(r["agent_log"]), "probe.json")) as f:
            vals = sorted(lat for _t, lat in json.load(f)["samples"])
        if vals:
            ax.plot([v / 1000.0 for v in vals], [(i + 1) / len(vals) for i in range(len(vals))],
                    label=r["name"], color=colors[r["name"]])
    ax.set_xscale("log")
    ax.set_xlabel("request latency (ms)")
    ax.set_ylabel("fraction of requests")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = os.path.join(outdir, "latency_cdf.png")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    paths.append(path)
    return paths


def parse_args(argv):
    parser = argparse.ArgumentParser(description="resex-libvirt lab: the ResEx experiment "
                                                 "on two QEMU/TCG guests")
    parser.add_argument("--transport", choices=("tcp", "rdma"), default="tcp",
                        help="tcp: BenchEx over TCP and a bulk TCP sender (this); rdma: "
                             "BenchEx over verbs and ib_write_bw on Soft-RoCE guests "
                             "(tests.lab.verbs_experiment, its own options)")
    parser.add_argument("--out", default=None, help="directory for results.json and PNGs")
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=8.0, help="seconds before measuring")
    parser.add_argument("--rate-mbit", type=float, default=20.0, help="bottleneck rate")
    parser.add_argument("--queue-ms", type=float, default=200.0, help="tbf latency (queue)")
    parser.add_argument("--probe-rate", type=float, default=100.0, help="BenchEx requests/s")
    parser.add_argument("--threshold", type=float, default=10.0,
                        help="resex:interference_threshold_pct of the sensitive guest")
    parser.add_argument("--window-reports", type=int, default=16,
                        help="[latency] window_reports of the agent")
    parser.add_argument("--decay-half-life", type=float, default=0.05,
                        help="[market] decay_half_life of the agent (epochs)")
    parser.add_argument("--runs", default=",".join(RUNS),
                        help="runs: base, interfered, any installed policy name, the "
                             "paper's variants and the peers (installed for the lab's agent)")
    parser.add_argument("--sweep", default="20,10,7,5,3,1",
                        help="static caps (%% of a pCPU) held on the interferer without the "
                             "agent, to show what any cap policy could reach ('' = none)")
    parser.add_argument("--sweep-seconds", type=float, default=15.0)
    parser.add_argument("--wait", type=float, default=900.0,
                        help="seconds to wait for another lab's libvirtd to go away")
    parser.add_argument("--no-install", action="store_true")
    parser.add_argument("--cap-period-us", type=int, default=10000,
                        help="CFS period of the caps ([libvirt] qemu_cap_period_us)")
    return parser.parse_args(argv)


def start_process():
    """Logging, and the signals that must still run the teardown."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="lab %(levelname)s %(name)s: %(message)s")
    # SIGTERM (a CI timeout) and Ctrl-C (even when started with SIGINT ignored, as a
    # background job is) must still run the teardown.
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(143))
    signal.signal(signal.SIGINT, signal.default_int_handler)


def run_all(exp, args):
    """Every run of ``--runs`` and the sweep on a lab that is up: ``(base, sweep)``."""
    kw = {"warmup_s": args.warmup, "window_reports": args.window_reports,
          "decay_half_life": args.decay_half_life}
    base = exp.run("base", "none", args.seconds, interfere=False, **kw)
    sla = base["latency"]["mean_us"]
    exp.set_sla(sla, args.threshold)
    print("base: mean %.0f us, p99 %.0f us -> resex:latency_sla_us = %.0f, threshold %g%%"
          % (sla, base["latency"]["p99_us"], sla, args.threshold), flush=True)
    for name in args.runs.split(","):
        if name == "base":
            continue
        r = exp.run(name, "none" if name == "interfered" else name, args.seconds,
                    interfere=True, **kw)
        print("%s: p99 %.0f us, interferer %.2f Mbit/s, cap mean %s" % (
            name, r["latency"]["p99_us"], r["interferer_mbit_s"],
            r["interferer_cap_mean_pct"]), flush=True)
    caps = [float(c) for c in args.sweep.split(",") if c.strip()]
    return base, (exp.sweep([None] + caps, args.sweep_seconds) if caps else [])


def report(summary, out, args):
    """Writes ``results.json`` and the plots; prints every table."""
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(summary, f, indent=1)
    runs, sweep, front = summary["runs"], summary["sweep"], summary["frontier"]
    paths = plot(runs, out)
    if front:
        paths.append(plot_frontier(front, out))
    print()
    print("ResEx on QEMU/TCG: sensitive guest's BenchEx latency, interferer's bulk TCP through "
          "a %g Mbit/s bottleneck (%g s runs):" % (args.rate_mbit, args.seconds))
    print(format_table(runs))
    if sweep:
        print()
        print("Static caps on the interferer, no agent (%g s each): the latency/throughput "
              "frontier any cap policy is on here:" % args.sweep_seconds)
        print(format_sweep(sweep, runs[0]["latency"]))
    if front:
        print()
        print("Each policy against the static-cap sweep (swing: the interferer's cap, max - "
              "min over the second half of the run; frontier@p99: the most any static cap "
              "kept with a p99 no worse):")
        print(format_frontier(front))
    for title, data in sidebyside.from_results(summary):
        print()
        print(sidebyside.format_all(data, title))
    print("results: %s; plots: %s" % (os.path.join(out, "results.json"), ", ".join(paths)))


def main(argv=None):
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--transport", choices=("tcp", "rdma"), default="tcp")
    known, rest = pre.parse_known_args(argv)
    if known.transport == "rdma":
        # Its own program (it builds on this module): the same process, its own options.
        os.execv(sys.executable, [sys.executable, "-m", "tests.lab.verbs_experiment"] + rest)
    args = parse_args(argv)
    if not harness.is_root():
        print("the lab needs root (libvirtd, cgroups, bridges)", file=sys.stderr)
        return 2
    start_process()
    out = args.out or tempfile.mkdtemp(prefix="resex-lab-out-")
    os.makedirs(out, exist_ok=True)
    exp = Experiment(rate_mbit=args.rate_mbit, queue_ms=args.queue_ms,
                     probe_rate=args.probe_rate, install=not args.no_install,
                     period_us=args.cap_period_us)
    try:
        exp.setup(threshold_pct=args.threshold, wait_s=args.wait)
        print("lab up in %s: bottleneck %g Mbit/s (tbf queue %g ms), BenchEx at %g req/s"
              % (exp.workdir, args.rate_mbit, args.queue_ms, args.probe_rate), flush=True)
        base, sweep = run_all(exp, args)
    finally:
        exp.teardown()
    summary = {"settings": vars(args), "sla_us": base["latency"]["mean_us"],
               "figures": figures(exp.runs), "runs": exp.runs, "sweep": sweep,
               "frontier": frontier(exp.runs, sweep, args.threshold)}
    report(summary, out, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
