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

"""``python -m tests.faults --soak SECONDS`` (``make soak``): "a day in an hour".

The real ``resex-agent`` on the real libvirtd
(:class:`tests.faults.real_libvirt.RealLab`'s lab and agent process),
publishing to a 3-member etcd cluster on loopback
(:class:`tests.functional.board.etcd_cluster.EtcdCluster`), with three TCG
guests: a latency-sensitive one whose BenchEx reports through its latency
channel at the agent's full rate (``[latency] rate_limit_per_s``), one that
floods its channel (valid reports far over the rate, lines that are not
JSON, a negative mean, a ``vm`` key, an 8 KiB line) and a CPU-burning one
the agent caps. Over the run the schedule (:mod:`tests.faults.soak_schedule`)
creates and destroys a guest every few seconds, sends the agent SIGHUP and
restarts libvirtd and etcd members; :class:`Sampler` reads the agent, its
state directory and the board every few seconds. At the end the table of
:mod:`tests.faults.soak_figures` is printed and every sample written to
``soak.json``. What "flat" means: doc/source/operations.rst, "Soak".
"""

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import libvirt

from tests.faults import real_libvirt
from tests.faults import soak_figures as figures
from tests.faults import soak_schedule as schedule
from tests.functional.board import etcd_cluster
from tests.functional.board import etcd_server
from tests.lab import experiment
from tests.lab import harness
from tests.lab import rdma
from tests import machine

SENSITIVE = "resex-soak-sensitive"
FLOOD = "resex-soak-flood"
BULK = "resex-soak-bulk"
CHURN_PREFIX = "resex-soak-churn-"
#: The sensitive and the flooding guest's SLA: their reports stay under it.
SLA_US = 5000.0
BENCHEX_PORT = 7100
CHANNEL = "/dev/virtio-ports/org.resex.latency.0"
#: Where libvirtd keeps each guest's QEMU log (a churned guest's is removed with it).
QEMU_LOG_DIR = "/var/log/libvirt/qemu"

#: The sensitive guest: a BenchEx server and client on its loopback, a report every
#: 50 ms (the agent's default rate limit, 20 a second); 60000 requests a client run
#: (its samples fit the guest's memory), then another.
REPORT_ROLE = (
    "ip link set lo up\n"
    "echo resex: soak reporter\n"
    "/bin/benchex server --bind 127.0.0.1 --port %d &\n"
    "sleep 1\n"
    "while :; do\n"
    "    resex-channel-link && /bin/benchex client --host 127.0.0.1 --port %d --rate 200"
    " --requests 60000 --report-channel %s --report-interval 0.05\n"
    "    sleep 1\n"
    "done\n" % (BENCHEX_PORT, BENCHEX_PORT, CHANNEL))

#: The flooding guest: 200 lines every 0.5 s, a quarter of them valid reports (5
#: times the rate limit), then a line of 8 KiB.
FLOOD_ROLE = (
    "echo resex: soak flood\n"
    "while :; do\n"
    "    resex-channel-link || { sleep 1; continue; }\n"
    "    i=0\n"
    "    while [ $i -lt 50 ]; do\n"
    "        echo '{\"v\":1,\"n\":10,\"mean_us\":100.0,\"std_us\":5.0,\"p99_us\":150.0}'\n"
    "        echo 'not a report'\n"
    "        echo '{\"v\":1,\"n\":10,\"mean_us\":-1,\"std_us\":5.0,\"p99_us\":150.0}'\n"
    "        echo '{\"v\":1,\"vm\":\"00000000-0000-0000-0000-000000000000\",\"n\":1,"
    "\"mean_us\":1,\"std_us\":0,\"p99_us\":1}'\n"
    "        i=$((i + 1))\n"
    "    done > %s\n"
    "    { head -c 8192 /dev/zero | tr '\\0' x; echo; } > %s\n"
    "    sleep 0.5\n"
    "done\n" % (CHANNEL, CHANNEL))

ROLES = {"burn": harness.ROLES["burn"], "idle": harness.ROLES["idle"],
         "report": REPORT_ROLE, "flood": FLOOD_ROLE}

#: A controlled epoch's line (not a BLIND one), with any number of VMs.
CONTROLLED = re.compile(r"epoch \d+: \d+ VMs, ")
SAMPLE_S = 5.0
#: A progress line on stderr every this many samples (and after the first).
PROGRESS_EVERY = 12
#: Seconds after a fault whose lost intervals are still the fault's (the agent's recovery).
FAULT_GRACE_S = 15.0
#: How long a churned guest lives between its create and its destroy.
CHURN_LIFE_S = 1.0
ETCD_DOWN_S = 5.0
LIBVIRTD_STOP_S = 30.0
WHOLE_TIMEOUT_S = 120.0

