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

"""The etcd v3 price board, through etcd's gRPC-JSON gateway (etcd3gw's wire format).

``etcd3+http://host:2379`` (or ``etcd3+https://``), or every member of the
cluster, comma-separated: ``etcd3+http://10.0.0.1:2379,10.0.0.2:2379,10.0.0.3``
(port 2379 when left out, IPv6 addresses in brackets). Query parameters
``prefix``, ``timeout``, ``lease_ttl`` override the keyword defaults. etcd is
what an OpenStack control plane already runs (devstack starts it on the
controller), so a fleet needs no new service.

Layout and costs:

* One key per host, ``<prefix><host>``, holding the report's JSON. A publish
  is one ``put`` (measured: about 1.4 ms, doc/source/board.rst), plus a lease
  keep-alive once a third of the lease TTL has passed.
* Every key is attached to this agent's **lease**: if the agent dies, its key
  disappears ``lease_ttl`` seconds later (garbage collection of
  decommissioned hosts). Only a lease etcd says is gone ("lease not found",
  or a keep-alive without a TTL) is granted again; a lease is the cluster's,
  so it outlives a member's death or a new leader. Freshness is still judged
  by the record's ``ts``, because leases survive an etcd restart (the clock
  of a lease restarts with the server).
* A snapshot is **one** prefix range read (about 20 ms at 1,000 hosts, 210 ms
  at 10,000), never one read per host.
* **Every call has a timeout** (``timeout``, seconds): etcd3gw's default
  blocks for ever. With several members it is the budget of the whole call:
  the member that answered last is asked first, and a member that cannot
  serve (connection refused or timed out; etcd's "leader changed", "no
  leader", "request timed out"; any 5xx) hands the call to the next one, each
  attempt getting an even share of what is left. A pass where every member
  answered with such an error (an election) is tried again after 0.1 s
  while the budget lasts; a pass where none answered at all is not.
* Every error becomes ``BoardUnavailable``, cause chained, naming what each
  member said.

**Following the board** (:meth:`EtcdBoard.follow`, the scheduler): one
prefix range read (the full board and its revision ``R``), then one watch
stream on the prefix from ``R + 1`` that delivers every put and delete as it
happens: a scheduler costs etcd one event per change instead of a range read
of the whole fleet every few seconds. The stream is re-opened from the last
revision seen after ``watch_idle`` seconds (10) without a message: a
connection to an etcd that died or restarted can stay silent rather than
close, and etcd's own progress notifications come only every few minutes,
so a quiet board costs one watch request per ``watch_idle`` instead. A
stream that ended or went silent is re-opened on the next member (revisions
are the cluster's, so it resumes where it was). If etcd compacted that
revision away the reader starts over with a full read; if no member can
open the stream, ``follow`` raises and the caller starts over.

Operators must enable etcd auto-compaction: every put adds a revision
(about 414 bytes, measured), which is why a large fleet publishes on
change (:mod:`resex_libvirt.board.publish_policy`).
"""

import base64
import json
import logging
import os
import re
import socket
import threading
import time
import urllib.parse
import warnings

import requests

from resex_libvirt.board import backend
from resex_libvirt import exceptions

with warnings.catch_warnings():
    # etcd3gw imports futurist, which imports eventlet where it is installed
    # (a nova-compute node) and so prints eight lines of its deprecation
    # warning on every command; nothing here uses eventlet.
    warnings.filterwarnings("ignore", message=r"\s*Eventlet is deprecated")
    import etcd3gw
    from etcd3gw import exceptions as etcd_exc

LOG = logging.getLogger(__name__)

DEFAULT_PREFIX = "/resex/board/"
DEFAULT_PORT = 2379
SCHEMES = {"etcd3+http": "http", "etcd3+https": "https"}
_ERRORS = (etcd_exc.Etcd3Exception, requests.RequestException, ValueError, KeyError, TypeError)

#: What etcd says when a member cannot serve a request now but another may
#: (etcd's rpctypes errors of gRPC code Unavailable).
_TRANSIENT = ("leader changed", "no leader", "request timed out", "not capable",
              "too many requests", "server stopped", "timed out")
