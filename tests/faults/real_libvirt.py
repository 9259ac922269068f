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

"""The faults that involve the hypervisor, on a real libvirtd with TCG guests.

One lab (:class:`tests.lab.harness.Lab`: Debian's libvirtd, a CPU-burning
guest that declares ``resex:cpu_limit_pct`` so the agent holds it under a
cap, an idle guest) and the real ``resex-agent`` as a process (0.1 s
interval, ``io_shares``), then each fault in turn. The caps are read from
libvirt (``schedinfo``) and from the guest's cgroup, never from the agent:
"caps wrong" counts the guests whose live knobs are not what they should be
once the agent is whole again (the bulk guest capped within its limit in
both, the idle one uncapped). "Intervals lost" are the intervals the loop
skipped for lateness, from its own log line.
"""

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET

import libvirt

from tests.faults import harness as faults_harness
from tests.lab import experiment
from tests.lab import harness
from tests import machine

LIMIT_PCT = 20
OPERATOR_SHARES = 5000
LATE = re.compile(r"control loop late by [0-9.]+ ms; skipping (\d+) interval")
#: An epoch the agent controlled with both guests (not a BLIND one).
CONTROLLED = re.compile(r"epoch \d+: 2 VMs, ")


class RealLab:
    """The lab, the two guests and the agent, for one table of faults."""

    def __init__(self):
        self.workdir = tempfile.mkdtemp(prefix="resex-faults-real-")
        self.lab = harness.Lab(workdir=self.workdir)
        self.conn = None
        self.agent = None
        self.second = None
        self.initrd = None

    def setup(self):
        self.lab.setup()
        self.initrd = self.lab.initramfs()
        self.bulk = self.lab.guest("resex-fault-bulk", self.initrd, role="burn",
                                   sla={"resex:cpu_limit_pct": LIMIT_PCT})
        self.idle = self.lab.guest("resex-fault-idle", self.initrd, role="idle")
        self.conn = libvirt.open(harness.URI)
        self.original = self.knobs(self.bulk)
        self.agent = experiment.AgentProcess(self.workdir, "faults", "io_shares", 1.0)
        self.start_agent()
        return self

    def teardown(self):
        for agent in (self.agent, self.second):
            if agent is not None and agent.proc is not None:
                machine.stop_pid(agent.proc.pid)
        if self.conn is not None:
            try:
                self.conn.close()
            except libvirt.libvirtError:
                pass
        self.lab.teardown()
        shutil.rmtree(self.workdir, ignore_errors=True)

    # -- reading the host ---------------------------------------------------------
    def _reconnect(self):
        try:
            self.conn.close()
        except libvirt.libvirtError:
            pass
        self.conn = libvirt.open(harness.URI)

    def knobs(self, guest):
        for attempt in range(2):
            try:
                return harness.knobs(self.conn, guest)
            except libvirt.libvirtError:
                if attempt:
                    raise
                self._reconnect()

    def cap(self, guest):
        return harness.cap_pct(self.knobs(guest))

    def cgroup_cap(self, guest):
        cg = harness.cgroup_cpu_quota(guest)
        if cg is None or cg[1] is None or cg[1] <= 0:
            return None
        return 100.0 * cg[1] / cg[0]

    def caps_wrong(self):
        wrong = 0
        bulk = (self.cap(self.bulk), self.cgroup_cap(self.bulk))
        if any(c is None or c > LIMIT_PCT + 0.5 for c in bulk):
            wrong += 1
        if self.cap(self.idle) is not None or self.cgroup_cap(self.idle) is not None:
            wrong += 1
        return wrong

    def whole(self):
        """The agent runs and the bulk guest is capped, in libvirt and in its cgroup."""
        try:
            return (self.agent.proc is not None and self.agent.proc.poll() is None
                    and self.caps_wrong() == 0)
        except libvirt.libvirtError:
            return False

    def wait_whole(self, mark=None, timeout=60.0):
        """Seconds until :meth:`whole` and, past ``mark``, an epoch controlled with both guests."""
        if mark is None:
            return machine.seconds_until(self.whole, timeout)
        return machine.seconds_until(
            lambda: CONTROLLED.search(self.agent.log()[mark:]) is not None and self.whole(),
            timeout)

    def operator_values(self):
        """What an operator set live on the bulk guest, as the journal keeps it."""
        got = self.agent.journal_operator().get(self.bulk.uuid)
        return dict(got["values"]) if got else {}

    def mark(self):
        return len(self.agent.log())

    def lost(self, mark):
        return sum(int(n) for n in LATE.findall(self.agent.log()[mark:]))

    # -- the agent ----------------------------------------------------------------
    def start_agent(self):
        """Start the agent; seconds until it controlled an epoch with both guests."""
        mark = len(self.agent.log())
        started = time.monotonic()
        self.agent.start(vms=2)
        if self.wait_whole(mark) == float("inf"):
            return float("inf")
        return time.monotonic() - started

    def kill_agent(self):
        self.agent.proc.send_signal(signal.SIGKILL)
        self.agent.proc.wait(30)
        self.agent.proc = None