#: What the sampler counts in the agent's log, from the start of the run.
LOG_PATTERNS = {
    "lost_intervals": real_libvirt.LATE.pattern,
    "reloads": r"configuration reloaded",
    "blind_epochs": r"epoch \d+: BLIND",
    "board_unavailable": r"price board unavailable",
    "channels_connected": r"latency channel of VM \S+ connected",
    "channels_closed": r"latency channel of VM \S+ closed",
    # An epoch line giving the latency the sensitive guest reported.
    "sensitive_heard": r"%s cap \S+ rate \S+ lat \d+us" % SENSITIVE,
}
#: What the sampler reads from the agent's Prometheus endpoint.
METRICS = {
    "reports_rejected": "resex_intake_rejected_total",
    "epochs": "resex_epochs_total",
    "publish_failures": "resex_board_publish_failures_total",
    "skipped_intervals": "resex_loop_skipped_intervals_total",
}
#: The series of the table, in its order.
SERIES = ("rss_kib", "fds", "threads", "journal_bytes", "state_dir_bytes", "agent_log_bytes",
          "etcd_revision", "etcd_db_bytes", "lost_intervals", "reports_rejected", "epochs")


class SoakLab(real_libvirt.RealLab):
    """The faults' real lab with the soak's three guests, an etcd cluster as its board."""

    def __init__(self):
        super().__init__()
        self.etcd = etcd_cluster.EtcdCluster()
        self.etcd_up = False
        self.metrics_port = None

    def setup(self):
        self.lab.setup()
        self.etcd.setUp()
        self.etcd_up = True
        benchex = experiment.build_benchex(os.path.join(self.workdir, "bin"))
        with open(benchex, "rb") as f:
            files = {"/bin/benchex": f.read(), "/bin/resex-channel-link": rdma.CHANNEL_LINK}
        modules = rdma.module_closure(self.lab.modules_dir, ("virtio_pci", "virtio_console"))
        self.initrd = self.lab.initramfs(roles=ROLES, modules=modules, files=files,
                                         name="soak-initramfs.img")
        self.bulk = self.lab.guest(BULK, self.initrd, role="burn",
                                   sla={"resex:cpu_limit_pct": real_libvirt.LIMIT_PCT})
        self.sensitive = self._reporting_guest(SENSITIVE, "report")
        self.flood = self._reporting_guest(FLOOD, "flood")
        self.conn = libvirt.open(harness.URI)
        self.agent = experiment.AgentProcess(self.workdir, "soak", "io_shares", 1.0)
        self.metrics_port = etcd_server.free_port()
        configure_agent(self.agent.conf_path, self.etcd.url, self.metrics_port)
        if self.start_agent() == float("inf"):
            raise RuntimeError("the agent did not cap %s within %.0f s; see %s"
                               % (BULK, WHOLE_TIMEOUT_S, self.agent.log_path))
        return self

    def _reporting_guest(self, name, role):
        """A guest with a latency SLA and a latency channel (a socket in the working dir)."""
        return self.lab.guest(name, self.initrd, role=role, sla={"resex:latency_sla_us": SLA_US},
                              latency_socket=os.path.join(self.workdir, name + ".sock"))

    def teardown(self):
        try:
            super().teardown()
        finally:
            if self.etcd_up:
                self.etcd_up = False
                self.etcd.cleanUp()

    # -- what "whole" is here: the bulk guest capped, an epoch controlled --------------
    def caps_wrong(self):
        bulk = (self.cap(self.bulk), self.cgroup_cap(self.bulk))
        return int(any(c is None or c > real_libvirt.LIMIT_PCT + 0.5 for c in bulk))

    def wait_whole(self, mark=None, timeout=WHOLE_TIMEOUT_S):
        """Seconds until the bulk guest is capped and, past ``mark``, an epoch was controlled."""
        if mark is None:
            return machine.seconds_until(self.whole, timeout)
        return machine.seconds_until(
            lambda: CONTROLLED.search(self.since(mark)) is not None and self.whole(), timeout,
            step=0.05)

    def mark(self):
        """The agent log's size in bytes (:meth:`since` reads from there)."""
        try:
            return os.path.getsize(self.agent.log_path)
        except OSError:
            return 0

    def since(self, mark):
        try:
            with open(self.agent.log_path, "rb") as f:
                f.seek(mark)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""