#: Pause between two passes over members that all answered with an error.
_PASS_PAUSE_S = 0.1
#: The shortest attempt on one member, however little of the budget is left.
_MIN_ATTEMPT_S = 0.05
#: A host: a name or an IPv4 address (an IPv6 address comes in brackets).
_HOST = re.compile(r"^[A-Za-z0-9._-]+$")
_HOST6 = re.compile(r"^[0-9A-Fa-f:.]+(%[A-Za-z0-9._-]+)?$")


def _b64(data):
    return base64.b64encode(data).decode("ascii")


def _prefix_end(prefix):
    """The etcd ``range_end`` of a prefix: the prefix with its last byte + 1."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def _shutdown_stream(resp):
    """Wake a thread blocked reading ``resp`` (closing alone does not) and close it."""
    try:
        sock = socket.fromfd(resp.raw.fileno(), socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.shutdown(socket.SHUT_RDWR)
        finally:
            sock.close()
    except (OSError, ValueError, AttributeError):
        LOG.debug("shutting the etcd watch stream down failed", exc_info=True)
    try:
        resp.close()
    except Exception:  # noqa: BLE001 - best effort on shutdown
        LOG.debug("closing the etcd watch stream failed", exc_info=True)


def _object(value):
    """``value`` if it is a JSON object, else an empty one (a watch message is untrusted)."""
    return value if isinstance(value, dict) else {}


def _stream_timeout(resp, seconds):
    """Let an open stream's reads wait ``seconds`` (its headers came within the attempt's)."""
    try:
        resp.raw.connection.sock.settimeout(seconds)
        return True
    except (AttributeError, OSError):
        LOG.debug("could not set the etcd watch stream's read timeout", exc_info=True)
        return False


def _lease_lost(exc):
    text = "%s %s" % (exc, getattr(exc, "detail_text", ""))
    return "lease not found" in text


def _unreachable(exc):
    """True if the member did not answer at all (refused, reset, timed out)."""
    return isinstance(exc.__cause__, requests.RequestException)


def _transient(exc):
    """True if another member may serve what this one could not (module docstring)."""
    if isinstance(exc, (etcd_exc.ConnectionFailedError, etcd_exc.ConnectionTimeoutError,
                        etcd_exc.InternalServerError)):
        return True
    text = ("%s %s" % (exc, getattr(exc, "detail_text", "") or "")).lower()
    return any(word in text for word in _TRANSIENT)


def _http_error(resp):
    """The etcd3gw exception of a non-200 answer, with etcd's own message when it gave one."""
    cls = {500: etcd_exc.InternalServerError, 503: etcd_exc.ConnectionFailedError,
           408: etcd_exc.ConnectionTimeoutError,
           504: etcd_exc.ConnectionTimeoutError}.get(resp.status_code, etcd_exc.Etcd3Exception)
    message = resp.reason
    try:
        body = resp.json()
        message = body.get("error") or body.get("message") or message
    except (ValueError, AttributeError):
        pass
    return cls(resp.text, "HTTP %d %s" % (resp.status_code, message))


def parse_endpoints(netloc, url):
    """``[(host, port)]`` of a board URL's comma-separated members; ConfigError if malformed.

    A ``user:password@`` part is not a member: the board authenticates with
    it (:class:`EtcdBoard`); ``redact()`` removes it from logs.
    """
    hosts = netloc.rpartition("@")[2]
    out = []
    for item in hosts.split(","):
        item = item.strip()
        if item.startswith("["):
            host, closed, rest = item[1:].partition("]")
            if not closed or (rest and not rest.startswith(":")) or not _HOST6.match(host):
                raise exceptions.ConfigError(
                    "bad etcd member %r in board URL %r: an IPv6 address is [address]:port"
                    % (item, url))
            port = rest[1:]
        else:
            host, _, port = item.partition(":")
            if not _HOST.match(host) or ":" in port:
                raise exceptions.ConfigError(
                    "bad etcd member %r in board URL %r: a member is host:port (IPv6 in "
                    "brackets), members are separated by commas" % (item, url))
        if port and not (port.isdigit() and 0 < int(port) < 65536):
            raise exceptions.ConfigError(
                "bad port %r of etcd member %r in board URL %r" % (port, item, url))
        member = (host.lower(), int(port) if port else DEFAULT_PORT)
        if member in out:
            raise exceptions.ConfigError(
                "etcd member %r is named twice in board URL %r" % (item, url))
        out.append(member)
    return out