def _row(fault, lost, wrong, recovery_s, note=""):
    return faults_harness.FaultResult(fault, lost, 0, wrong, recovery_s, note)


def libvirtd_sigkill(lab, outage=3.0):
    mark = lab.mark()
    lab.lab.libvirtd.kill()
    time.sleep(outage)
    lab.lab.libvirtd.start()
    took = lab.wait_whole(lab.mark())
    return _row("libvirtd SIGKILL, %.0f s down" % outage, lab.lost(mark), lab.caps_wrong(),
                took)


def libvirtd_sigstop(lab, outage=15.0):
    mark = lab.mark()
    pid = lab.lab.libvirtd.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(outage)
    finally:
        os.kill(pid, signal.SIGCONT)
    took = lab.wait_whole(lab.mark())
    return _row("libvirtd SIGSTOP %.0f s" % outage, lab.lost(mark), lab.caps_wrong(), took)


def sigterm_while_hung(lab, hang=0.3):
    pid = lab.lab.libvirtd.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        time.sleep(hang)
        started = time.monotonic()
        lab.agent.proc.send_signal(signal.SIGTERM)
        code = lab.agent.proc.wait(60)
        exit_s = time.monotonic() - started
        lab.agent.proc = None
        kept = len(lab.agent.journal_left())
    finally:
        os.kill(pid, signal.SIGCONT)
    took = lab.start_agent()
    return _row("SIGTERM while libvirtd hangs", 0, lab.caps_wrong(), took,
                "exited %d in %.2f s, %d VM(s) left in the journal for the next start"
                % (code, exit_s, kept))


def healthy_exit(lab):
    started = time.monotonic()
    code = lab.agent.stop()
    exit_s = time.monotonic() - started
    restored = lab.knobs(lab.bulk) == dict(lab.original, **lab.operator_values())
    took = lab.start_agent()
    return _row("SIGTERM (healthy)", 0, lab.caps_wrong() + (0 if restored else 1), took,
                "exited %d in %.2f s, originals %s" % (code, exit_s,
                                                       "restored" if restored else "WRONG"))


def kill9_restart(lab):
    lab.kill_agent()
    journal = len(lab.agent.journal_left())
    started = time.monotonic()
    lab.agent.start(vms=2)
    restored = machine.seconds_until(lambda: lab.cap(lab.bulk) is None, 15.0)
    machine.seconds_until(lambda: lab.cap(lab.bulk) is not None, 60.0)
    first = time.monotonic() - started
    took = lab.wait_whole(0)
    return _row("kill -9 and restart (journal of %d VM(s))" % journal, 0, lab.caps_wrong(),
                took, "start -> originals restored %s, -> capped again %.0f ms" % (
                    "%.0f ms" % (1000 * restored) if restored != float("inf") else "never",
                    1000 * first))


def churn(lab, cycles=10):
    mark = lab.mark()
    destroys = []
    for i in range(cycles):
        guest = harness.Guest("resex-fault-churn-%d" % i, lab.lab.kernel, lab.initrd,
                              role="idle", workdir=lab.workdir)
        lab.lab.guests.append(guest)
        guest.start(lab.conn)
        time.sleep(1.0)
        started = time.monotonic()
        lab.conn.lookupByUUIDString(guest.uuid).destroy()
        destroys.append(time.monotonic() - started)
        lab.conn.lookupByUUIDString(guest.uuid).undefine()
        lab.lab.guests.remove(guest)
    end = lab.mark()
    took = lab.wait_whole(end)
    worst = max([int(n) for n in LATE.findall(lab.agent.log()[mark:])] or [0])
    return _row("%d creates and destroys" % cycles, lab.lost(mark), lab.caps_wrong(), took,
                "each destroy %.1f-%.1f s; at most %d interval(s) lost at once"
                % (min(destroys), max(destroys), worst))


