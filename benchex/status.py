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

"""The status the agent writes back down a VM's latency channel, version 1.

The latency channel (``org.resex.latency.0``) is bidirectional: the guest
writes its reports into it (:mod:`benchex.wire`), and the agent writes the
VM's own standing back, one line of JSON (UTF-8, ended by ``\\n``) when it
changes, at most once per ``[latency] status_interval_s`` (doc/source/latency.rst,
"Status back to the guest")::

    {"v":1,"state":"missed",
     "sla":{"latency_us":200.0,"threshold_pct":10.0,"statistic":"mean"},
     "window":{"requests":2400,"mean_us":231.0,"p99_us":410.0,"interference_pct":15.5,
               "peer":"10.0.0.7:7788"},
     "cap":null}

    {"v":1,"state":"no_sla","sla":null,"window":null,
     "cap":{"pct":35.0,"limit_pct":200.0,"reason":"congestion","enforced":true}}

``state``: :data:`MET` or :data:`MISSED` (the last window's interference
against the SLA's threshold), :data:`NO_WINDOW` (an SLA, no fresh window),
:data:`NO_SLA`. ``cap`` is ``null`` unless the VM runs under a CPU cap below
its own limit; its ``reason`` is a category (:data:`REASONS`), never the
identity of whoever the cap protects. ``window.peer`` (added to version 1,
present only when known) is the peer the VM's own latest report named
(:mod:`benchex.wire`, version 2): the tenant's own claim, told back. The
line names no VM, host or project at all, not even the VM's own: the
channel is the identity.

This module is both sides' definition: the agent encodes with
:func:`encode`; a guest reads with :class:`StatusReader` (bounded framing,
bad lines skipped) or :func:`parse`. Both use the standard library only, so
BenchEx stays installable in a bare guest Python. A reader accepts version
1 and ignores keys it does not know (a later agent may add some without
changing ``v``); another ``v`` is a change of meaning, and is skipped.
"""

import json
import math
import re

from benchex import framing
from benchex import wire

VERSION = 1

#: Longest status line a reader accepts, newline included (a v1 status is under 400 bytes).
MAX_BYTES = 1024

#: ``state``: the last window met the SLA / missed it / no fresh window / no latency SLA.
MET, MISSED, NO_WINDOW, NO_SLA = "met", "missed", "no_window", "no_sla"
STATES = (MET, MISSED, NO_WINDOW, NO_SLA)

#: ``cap.reason``: the categories a tenant is told, never whom its cap protects.
#: The VM sends into a link on which a latency-sensitive VM of this host misses its SLA.
CONGESTION = "congestion"
#: That congestion is over or the cap did not help: the cap is being released.
CONGESTION_EASING = "congestion_easing"
#: Its Resos ran low at the host's CPU price (the market's credit rule).
CPU_PRICE = "cpu_price"
#: A latency-sensitive VM of this host waits for a CPU the VM uses.
CPU_CONTENTION = "cpu_contention"
#: The agent only logs caps on this host: the cap is what it would set, not in force.
OBSERVE_ONLY = "observe_only"
#: Another rule of the host's pricing policy.
POLICY = "policy"
REASONS = (CONGESTION, CONGESTION_EASING, CPU_PRICE, CPU_CONTENTION, OBSERVE_ONLY, POLICY)

_REASON = re.compile(r"\A[a-z_]{1,32}\Z")


def encode(status):
    """One status line (bytes, newline-terminated) of ``status`` (a dict in the v1 format).

    Raises ``ValueError`` on a non-finite number or a line over :data:`MAX_BYTES`:
    the agent never writes what a reader would skip.
    """
    text = json.dumps(dict(status, v=VERSION), separators=(",", ":"), allow_nan=False,
                      sort_keys=True)
    line = (text + "\n").encode("utf-8")
    if len(line) > MAX_BYTES:
        raise ValueError("status line of %d bytes, over %d" % (len(line), MAX_BYTES))
    return line


def _no_constant(name):
    raise ValueError("non-finite number %s" % name)


def _number(value, positive=False):
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise ValueError("not a finite number >= 0: %r" % (value,))
    if positive and value <= 0:
        raise ValueError("not > 0: %r" % (value,))
    return float(value)


def _object(obj, key):
    value = obj.get(key)
    if value is not None and not isinstance(value, dict):
        raise ValueError("%s is neither an object nor null" % key)
    return value


def _sla(obj):
    if obj is None:
        return None
    statistic = obj.get("statistic", "mean")
    if statistic not in ("mean", "p99"):
        raise ValueError("unknown statistic")
    return {"latency_us": _number(obj.get("latency_us"), positive=True),
            "threshold_pct": _number(obj.get("threshold_pct")), "statistic": statistic}