def configure_agent(conf_path, board_url, metrics_port):
    """The lab agent's configuration with ``board_url`` as its board and its metrics served."""
    with open(conf_path) as f:
        lines = f.read().splitlines()
    board = lines.index("[board]")
    lines[board + 1] = "url = %s" % board_url
    lines += ["", "[metrics]", "enabled = true", "bind_address = 127.0.0.1",
              "port = %d" % metrics_port, ""]
    with open(conf_path, "w") as f:
        f.write("\n".join(lines))


# -- the sampler ----------------------------------------------------------------------------

def agent_process(pid):
    """``{"rss_kib", "threads", "fds"}`` of process ``pid`` (``None`` values when it is gone)."""
    out = {"rss_kib": None, "threads": None, "fds": None}
    if pid is None:
        return out
    try:
        with open("/proc/%d/status" % pid) as f:
            out.update(figures.parse_proc_status(f.read()))
        out["fds"] = len(os.listdir("/proc/%d/fd" % pid))
    except OSError:
        pass
    return out


def state_sizes(state_dir):
    """``{"journal_bytes", "state_dir_bytes"}``: the journal's size and the directory's."""
    journal = os.path.join(state_dir, "journal.json")
    total = 0
    for root, _dirs, names in os.walk(state_dir):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return {"journal_bytes": os.path.getsize(journal) if os.path.exists(journal) else None,
            "state_dir_bytes": total}


def etcd_figures(cluster):
    """``{"etcd_revision", "etcd_db_bytes"}``: the highest any live member reports."""
    revision = db = None
    for index in cluster.live():
        try:
            status = cluster.status(index)
            revision = max(revision or 0, int(status["header"]["revision"]))
            db = max(db or 0, int(status.get("dbSize", 0)))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return {"etcd_revision": revision, "etcd_db_bytes": db}