def journal_lost_redefined(lab):
    """kill -9, the journal lost, the bulk guest's definition changed: Nova's values win."""
    lab.kill_agent()
    os.unlink(os.path.join(lab.agent.state_dir, "journal.json"))
    dom = lab.conn.lookupByUUIDString(lab.bulk.uuid)
    root = ET.fromstring(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE))
    cputune = root.find("cputune")
    if cputune is None:
        cputune = ET.SubElement(root, "cputune")
    shares = cputune.find("shares")
    if shares is None:
        shares = ET.SubElement(cputune, "shares")
    shares.text = "1536"
    lab.conn.defineXML(ET.tostring(root, encoding="unicode"))
    took = lab.start_agent()
    code = lab.agent.stop()
    after = lab.knobs(lab.bulk)
    wrong = int(code != 0) + int(after["global_quota"] != -1) + int(after["cpu_shares"] != 1536)
    took = lab.start_agent() if took != float("inf") else took
    return _row("kill -9, journal lost, VM redefined", 0, wrong + lab.caps_wrong(), took,
                "SIGTERM (exit %d) restored quota %d, shares %d (definition: no cap, 1536)"
                % (code, after["global_quota"], after["cpu_shares"]))


def operator_change(lab):
    dom = lab.conn.lookupByUUIDString(lab.bulk.uuid)
    started = time.monotonic()
    dom.setSchedulerParametersFlags({"cpu_shares": OPERATOR_SHARES},
                                    libvirt.VIR_DOMAIN_AFFECT_LIVE)
    adopted = machine.seconds_until(
        lambda: lab.agent.journal_operator().get(lab.bulk.uuid), 15.0)
    time.sleep(3.0)
    kept = lab.knobs(lab.bulk)["cpu_shares"] == OPERATOR_SHARES
    code = lab.agent.stop()
    after_stop = lab.knobs(lab.bulk)["cpu_shares"]
    took = lab.start_agent()
    time.sleep(1.0)
    after_restart = lab.knobs(lab.bulk)["cpu_shares"]
    wrong = lab.caps_wrong() + int(not kept) + int(after_stop != OPERATOR_SHARES) + int(
        after_restart != OPERATOR_SHARES)
    return _row("operator sets cpu_shares live", 0, wrong, took,
                "journaled after %s; kept %s; after SIGTERM (exit %d) %d, after restart %d"
                % ("%.0f ms" % (1000 * adopted) if adopted != float("inf") else "never",
                   "yes" if kept else "NO", code, after_stop, after_restart)
                + " (%.1f s)" % (time.monotonic() - started))


def second_agent(lab):
    lab.second = experiment.AgentProcess(lab.workdir, "second", "io_shares", 1.0)
    started = time.monotonic()
    proc = subprocess.run(experiment.agent_command() + [
        "--config-file", lab.second.conf_path, "--log-file", lab.second.log_path],
        cwd=harness.ROOT, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - started
    lab.second = None
    wrong = lab.caps_wrong() + int(proc.returncode == 0)
    return _row("second agent, another state directory", 0, wrong, took,
                "second exited %d: %s" % (proc.returncode, proc.stderr.strip()[-120:]))


#: (key, function, short arguments, full arguments), in the order they run.
TABLE = (
    ("kill -9 restart", kill9_restart, {}, {}),
    ("churn", churn, {"cycles": 4}, {"cycles": 10}),
    ("operator change", operator_change, {}, {}),
    ("second agent", second_agent, {}, {}),
    ("healthy exit", healthy_exit, {}, {}),
    ("libvirtd sigkill", libvirtd_sigkill, {"outage": 2.0}, {"outage": 5.0}),
    ("libvirtd sigstop", libvirtd_sigstop, {"outage": 3.0}, {"outage": 15.0}),
    ("sigterm while hung", sigterm_while_hung, {}, {}),
    ("journal lost redefined", journal_lost_redefined, {}, {}),
)


def run(short=False, only=""):
    """Every row in one lab; yields :class:`~tests.faults.harness.FaultResult`."""
    lab = RealLab()
    try:
        lab.setup()
        for key, fn, short_kw, full_kw in TABLE:
            if only not in key:
                continue
            yield fn(lab, **(short_kw if short else full_kw))
    finally:
        lab.teardown()
