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

"""Remote victims: the claims other hosts make on this host's VMs, as latency windows.

A latency-sensitive VM on another host whose requests cross this host's
port (its peer, the server it measures, runs here) is published by its own
host as a remote claim (:mod:`resex_libvirt.board.remote_claims`). This
latency source follows the board (one
:class:`~resex_libvirt.board.reader.BoardReader`, its own daemon thread:
nothing on the control loop waits for the network), finds the claims made
on this host's VMs, and hands the market, for each local peer, the remote
victim's window, judged by the remote victim's SLA
(:meth:`RemoteVictims.slas`, applied by the controller). The market then
treats the peer as a victim of this host's port: Algorithm 2 names and
taxes this host's senders by their share of the MTUs, as for a local
victim ("Distributed resource exchange", Ranadive, Gavrilovska and Schwan,
IEEE CLUSTER 2013).

Three rules keep a remote host from throttling this one on its word alone
(doc/source/fabric.rst, "Across hosts", acting on remote claims):

* **expiry**: a claim whose last report carrying it is older than
  ``max_age_s`` is dropped when the windows are read, not when the board
  says so (a board that stopped answering expires every claim all the
  same); a claim its host's newer report leaves out (the victim quiet
  between two of its reports, or gone) stays until then;
* **evidence**: a claim over its threshold on a port whose measured load
  could not slow a request by that much (an M/G/1-PS port at the last
  epoch's link utilisation) moves no cap, unless the market already holds
  a sender under its limit (the low load is then the cap's doing)
  (:func:`~resex_libvirt.board.remote_claims.port_supports`);
* **the tenant's own SLA stands**: a VM with a latency SLA of its own is
  never judged by a remote claim.

Ensembles (:mod:`resex_libvirt.board.ensembles`) ride on the same source:
the same pass over the board judges each ensemble by its worst fresh member,
and a local member of an ensemble whose worst member is over its bound on
another host is judged by that member's SLA and window, even over an SLA of
its own (the group's SLA is the tenant's too); a VM judged both ways is
judged by the worse.

A window is new evidence once: the same report's claim handed again says
it has no new requests, and a new one says as many as its claimant counted
since its previous report (the window's other requests were seen before),
so that the settling law measures the remote loop's delay as it measures a
local one (its window's span, plus the claimant's report period).

Shared links (:mod:`resex_libvirt.board.link_share`) ride on it too: with a
topology, the same thread judges each link this host sends into by the
claims crossing it and the load its hosts report, and a factor below 1
scales the CPU limit of this host's heavy senders (``limit_scale`` in
:meth:`RemoteVictims.slas`), stepped at most once per loop delay.
"""

import logging
import threading
import time

from resex_libvirt.board import addresses as addresses_mod
from resex_libvirt.board import ensembles as ensembles_mod
from resex_libvirt.board import link_share
from resex_libvirt.board import links as links_mod
from resex_libvirt.board import reader as reader_mod
from resex_libvirt.board import remote_claims as remote_mod
from resex_libvirt.board import report as report_mod
from resex_libvirt.market import records

LOG = logging.getLogger(__name__)