def agent_metrics(port):
    """:data:`METRICS` from the agent's Prometheus endpoint (``None`` when it does not answer)."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=2.0) as resp:
            text = resp.read().decode("utf-8", "replace")
    except (OSError, ValueError):
        text = ""
    # A counter with labels is absent until it first counts: 0 if the endpoint answered.
    return {key: figures.prom_sum(text, name) or (0.0 if text else None)
            for key, name in METRICS.items()}


class Sampler:
    """One sample of the agent, its state directory and the board every ``period_s`` s.

    On its own (native) thread from :meth:`start` to :meth:`stop`, which
    takes one last sample. ``t`` is seconds since ``started`` (monotonic);
    the log counts (:data:`LOG_PATTERNS`) start at the log's end at
    construction; :attr:`at_setup` holds what the log said before it (the
    latency channels the set-up's guests connected).
    """

    def __init__(self, lab, started, period_s=SAMPLE_S):
        self.lab, self.started, self.period_s = lab, started, period_s
        self.samples = []
        self.failures = 0
        self.log = figures.LogCounter(LOG_PATTERNS)
        self._offset = lab.mark()
        self.at_setup = figures.LogCounter(LOG_PATTERNS).feed(lab.agent.log()[:self._offset])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="soak-sampler", daemon=True)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(60.0)

    def _run(self):
        while True:
            self._take()
            if self._stop.wait(self.period_s):
                break
        self._take()

    def _take(self):
        try:
            self.samples.append(self.sample())
        except Exception as exc:    # a sample that fails is a gap, not the end of the run
            self.failures += 1
            print("soak: a sample failed: %r" % exc, file=sys.stderr, flush=True)
            return
        if len(self.samples) % PROGRESS_EVERY == 1:
            last = self.samples[-1]
            print("  %6.0f s: rss %s KiB, %s fds, %s threads, %s intervals lost"
                  % tuple(last.get(k) for k in ("t", "rss_kib", "fds", "threads",
                                                "lost_intervals")),
                  file=sys.stderr, flush=True)

    def sample(self):
        now = time.monotonic()
        out = {"t": round(now - self.started, 3), "wall": round(time.time(), 3)}
        proc = self.lab.agent.proc
        out.update(agent_process(proc.pid if proc is not None and proc.poll() is None
                                 else None))
        out.update(state_sizes(self.lab.agent.state_dir))
        out["agent_log_bytes"] = self.lab.mark()
        out.update(self._log_counts())
        out.update(etcd_figures(self.lab.etcd))
        out.update(agent_metrics(self.lab.metrics_port))
        return out

    def _log_counts(self):
        try:
            with open(self.lab.agent.log_path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            data = b""
        self._offset += len(data)
        return self.log.feed(data.decode("utf-8", "replace"))


# -- the events -----------------------------------------------------------------------------

def churn(lab, event):
    """Create an idle guest, let it live :data:`CHURN_LIFE_S`, destroy and undefine it."""
    guest = harness.Guest(CHURN_PREFIX + str(event.index), lab.lab.kernel, lab.initrd,
                          role="idle", workdir=lab.workdir)
    lab.lab.guests.append(guest)
    try:
        try:
            guest.start(lab.conn)
        except libvirt.libvirtError:
            lab._reconnect()      # libvirtd restarted under the old connection: next time
            raise
        time.sleep(CHURN_LIFE_S)
    finally:
        guest.destroy(lab.conn)
        for path in (guest.console, os.path.join(QEMU_LOG_DIR, guest.name + ".log")):
            with contextlib.suppress(OSError):
                os.unlink(path)
        try:
            lab.conn.lookupByName(guest.name)
        except libvirt.libvirtError as exc:
            # Gone for sure: teardown need not look for it (it does for the others).
            if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                lab.lab.guests.remove(guest)
    return guest.name


def sighup(lab, event):
    lab.agent.proc.send_signal(signal.SIGHUP)
    return "sent"


def restart_libvirtd(lab, event):
    """SIGTERM libvirtd (its guests run on), start it again; until the agent is whole."""
    daemon = lab.lab.libvirtd
    mark = lab.mark()
    began = time.monotonic()
    if daemon.proc is not None:
        daemon.proc.terminate()
        try:
            daemon.proc.wait(LIBVIRTD_STOP_S)
            daemon.proc = None
        except subprocess.TimeoutExpired:
            daemon.kill()
    daemon.start()
    lab._reconnect()
    back = time.monotonic() - began
    whole = lab.wait_whole(mark)
    return "down %.1f s; agent whole %.1f s after" % (back, whole)


def restart_etcd(lab, event, down_s=ETCD_DOWN_S):
    """Stop an etcd member (the leader, then a follower, in turn) by PID, start it again."""
    cluster = lab.etcd
    index = cluster.leader() if event.index % 2 == 0 else cluster.follower()
    role = "leader" if event.index % 2 == 0 else "follower"
    cluster.stop(index)
    time.sleep(down_s)
    began = time.monotonic()
    cluster.start(index)
    return "m%d (%s) down %.0f s, healthy %.1f s after its start" % (
        index, role, down_s, time.monotonic() - began)


ACTIONS = {schedule.CHURN: churn, schedule.SIGHUP: sighup,
           schedule.LIBVIRTD_RESTART: restart_libvirtd, schedule.ETCD_RESTART: restart_etcd}


class AgentDied(RuntimeError):
    """The agent exited during the soak: the run ends there."""


def run_events(lab, events, started, plan, done, actions=None):
    """Run ``events`` at their times from ``started``; what each did is appended to ``done``.

    ``actions``: ``{kind: function(lab, event) -> note}`` (default
    :data:`ACTIONS`). An event that fails is recorded and the run goes on; a
    churn that comes more than a period late (a restart took its time) is
    skipped; the agent found exited ends the run (:class:`AgentDied`).
    """
    actions = ACTIONS if actions is None else actions
    late_after = max(plan.churn_every_s, 1.0)
    for event in events:
        wait = started + event.at - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        if lab.agent.proc is None or lab.agent.proc.poll() is not None:
            raise AgentDied("the agent exited (%s) at %.0f s; see %s" % (
                lab.agent.proc and lab.agent.proc.returncode, time.monotonic() - started,
                lab.agent.log_path))
        began = time.monotonic() - started
        record = {"at": event.at, "kind": event.kind, "index": event.index,
                  "began": round(began, 3)}
        if event.kind == schedule.CHURN and began - event.at > late_after:
            record.update(ended=record["began"], result="skipped", note="late")
        else:
            try:
                record.update(result="done", note=actions[event.kind](lab, event))
            except Exception as exc:
                record.update(result="failed", note=repr(exc))
            record["ended"] = round(time.monotonic() - started, 3)
        done.append(record)
        if event.kind in schedule.FAULTS or record["result"] == "failed":
            print("  %6.0f s: %s %s: %s" % (began, event.kind, record["result"], record["note"]),
                  file=sys.stderr, flush=True)


# -- the run --------------------------------------------------------------------------------

def event_counts(planned, done):
    """``{kind: {"planned", "done", "failed", "skipped"}}``."""
    out = {kind: {"planned": n, "done": 0, "failed": 0, "skipped": 0}
           for kind, n in schedule.counts(planned).items()}
    for record in done:
        out[record["kind"]][record["result"]] += 1
    return out


def figures_of(samples, done, at_setup=None):
    """What the end prints and ``soak.json`` keeps beside the samples.

    ``at_setup``: the log's counts before the run (:attr:`Sampler.at_setup`).
    """
    windows = [(r["began"], r["ended"]) for r in done if r["kind"] in schedule.FAULTS]
    during, beyond = figures.lost_around(samples, windows, FAULT_GRACE_S)
    last = samples[-1] if samples else {}
    return {"summaries": [figures.summarize(samples, key) for key in SERIES],
            "lost_during_faults": during, "lost_beyond_faults": beyond,
            "channels_connected_at_setup": (at_setup or {}).get("channels_connected"),
            **{key: last.get(key) for key in LOG_PATTERNS if key != "lost_intervals"}}


def format_report(seconds, samples, planned, done, found, failure=None):
    lines = ["The agent over %.0f s of churn on a real libvirtd with a 3-member etcd board "
             "(%d samples every %.0f s; slopes per hour, +- two standard errors):"
             % (seconds, len(samples), SAMPLE_S), "",
             figures.format_table(found["summaries"]), "", "Events (planned: done, failed, "
             "skipped late):"]
    for kind, n in sorted(event_counts(planned, done).items()):
        lines.append("  %-20s %4d: %d, %d, %d" % (kind, n["planned"], n["done"], n["failed"],
                                                  n["skipped"]))
    for record in done:
        if record["kind"] in schedule.FAULTS:
            lines.append("  at %6.0f s %s: %s %s" % (record["began"], record["kind"],
                                                     record["result"], record["note"]))
    lines += ["", "SIGHUPs heard (configuration reloaded): %s; BLIND epochs: %s; board "
              "unavailable: %s times" % (found["reloads"], found["blind_epochs"],
                                         found["board_unavailable"]),
              "Latency channels connected %s at set-up and %s during the run, closed %s; "
              "epochs with %s's latency: %s"
              % (found.get("channels_connected_at_setup"), found["channels_connected"],
                 found["channels_closed"], SENSITIVE, found["sensitive_heard"]),
              "Control intervals lost: %d near the faults (within %.0f s after one), "
              "%d beyond them" % (found["lost_during_faults"], FAULT_GRACE_S,
                                  found["lost_beyond_faults"])]
    if failure:
        lines.append("THE RUN ENDED EARLY: %s" % failure)
    return "\n".join(lines)


def write_json(path, seconds, plan, samples, planned, done, found, failure):
    data = {"seconds": seconds, "plan": vars(plan), "sample_s": SAMPLE_S,
            "fault_grace_s": FAULT_GRACE_S, "failure": failure,
            "events": event_counts(planned, done), "done": done, "samples": samples,
            "figures": dict(found, summaries=[vars(s) for s in found["summaries"]])}
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)


def _interrupted(signum, _frame):
    raise KeyboardInterrupt("signal %d" % signum)


def run(seconds, out_dir, plan=None):
    """The soak: set up, run the schedule for ``seconds``, report; torn down whatever happens.

    Returns 0, or 1 if the run ended early (the agent exited, an error).
    ``soak.json`` in ``out_dir`` is written also after a ^C, with what was sampled.
    """
    plan = plan or schedule.Plan()
    planned = schedule.build(seconds, plan)
    previous = signal.signal(signal.SIGTERM, _interrupted)
    lab = SoakLab()
    sampler, done, failure = None, [], None
    try:
        print("soak: setting up the lab (waits for the lab lock)", file=sys.stderr, flush=True)
        lab.setup()
        started = time.monotonic()
        sampler = Sampler(lab, started).start()
        print("soak: %d events over %.0f s" % (len(planned), seconds), file=sys.stderr,
              flush=True)
        try:
            run_events(lab, planned, started, plan, done)
            time.sleep(max(0.0, started + seconds - time.monotonic()))
        except AgentDied as exc:
            failure = str(exc)
    except BaseException as exc:
        failure = "%s: %s" % (type(exc).__name__, exc)
        raise
    finally:
        try:
            if sampler is not None:
                sampler.stop()
                found = figures_of(sampler.samples, done, sampler.at_setup)
                write_json(os.path.join(out_dir, "soak.json"), seconds, plan,
                           sampler.samples, planned, done, found, failure)
                print(format_report(seconds, sampler.samples, planned, done, found,
                                    failure))
                print("\nsamples: %s" % os.path.join(out_dir, "soak.json"))
        finally:
            lab.teardown()
            signal.signal(signal.SIGTERM, previous)
    return 1 if failure else 0