def _netloc(host, port):
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)


#: Words in an error's chain -> what an operator reads.
_REASONS = (
    (("name or service not known", "failed to resolve", "nodename nor servname",
      "temporary failure in name resolution", "nameresolutionerror"), "name not resolved"),
    (("connection refused",), "connection refused (is etcd running and listening there?)"),
    (("timed out", "timeout"), "timed out"),
    (("certificate verify failed", "sslerror", "ssl:"), "TLS handshake failed"),
)


def why(exc):
    """Why a call failed, in words, from the whole chain of ``exc``.

    etcd3gw raises its own errors without a message (``ConnectionFailedError:
    ``), from the ``requests`` error that says what happened.
    """
    chain = []
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    text = " ".join("%s %s" % (type(e).__name__, e) for e in chain).lower()
    for words, reason in _REASONS:
        if any(w in text for w in words):
            return "%s (%s)" % (reason, type(chain[0]).__name__)
    detail = next((str(e) for e in chain if str(e)), "")
    return "%s: %s" % (type(chain[0]).__name__, detail) if detail else type(chain[0]).__name__


class EtcdBoard(backend.Board):
    """A board under a key prefix of an etcd v3 cluster (see the module docstring)."""

    def __init__(self, url, prefix=DEFAULT_PREFIX, timeout=2.0, lease_ttl=120,
                 ca_cert=None, cert_key=None, cert_cert=None, clock=time.monotonic,
                 watch_idle=10.0,
                 **_ignored):
        try:
            parts = urllib.parse.urlsplit(url)
        except ValueError as exc:     # an unbalanced IPv6 bracket
            raise exceptions.ConfigError("bad etcd board URL %r: %s" % (url, exc)) from exc
        if parts.scheme not in SCHEMES or not parts.netloc.rpartition("@")[2]:
            raise exceptions.ConfigError(
                "an etcd board URL is etcd3+http://host:port or etcd3+https://host:port, "
                "or every member: etcd3+http://host1:port1,host2:port2,..., got %r" % url)
        self.members = parse_endpoints(parts.netloc, url)
        # etcd's user authentication: ``user:password@`` (the JSON gateway
        # cannot take a user from a certificate's common name).
        self._credentials = None
        if parts.username:
            self._credentials = {"name": urllib.parse.unquote(parts.username),
                                 "password": urllib.parse.unquote(parts.password or "")}
        self._tokens = {}       # member index -> its auth token (a simple token is a member's)
        query = dict(urllib.parse.parse_qsl(parts.query))
        prefix = query.get("prefix", prefix)
        try:
            self.timeout = float(query.get("timeout", timeout))
            self.lease_ttl = int(query.get("lease_ttl", lease_ttl))
        except ValueError as exc:
            raise exceptions.ConfigError("bad etcd board URL %r: %s" % (url, exc)) from exc
        if not self.timeout > 0 or self.lease_ttl < 1:
            raise exceptions.ConfigError("etcd board timeout and lease_ttl must be positive")
        if not prefix.endswith("/"):
            prefix += "/"
        self.prefix = prefix
        self.endpoints = [_netloc(host, port) for host, port in self.members]
        self.url = "%s://%s%s" % (parts.scheme, ",".join(self.endpoints), parts.path)
        protocol = SCHEMES[parts.scheme]
        self._bases = ["%s://%s" % (protocol, e) for e in self.endpoints]
        self._current = 0
        self._api_path = os.environ.get("ETCD3GW_API_PATH")    # as etcd3gw: else asked
        self._clock = clock
        self._lock = threading.Lock()
        self._decoder = backend.RecordDecoder(self.url)
        self._lease = None
        self._lease_refreshed = 0.0
        self._watch_response = None
        self.watch_idle = float(watch_idle)
        self._session = requests.Session()
        if ca_cert is not None:
            self._session.verify = ca_cert
        if (cert_cert is None) != (cert_key is None):
            raise exceptions.ConfigError(
                "etcd board %s: a client certificate needs its key, and a key its "
                "certificate (got only the %s)" % (self.url, "certificate" if cert_cert
                                                   else "key"))
        if cert_cert is not None:
            self._session.cert = (cert_cert, cert_key)
        # Given with every request: a session's ``verify`` loses to the
        # environment's REQUESTS_CA_BUNDLE (requests merges it first), which
        # would silently replace the configured CA.
        self._tls = {"verify": True if ca_cert is None else ca_cert,
                     "cert": None if cert_cert is None else (cert_cert, cert_key)}
        #: One etcd3gw client per member, sharing the session (maintenance, tools, tests).
        self._clients = [etcd3gw.client(host=host, port=port, protocol=protocol,
                                        session=self._session, timeout=self.timeout)
                         for host, port in self.members]

    @property
    def _client(self):
        """The etcd3gw client of the member that answered last."""
        return self._clients[self._current]

    @property
    def member(self):
        """``host:port`` of the member that answered last (the next call asks it first)."""
        return self.endpoints[self._current]

    def _fail(self, what, exc):
        return exceptions.BoardUnavailable(
            "etcd board %s: %s failed: %s" % (self.url, what, why(exc)))

    # -- one call, member after member --------------------------------------------------
    def _failover(self, what, attempt):
        """``attempt(index, timeout)`` on the members in turn, within ``timeout`` (docstring).

        Raises what a member answered if it is not a reason to ask another
        (a lost lease, a bad request), else ``BoardUnavailable`` naming every
        member's failure.
        """
        n = len(self._bases)
        first = self._current
        deadline = time.monotonic() + self.timeout
        failures = {}
        tried = 0
        answered = False
        while True:
            index = (first + tried) % n
            left = deadline - time.monotonic()
            try:
                result = attempt(index, max(left / (n - tried % n), _MIN_ATTEMPT_S))
            except etcd_exc.Etcd3Exception as exc:
                if not _transient(exc):
                    raise
                failures[index] = exc
                answered = answered or not _unreachable(exc)
            else:
                if index != self._current:
                    LOG.info("etcd board %s: %s now goes to member %s", self.url, what,
                             self.endpoints[index])
                    self._current = index
                return result
            tried += 1
            if tried % n == 0:
                if not answered or deadline - time.monotonic() <= _PASS_PAUSE_S:
                    break
                answered = False
                time.sleep(_PASS_PAUSE_S)
            elif time.monotonic() >= deadline:
                break
        last = failures[index]
        if n == 1:
            raise self._fail(what, last) from last
        raise exceptions.BoardUnavailable("etcd board %s: %s failed on every member: %s" % (
            self.url, what, "; ".join("%s %s" % (self.endpoints[i], why(e))
                                      for i, e in sorted(failures.items())))) from last

    def _api(self, index, timeout):
        """The gateway's API path (``/v3/`` since etcd 3.4), asked once of a member."""
        if self._api_path is None:
            resp = self._session.get(self._bases[index] + "/version", timeout=timeout,
                                     **self._tls)
            if resp.status_code != 200:
                raise _http_error(resp)
            version = tuple(int(p) for p in resp.json()["etcdserver"].split(".")[:2])
            self._api_path = ("/v3/" if version >= (3, 4) else
                              "/v3beta/" if version >= (3, 3) else "/v3alpha/")
        return self._api_path

    def _send(self, index, path, timeout, **kwargs):
        """One HTTP POST to one member, authenticated if the URL names a user.

        A token the member no longer knows (it restarted, or expired it) is
        asked for again once.
        """
        if self._credentials is None:
            return self._post(index, path, timeout, **kwargs)
        for again in (False, True):
            token = self._tokens.get(index)
            if token is None:
                token = self._tokens[index] = self._post(
                    index, "/auth/authenticate", timeout, json=self._credentials).json()["token"]
            try:
                return self._post(index, path, timeout, headers={"Authorization": token},
                                  **kwargs)
            except etcd_exc.Etcd3Exception as exc:
                if again or "invalid auth token" not in ("%s %s" % (
                        exc, getattr(exc, "detail_text", ""))).lower():
                    raise
                self._tokens.pop(index, None)

    def _post(self, index, path, timeout, **kwargs):
        """One HTTP POST to one member; connection errors as etcd3gw's exceptions."""
        try:
            url = self._bases[index] + self._api(index, timeout) + path.lstrip("/")
            resp = self._session.post(url, timeout=timeout, **self._tls, **kwargs)
        except requests.Timeout as exc:
            raise etcd_exc.ConnectionTimeoutError(str(exc)) from exc
        except requests.RequestException as exc:     # refused, reset, cut short
            raise etcd_exc.ConnectionFailedError(str(exc)) from exc
        if resp.status_code != 200:
            error = _http_error(resp)
            resp.close()
            raise error
        return resp

    def _call(self, what, path, body):
        """POST ``body`` (JSON) to ``path`` of the API on the first member that serves it."""
        return self._failover(
            what, lambda index, timeout: self._send(index, path, timeout, json=body).json())

    # -- the lease ----------------------------------------------------------------
    def _grant(self):
        result = self._call("lease grant", "/lease/grant", {"TTL": self.lease_ttl, "ID": 0})
        lease = etcd3gw.Lease(int(result["ID"]), client=self._client)
        LOG.debug("granted etcd lease %x (ttl %ds) for %s", lease.id, self.lease_ttl,
                  self.prefix)
        return lease

    def _current_lease(self):
        """This board's lease, refreshed once a third of its TTL has passed.

        A keep-alive that fails on every member raises and keeps the lease
        (the cluster still has it); only a lease etcd says is gone is
        granted again.
        """
        now = self._clock()
        if self._lease is None:
            self._lease = self._grant()
            self._lease_refreshed = now
        elif now - self._lease_refreshed >= self.lease_ttl / 3.0:
            result = self._call("lease keep-alive", "/lease/keepalive", {"ID": self._lease.id})
            if int((result.get("result") or {}).get("TTL", -1)) <= 0:
                LOG.info("etcd lease %x expired; granting a new one", self._lease.id)
                self._lease = self._grant()
            self._lease_refreshed = now
        return self._lease

    # -- Board ----------------------------------------------------------------------
    def _put(self, host, key, value):
        self._call("publish of %s" % host, "/kv/put", {
            "key": _b64(key.encode("utf-8")), "value": _b64(value.encode("utf-8")),
            "lease": self._current_lease().id})

    def publish(self, report):
        key = self.prefix + report.host
        value = report.to_json()
        with self._lock:
            try:
                try:
                    self._put(report.host, key, value)
                except etcd_exc.Etcd3Exception as exc:
                    if not _lease_lost(exc):
                        raise
                    LOG.info("etcd lease of %s was lost; granting a new one", key)
                    self._lease = None
                    self._put(report.host, key, value)
            except _ERRORS as exc:
                raise self._fail("publish of %s" % report.host, exc) from exc

    def snapshot(self):
        rows, _revision = self._range()
        return self._decoder.decode(rows)

    def _range(self):
        """One prefix range read: ``(rows, revision)``."""
        prefix = self.prefix.encode("utf-8")
        try:
            result = self._call("range read", "/kv/range", {
                "key": _b64(prefix), "range_end": _b64(_prefix_end(prefix))})
            revision = int(result["header"]["revision"])
            rows = [(base64.b64decode(kv["key"]).decode("utf-8", "replace")[len(self.prefix):],
                     base64.b64decode(kv.get("value", "")))
                    for kv in result.get("kvs", ())]
        except _ERRORS as exc:
            raise self._fail("range read", exc) from exc
        return rows, revision

    def _open_watch(self, start_revision):
        """A watch stream from ``start_revision`` on the first member that opens one."""
        prefix = self.prefix.encode("utf-8")
        request = {"create_request": {
            "key": _b64(prefix), "range_end": _b64(_prefix_end(prefix)),
            "start_revision": start_revision, "progress_notify": True}}

        def attempt(index, timeout):
            # The headers come with etcd's "created" message: within the
            # attempt's timeout; then the stream may stay quiet watch_idle.
            resp = self._send(index, "/watch", timeout, json=request, stream=True)
            if not _stream_timeout(resp, self.watch_idle):
                resp.close()
                resp = self._send(index, "/watch", (timeout, self.watch_idle),
                                  json=request, stream=True)
            return resp
        try:
            resp = self._failover("watch from revision %d" % start_revision, attempt)
        except _ERRORS as exc:
            raise self._fail("watch from revision %d" % start_revision, exc) from exc
        self._watch_response = resp
        return resp

    def follow(self, stop, interval=None):
        """The full board once, then every change as the watch delivers it (module docstring).

        ``interval`` is not used: changes arrive as they happen.
        """
        rows, revision = self._range()
        yield True, self._decoder.decode(rows)
        while not stop.is_set():
            resp = self._open_watch(revision + 1)
            try:
                for line in resp.iter_lines(chunk_size=None):
                    if stop.is_set():
                        return
                    if not line:
                        continue
                    result = _object(_object(json.loads(line)).get("result"))
                    if int(result.get("compact_revision", 0) or 0) > 0 or result.get("canceled"):
                        # History is gone (compacted): start over from a full read.
                        LOG.info("etcd board %s: watch cancelled at revision %d (%s); "
                                 "re-reading the board", self.url, revision,
                                 result.get("cancel_reason") or "compacted")
                        rows, revision = self._range()
                        yield True, self._decoder.decode(rows)
                        break
                    changed, revision = self._changes(result, revision)
                    if changed:
                        yield False, self._decoder.decode_changes(changed)
            except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
                if stop.is_set():
                    return
                self._next_member()
                LOG.debug("etcd board %s: watch stream ended (%s); resuming from revision %d "
                          "on %s", self.url, exc, revision + 1, self.member)
                stop.wait(0.1)
            finally:
                self._watch_response = None
                resp.close()

    def _next_member(self):
        """Ask the next member first: the one that answered last went silent or away."""
        self._current = (self._current + 1) % len(self._bases)

    def _changes(self, result, revision):
        """``([(host, raw or None)], revision)`` of one watch message."""
        header = _object(result.get("header"))
        events = result.get("events")
        events = events if isinstance(events, list) else ()
        changed = []
        for event in events:
            kv = _object(_object(event).get("kv"))
            if not kv:
                continue    # not an event: a writer cannot make the follower raise
            key = base64.b64decode(kv.get("key", "")).decode("utf-8", "replace")
            if event.get("type") == "DELETE":
                changed.append((key[len(self.prefix):], None))
            else:
                changed.append((key[len(self.prefix):], base64.b64decode(kv.get("value", ""))))
            revision = max(revision, int(kv.get("mod_revision", 0)))
        if "revision" in header and not events and not result.get("created"):
            # A progress notification: everything up to it was delivered.
            revision = max(revision, int(header["revision"]))
        return changed, revision

    def count(self):
        prefix = self.prefix.encode("utf-8")
        try:
            result = self._call("count", "/kv/range", {
                "key": _b64(prefix), "range_end": _b64(_prefix_end(prefix)), "count_only": True})
            return int(result.get("count", 0))
        except _ERRORS as exc:
            raise self._fail("count", exc) from exc

    def withdraw(self):
        """Revoke this board's lease: every key published through it vanishes now."""
        with self._lock:
            if self._lease is None:
                return
            try:
                self._call("lease revoke", "/kv/lease/revoke", {"ID": self._lease.id})
            except etcd_exc.Etcd3Exception as exc:
                if not _lease_lost(exc):    # already gone: nothing to withdraw
                    raise self._fail("lease revoke", exc) from exc
            except _ERRORS as exc:
                raise self._fail("lease revoke", exc) from exc
            finally:
                self._lease = None

    def close(self):
        resp = self._watch_response
        if resp is not None:
            _shutdown_stream(resp)
        with self._lock:
            self._session.close()