class RemoteVictims:
    """A latency source of the remote claims on this host's VMs (module docstring).

    ``host``: this host's name on the board; ``reader``: a started-on-demand
    :class:`~resex_libvirt.board.reader.BoardReader` (or anything with
    ``start``, ``stop``, ``snapshot(now)``); ``max_age_s``: a claim's
    expiry; ``recompute_s``: at most one pass over the board per this many
    seconds, by a thread of its own after the reader says the board changed
    (never the loop); ``clock``: wall clock seconds (the board's ``ts``).
    ``topology`` (optional, a :class:`~resex_libvirt.board.links.Topology`):
    the shared links this host's senders are limited on
    (:class:`~resex_libvirt.board.link_share.SharedLinks`, with
    ``link_limits``); the thread then also looks every loop delay, board
    change or not (a limit is released when no claim crosses its link).
    """

    def __init__(self, host, reader, max_age_s, recompute_s=1.0, clock=time.time,
                 topology=None, link_limits=None):
        if not max_age_s > 0:
            raise ValueError("a remote claim's expiry must be above 0 s, got %r" % (max_age_s,))
        self.host = host
        self.topology = topology if topology is not None and topology.links_of(host) else None
        self.links = (link_share.SharedLinks(link_limits or link_share.LinkLimits())
                      if self.topology is not None else None)
        self._senders = frozenset()     # this host's heavy senders at the last epoch
        self._limited = frozenset()     # the senders the links' factor limits now
        #: ``() -> {vm: {peer: bytes/s}}`` (:meth:`resex_agent.peers.PeerRates.rates`),
        #: or None: with a topology, what this host sends beyond each link is
        #: then counted (:meth:`link_tx`), else estimated by its readers.
        self.peer_rates = None
        self._link_tx = {}
        self._link_claims = {}      # peer's host -> [Target]: the claims the links judged last
        self.reader = reader
        self.max_age_s = float(max_age_s)
        self.recompute_s = float(recompute_s)
        self._clock = clock
        self._found = ()            # Targets on this host, replaced whole by the claims' thread
        self._groups = {}           # ensemble -> Judgement, replaced whole by the same thread
        self._members = {}          # local vm -> its ensemble
        self._windows = ()          # the local VMs whose windows were handed last
        self._withheld = {}         # local member -> the group judgement withheld last
        self._lock = threading.Lock()
        self._dirty = threading.Event()
        self._stop = threading.Event()
        self._thread = None
        self._local = frozenset()
        self._own_sla = frozenset()
        self._handed = {}           # local vm -> (claiming host, victim, report ts) last handed
        self._contradicted = {}     # the same, of the claims last found contradicted
        self._victims = {}
        self._expired = set()
        #: The last epoch's port slowdown (percent), or None before the first epoch.
        self.port_inflation_pct = None
        #: The market held a sender under its limit at the last epoch's end.
        self.holding = False
        #: Claims heard and ignored since the start: ``{"contradicted": n, "expired": n}``
        #: (and ``"link_contradicted"``: claims a shared link's load did not support).
        self.ignored = {"contradicted": 0, "expired": 0}
        if self.links is not None:
            self.ignored["link_contradicted"] = 0

    # -- lifecycle -------------------------------------------------------------------
    def start(self):
        """Start following the board, and the thread that finds this host's claims in it."""
        with self._lock:
            if self._thread is None:
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="resex-remote-claims",
                                                daemon=True)
                self._thread.start()
        self.reader.start()
        return self

    def close(self):
        with self._lock:
            thread, self._thread = self._thread, None
        self._stop.set()
        self._dirty.set()
        self.reader.stop()
        if thread is not None:
            thread.join(5.0)

    # -- the claims' thread ------------------------------------------------------------
    def on_change(self, _records=None):
        """The board changed (the reader's thread): look again, within ``recompute_s``."""
        self._dirty.set()

    def _run(self):
        """At most one pass over the board per ``recompute_s``, after each change."""
        wait = self.links.limits.delay_s if self.links is not None else None
        while not self._stop.is_set():
            self._dirty.wait(wait)
            if self._stop.is_set():
                return
            self._dirty.clear()
            self.recompute()
            self._stop.wait(self.recompute_s)

    def recompute(self):
        """Find the claims on this host's VMs in the reader's snapshot (a pass over the board).

        Never on the control loop. A board that stops changing leaves the
        last claims found, and :meth:`victims` expires them by their age.
        """
        now = self._clock()
        try:
            snapshot = self.reader.snapshot(now)
            found = remote_mod.on_host(self.host, snapshot, now, self.max_age_s)
            groups = ensembles_mod.judge(snapshot, now, self.max_age_s)
        except Exception:
            LOG.exception("could not find the remote claims on this host")
            return
        self._groups = self._keep_judgements(groups, snapshot, now)
        if self.links is not None:
            self._step_links(snapshot, now)
        # A claim its host's newer report no longer carries (the victim's
        # window went quiet between two of its reports, or it is gone) is
        # kept until it expires, with no new requests: a quiet victim is
        # held as the market holds a local one, not dropped at once. Kept a
        # while past its expiry, so that :meth:`victims` counts it expired.
        kept = _left_out(found, self._found, now, 2.0 * self.max_age_s)
        self._found = tuple(found) + tuple(kept)

    def _step_links(self, snapshot, now):
        """Step this host's shared links' factors on the board (one INFO line per change)."""
        reports = snapshot.values() if isinstance(snapshot, dict) else snapshot
        fresh = {r.host: r for r in reports
                 if not r.blind and r.age(now) <= self.max_age_s}
        try:
            claims = self._keep_link_claims(remote_mod.targets(fresh, now, self.max_age_s), now)
            steps = self.links.step(link_share.judge(self.topology, self.host, fresh, claims),
                                    now)
        except Exception:
            LOG.exception("could not judge this host's shared links")
            return
        self.ignored["link_contradicted"] = self.links.contradicted
        if self.peer_rates is not None:
            self._count_link_tx(fresh)
        for s in steps:
            j = s.judgement
            because = ("victim %s on %s %+.0f%%" % (j.worst.claim.vm, j.worst.host,
                                                    remote_mod.claimed_pct(j.worst.claim))
                       if j.worst is not None else "no claim crosses it")
            LOG.info("shared link %s: this host's heavy senders' limit x%.3f -> x%.3f (%s: "
                     "%s; link %.0f%% loaded by %d of %d hosts; this host %.2f of its part "
                     "%.2f Gb/s)", s.link, s.old, s.new, s.why, because,
                     100.0 * j.load.utilisation, j.load.heard, j.load.hosts,
                     j.offered * 8e-9, j.part * 8e-9)

    def _keep_link_claims(self, claims, now):
        """``claims``, and each claim judged last that they leave out, until it expires.

        A victim's host publishes its claim with each window it heard; a
        victim slower than the host's epoch (a report every few seconds) is
        left out of the reports between two: held as a quiet remote victim
        is (:meth:`recompute`), not released and cut again at each report.
        Its window, already used, moves nothing while it is kept.
        """
        every = [t for found in claims.values() for t in found]
        out = {peer: list(found) for peer, found in claims.items()}
        for peer, found in self._link_claims.items():
            kept = _left_out(every, found, now, self.max_age_s)
            if kept:
                out.setdefault(peer, []).extend(kept)
        self._link_claims = out
        return out

    def _count_link_tx(self, fresh):
        """What this host's VMs send beyond each of its links, by their peers' hosts."""
        try:
            index = addresses_mod.index(fresh)

            def where(peer):
                found = addresses_mod.locate(peer, index)
                return found.host if found is not None else None
            self._link_tx = links_mod.beyond(self.topology, self.host, self.peer_rates(), where)
        except Exception:
            LOG.exception("could not count what this host sends beyond its shared links")

    def link_tx(self):
        """``{link: bytes/s}`` this host sent beyond its shared links (empty when not counted)."""
        return self._link_tx

    def link_factors(self):
        """``{link: factor}`` of the shared links this host limits its senders on (< 1)."""
        return self.links.factors() if self.links is not None else {}

    def _keep_judgements(self, groups, snapshot, now):
        """``groups``, each ensemble's worst member held until it expires, as a claim is.

        A worst member its host's newer report leaves out (its window quiet
        between two reports, or gone) still judges the ensemble until its
        report expires, unless a worse one is on the board now (kept a while
        past its expiry, so that :meth:`victims` counts it expired).
        """
        reports = snapshot.values() if isinstance(snapshot, dict) else snapshot
        seen = {(r.host, m.vm) for r in reports if not r.blind for m in r.ensembles}
        out = dict(groups)
        for group, old in self._groups.items():
            if (old.host, old.member.vm) in seen or now - old.ts > 2.0 * self.max_age_s:
                continue
            new = out.get(group)
            if new is None or (remote_mod.claimed_pct(old.member)
                               > remote_mod.claimed_pct(new.member)):
                out[group] = old
        return out

    # -- the latency source ------------------------------------------------------------
    def sync(self, vms):
        """The VMs on the host (``{uuid: VMInfo}``): own SLAs, ensembles."""
        self._local = frozenset(vms)
        self._own_sla = frozenset(u for u, info in vms.items() if info.sla.sensitive)
        self._members = {u: info.ensemble for u, info in vms.items() if info.ensemble}

    def set_port_load(self, link_utilisation, holding=False, senders=()):
        """The last epoch's port load (the evidence rule) and whether a sender was held.

        ``holding``: the market held a VM under its limit at the epoch's
        end; the port's load is then what the cap left, not evidence
        (:func:`~resex_libvirt.board.remote_claims.port_supports`).
        ``senders``: the epoch's heavy I/O VMs (the report's rule,
        :func:`~resex_libvirt.board.report.heavy_io`), whom a shared link's
        factor limits.
        """
        self.port_inflation_pct = report_mod.queueing_inflation_pct(link_utilisation)
        self.holding = bool(holding)
        self._senders = frozenset(senders)

    def victims(self):
        """``{local vm: Victim}``: the remote victims judged from now on (none expired).

        Called once per interval, before the windows are taken (the
        controller's :meth:`slas`), so that the SLA the market judges a VM by
        and the window it is handed come from the same claim.
        """
        now = self._clock()
        found, groups = self._found, self._groups
        expired = {(t.host, t.claim.vm, t.ts) for t in found if now - t.ts > self.max_age_s}
        expired.update((j.host, j.member.vm, j.ts) for g, j in groups.items()
                       if g in self._members.values() and now - j.ts > self.max_age_s)
        self.ignored["expired"] += len(expired - self._expired)
        self._expired = expired
        out = remote_mod.victims(found, self._local, self._own_sla, now, self.max_age_s)
        members = {vm: g for vm, g in self._members.items() if vm in self._local}
        for vm, victim in ensembles_mod.victims(self.host, groups, members, now,
                                                self.max_age_s).items():
            other = out.get(vm)
            if other is None or remote_mod.worse(victim.target, other.target):
                out[vm] = victim
        self._withhold(out)
        self._victims = out
        return self._victims

    def _withhold(self, out):
        """Drop from ``out`` what the port contradicts of the members with SLAs of their own.

        Such a member is judged by its own window: were it given the group's
        SLA without the group's window (:meth:`windows` hands none the port
        contradicts), the market would judge its own window by another
        member's SLA. Counted and logged once per report, as a claim is.
        """
        inflation = self.port_inflation_pct
        withheld = {}
        for vm in [vm for vm in out if vm in self._own_sla]:
            victim = out[vm]
            if inflation is not None and remote_mod.port_supports(victim.claim, inflation,
                                                                  self.holding):
                continue
            del out[vm]
            if inflation is None:
                continue        # no epoch has measured the port yet: nothing is supported
            key = (victim.target.host, victim.claim.vm, victim.target.ts)
            if self._withheld.get(vm) != key:
                self.ignored["contradicted"] += 1
                LOG.info("ensemble %s: member %s of %s claims %.0f%% over its SLA; this "
                         "port's load supports %.0f%%: local member %s keeps its own SLA",
                         victim.claim.ensemble, victim.claim.vm, victim.target.host,
                         remote_mod.claimed_pct(victim.claim), inflation, vm)
            withheld[vm] = key
        self._withheld = withheld

    def slas(self):
        """``{local vm: {SLA field: value}}`` of the remote victims now (:meth:`victims`).

        With shared links limited (a factor below 1), each heavy sender of
        this host without a latency SLA of its own also carries
        ``limit_scale``: the factor its CPU limit is scaled by. A sender
        stays limited while the factor is below 1, also when the limit made
        it light (its traffic is then the limit's doing).
        """
        out = {vm: v.sla_fields() for vm, v in self.victims().items()}
        factor = self.links.factor() if self.links is not None else 1.0
        if factor >= 1.0:
            self._limited = frozenset()
            return out
        self._limited = (self._limited | self._senders) & (self._local - self._own_sla)
        for vm in self._limited:
            out[vm] = dict(out.get(vm, {}), limit_scale=round(factor, 4))
        return out

    def slas_in_force(self):
        """The local VMs judged by a remote victim's SLA now (the last :meth:`slas`)."""
        return tuple(self._victims)

    def windows(self):
        """``{local vm: LatencyWindow}``: each remote victim's window, if the port supports it.

        The victims are those of the interval's :meth:`slas`; a claim the
        port's load contradicts is left out (counted and logged once per
        report; none is supported before the first epoch measured the port),
        and one handed before says it has no new requests.
        """
        out = {}
        contradicted = {}
        inflation = self.port_inflation_pct
        if inflation is None:
            return out      # no epoch has measured the port yet: nothing is supported
        for vm, victim in self._victims.items():
            c = victim.claim
            key = (victim.target.host, c.vm, victim.target.ts)
            if not remote_mod.port_supports(c, inflation, self.holding):
                if self._contradicted.get(vm) != key:
                    self.ignored["contradicted"] += 1
                    LOG.info("remote victim %s of %s on local VM %s: claims %.0f%% over its "
                             "SLA; this port's load supports %.0f%%: no cap moves",
                             c.vm, victim.target.host, vm, remote_mod.claimed_pct(c),
                             inflation)
                contradicted[vm] = key
                continue
            # Said by the claimant (new since its last report), else the whole window.
            new = 0 if self._handed.get(vm) == key else (
                c.count if c.new is None else c.new)
            self._handed[vm] = key
            out[vm] = records.LatencyWindow(count=c.count, mean_us=c.mean_us, std_us=c.std_us,
                                            p99_us=c.p99_us, new=new)
        self._contradicted = contradicted
        for vm in [vm for vm in self._handed if vm not in self._victims]:
            del self._handed[vm]
        self._windows = tuple(out)
        return out

    def handed(self):
        """The local VMs whose windows this source handed the market last (not their own)."""
        return self._windows

    def describe(self, vm):
        """``remote victim VICTIM on HOST +N%`` for a local VM judged by a claim, else None.

        ``ensemble E: member VM on HOST +N%`` for one judged by its ensemble.
        """
        victim = self._victims.get(vm)
        if victim is None:
            return None
        c = victim.claim
        if isinstance(c, ensembles_mod.Member):
            return "ensemble %s: member %s on %s %+.0f%%" % (
                c.ensemble, c.vm, victim.target.host, remote_mod.claimed_pct(c))
        return "remote victim %s on %s %+.0f%%" % (
            c.vm, victim.target.host, remote_mod.claimed_pct(c))


def build(host, url, board_opts, max_age_s, recompute_s=1.0, topology=None,
          link_delay_s=link_share.DELAY_S):
    """A :class:`RemoteVictims` following the board at ``url`` (not started).

    ``topology``: the shared links (or None); ``link_delay_s``: the loop
    delay a link's factor changes at most once in.
    """
    holder = {}
    reader = reader_mod.BoardReader(
        url, max_age=max_age_s, refresh_interval=min(2.0, max_age_s / 2.0),
        board_opts=board_opts, on_change=lambda records: holder["self"].on_change(records))
    source = holder["self"] = RemoteVictims(
        host, reader, max_age_s, recompute_s, topology=topology,
        link_limits=link_share.LinkLimits(delay_s=link_delay_s))
    return source


def _left_out(found, before, now, bound_s):
    """The targets of ``before`` whose claim ``found`` leaves out, up to ``bound_s`` old.

    A claim is its claimant's host and victim; one left out is a quiet
    victim's (or a gone one's), held until it is ``bound_s`` seconds old.
    """
    seen = {(t.host, t.claim.vm) for t in found}
    return [t for t in before if (t.host, t.claim.vm) not in seen and now - t.ts <= bound_s]