def _window(obj):
    if obj is None:
        return None
    requests = obj.get("requests")
    if type(requests) is not int or requests < 0:
        raise ValueError("requests is not a count")
    p99 = obj.get("p99_us")
    intf = obj.get("interference_pct")
    out = {"requests": requests, "mean_us": _number(obj.get("mean_us")),
           "p99_us": None if p99 is None else _number(p99),
           # Negative: faster than the SLA's base.
           "interference_pct": None if intf is None else _signed(intf)}
    peer = obj.get("peer")
    if peer is not None:
        if wire.parse_peer(peer) is None:
            raise ValueError("peer is not an address or GID")
        out["peer"] = peer
    return out


def _signed(value):
    if type(value) not in (int, float) or not math.isfinite(value):
        raise ValueError("not a finite number: %r" % (value,))
    return float(value)


def _cap(obj):
    if obj is None:
        return None
    reason = obj.get("reason")
    if not isinstance(reason, str) or not _REASON.match(reason):
        raise ValueError("reason is not a category")
    enforced = obj.get("enforced", True)
    if type(enforced) is not bool:
        raise ValueError("enforced is not a boolean")
    return {"pct": _number(obj.get("pct")), "limit_pct": _number(obj.get("limit_pct"), True),
            "reason": reason, "enforced": enforced}


def parse(line):
    """The status in one line (bytes or str, with or without its newline), or ``None``.

    Untrusted input for the guest (whatever sits on the host end of the
    port wrote it): a line over :data:`MAX_BYTES`, not UTF-8, not a JSON
    object, of another version or with a known key of the wrong type or out
    of range gives ``None``, never an exception. The result holds the known
    keys only: ``v``, ``state``, ``sla``, ``window`` and ``cap``.
    """
    if isinstance(line, str):
        line = line.encode("utf-8", "surrogatepass")
    if len(line) > MAX_BYTES:
        return None
    try:
        obj = json.loads(bytes(line).decode("utf-8"), parse_constant=_no_constant)
        if not isinstance(obj, dict) or type(obj.get("v")) is not int or obj["v"] != VERSION:
            return None
        state = obj.get("state")
        if not isinstance(state, str) or not _REASON.match(state):
            return None
        return {"v": VERSION, "state": state, "sla": _sla(_object(obj, "sla")),
                "window": _window(_object(obj, "window")), "cap": _cap(_object(obj, "cap"))}
    except (ValueError, OverflowError, RecursionError, UnicodeDecodeError):
        # OverflowError: an integer too large for a float (1 followed by 400 zeros).
        return None


class StatusReader:
    """Status lines from a byte stream, the latest valid one kept.

    :meth:`feed` takes whatever a non-blocking read returned. At most
    :data:`MAX_BYTES` are held while a line is incomplete: a longer line is
    skipped to its newline, unbuffered, and counted in :attr:`skipped` like
    any line :func:`parse` refuses. So a host end that writes garbage costs
    the guest a bounded amount of memory.
    """

    def __init__(self):
        self._framer = framing.LineFramer(MAX_BYTES)
        #: The latest valid status (a dict, :func:`parse`), or ``None``.
        self.latest = None
        #: Valid lines read, and lines skipped (too long or refused by :func:`parse`).
        self.received = 0
        self.skipped = 0

    @property
    def pending(self):
        """Bytes held while waiting for the end of a line (always < :data:`MAX_BYTES`)."""
        return self._framer.pending

    def restart(self):
        """A new stream (the port was reopened): forget a half line, keep :attr:`latest`."""
        self._framer = framing.LineFramer(MAX_BYTES)

    def feed(self, data):
        """Read ``data``; returns the latest valid status (``None`` until one came)."""
        for line in self._framer.feed(data):
            if line is framing.TOO_LONG:
                self.skipped += 1
            else:
                self._take(line)
        return self.latest

    def _take(self, line):
        status = parse(line)
        if status is None:
            self.skipped += 1
            return
        self.received += 1
        self.latest = status


def _pct(value):
    return "%g%%" % value


def render(status):
    """``status`` (:func:`parse`) as a few lines of text for a person."""
    sla, win, cap = status["sla"], status["window"], status["cap"]
    lines = ["state: %s" % {MET: "SLA met", MISSED: "SLA missed", NO_WINDOW:
                            "no recent latency window", NO_SLA: "no latency SLA"}.get(
                                status["state"], status["state"])]
    if sla is not None:
        lines.append("SLA: %s us %s, threshold %s" % (
            "%g" % sla["latency_us"], sla["statistic"], _pct(sla["threshold_pct"])))
    if win is not None:
        extra = ""
        if win["p99_us"] is not None:
            extra += ", p99 %g us" % win["p99_us"]
        if win["interference_pct"] is not None:
            extra += ", interference %+g%%" % win["interference_pct"]
        if win.get("peer"):
            extra += ", peer %s" % win["peer"]
        lines.append("window: %d requests, mean %g us%s" % (win["requests"], win["mean_us"],
                                                            extra))
    if cap is None:
        lines.append("cap: none")
    else:
        lines.append("cap: %s of one CPU (limit %s), reason %s%s" % (
            _pct(cap["pct"]), _pct(cap["limit_pct"]), cap["reason"],
            "" if cap["enforced"] else " (not enforced: the agent only observes)"))
    return "\n".join(lines)
