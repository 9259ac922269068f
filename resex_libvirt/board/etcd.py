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

"""The etcd v3 price board, through etcd3gw (etcd's gRPC-JSON gateway).

``etcd3+http://host:2379`` (or ``etcd3+https://``; query parameters
``prefix``, ``timeout``, ``lease_ttl`` override the keyword defaults).
etcd is what an OpenStack control plane already runs (devstack starts it on
the controller), so a fleet needs no new service.

Layout and costs:

* One key per host, ``<prefix><host>``, holding the report's JSON. A publish
  is one ``put`` (measured: about 1.4 ms, doc/source/board.rst), plus a lease keep-alive once a
  third of the lease TTL has passed.
* Every key is attached to this agent's **lease**: if the agent dies, its key
  disappears ``lease_ttl`` seconds later (garbage collection of
  decommissioned hosts). A lease that expired (etcd says "lease not found")
  is granted again and the put retried once. Freshness is still judged by
  the record's ``ts``, because leases survive an etcd restart (the clock of
  a lease restarts with the server).
* A snapshot is **one** prefix range read (about 20 ms at 1,000 hosts, 210 ms
  at 10,000), never one read per host.
* **Every call has a timeout** (``timeout``, seconds): etcd3gw's default
  blocks for ever.
* Every etcd3gw or HTTP error becomes ``BoardUnavailable``, cause chained.

**Following the board** (:meth:`EtcdBoard.follow`, the scheduler): one
prefix range read (the full board and its revision ``R``), then one watch
stream on the prefix from ``R + 1`` that delivers every put and delete as it
happens: a scheduler costs etcd one event per change instead of a range read
of the whole fleet every few seconds. The stream is re-opened from the last
revision seen after ``watch_idle`` seconds (10) without a message: a
connection to an etcd that died or restarted can stay silent rather than
close, and etcd's own progress notifications come only every few minutes,
so a quiet board costs one watch request per ``watch_idle`` instead. If etcd
compacted that revision away, or the stream cannot be re-opened, the reader
starts over with a full read.

Operators must enable etcd auto-compaction: every put adds a revision
(about 414 bytes, measured), which is why a large fleet publishes on
change (:mod:`resex_libvirt.board.publish_policy`).
"""

import base64
import json
import logging
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
SCHEMES = {"etcd3+http": "http", "etcd3+https": "https"}
_ERRORS = (etcd_exc.Etcd3Exception, requests.RequestException, ValueError, KeyError, TypeError)


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


def _lease_lost(exc):
    text = "%s %s" % (exc, getattr(exc, "detail_text", ""))
    return "lease not found" in text


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
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in SCHEMES or not parts.hostname:
            raise exceptions.ConfigError(
                "an etcd board URL is etcd3+http://host:port or etcd3+https://host:port, "
                "got %r" % url)
        query = dict(urllib.parse.parse_qsl(parts.query))
        prefix = query.get("prefix", prefix)
        try:
            self.timeout = float(query.get("timeout", timeout))
            self.lease_ttl = int(query.get("lease_ttl", lease_ttl))
            port = parts.port or 2379
        except ValueError as exc:
            raise exceptions.ConfigError("bad etcd board URL %r: %s" % (url, exc)) from exc
        if not self.timeout > 0 or self.lease_ttl < 1:
            raise exceptions.ConfigError("etcd board timeout and lease_ttl must be positive")
        if not prefix.endswith("/"):
            prefix += "/"
        self.prefix = prefix
        self.url = "%s://%s:%d%s" % (parts.scheme, parts.hostname, port, parts.path)
        self._clock = clock
        self._lock = threading.Lock()
        self._decoder = backend.RecordDecoder(self.url)
        self._lease = None
        self._lease_refreshed = 0.0
        self._watch_response = None
        self.watch_idle = float(watch_idle)
        self._client = etcd3gw.client(
            host=parts.hostname, port=port, protocol=SCHEMES[parts.scheme],
            ca_cert=ca_cert, cert_key=cert_key, cert_cert=cert_cert, timeout=self.timeout)

    def _fail(self, what, exc):
        return exceptions.BoardUnavailable(
            "etcd board %s: %s failed: %s" % (self.url, what, why(exc)))

    # -- the lease ----------------------------------------------------------------
    def _current_lease(self):
        now = self._clock()
        if self._lease is None:
            self._lease = self._client.lease(ttl=self.lease_ttl)
            self._lease_refreshed = now
            LOG.debug("granted etcd lease %x (ttl %ds) for %s", self._lease.id,
                      self.lease_ttl, self.prefix)
        elif now - self._lease_refreshed >= self.lease_ttl / 3.0:
            if self._lease.refresh() <= 0:
                LOG.info("etcd lease %x expired; granting a new one", self._lease.id)
                self._lease = self._client.lease(ttl=self.lease_ttl)
            self._lease_refreshed = now
        return self._lease

    # -- Board ----------------------------------------------------------------------
    def publish(self, report):
        key = self.prefix + report.host
        value = report.to_json()
        with self._lock:
            try:
                try:
                    self._client.put(key, value, lease=self._current_lease())
                except etcd_exc.Etcd3Exception as exc:
                    if not _lease_lost(exc):
                        raise
                    LOG.info("etcd lease of %s was lost; granting a new one", key)
                    self._lease = None
                    self._client.put(key, value, lease=self._current_lease())
            except _ERRORS as exc:
                raise self._fail("publish of %s" % report.host, exc) from exc

    def snapshot(self):
        try:
            items = self._client.get_prefix(self.prefix)
        except _ERRORS as exc:
            raise self._fail("snapshot", exc) from exc
        rows = []
        for value, meta in items:
            key = meta.get("key", b"")
            if isinstance(key, bytes):
                key = key.decode("utf-8", "replace")
            rows.append((key[len(self.prefix):], value))
        return self._decoder.decode(rows)

    def _range(self):
        """One prefix range read: ``(rows, revision)``."""
        prefix = self.prefix.encode("utf-8")
        try:
            result = self._client.post(self._client.get_url("/kv/range"), json={
                "key": _b64(prefix), "range_end": _b64(_prefix_end(prefix))})
            revision = int(result["header"]["revision"])
            rows = [(base64.b64decode(kv["key"]).decode("utf-8", "replace")[len(self.prefix):],
                     base64.b64decode(kv.get("value", "")))
                    for kv in result.get("kvs", ())]
        except _ERRORS as exc:
            raise self._fail("range read", exc) from exc
        return rows, revision

    def _open_watch(self, start_revision):
        prefix = self.prefix.encode("utf-8")
        request = {"create_request": {
            "key": _b64(prefix), "range_end": _b64(_prefix_end(prefix)),
            "start_revision": start_revision, "progress_notify": True}}
        try:
            resp = self._client.session.post(
                self._client.get_url("/watch"), json=request, stream=True,
                timeout=(self.timeout, self.watch_idle))
            if resp.status_code != 200:
                resp.close()
                raise etcd_exc.Etcd3Exception(resp.text, resp.reason)
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
                    result = json.loads(line).get("result") or {}
                    if int(result.get("compact_revision", 0) or 0) > 0 or result.get("canceled"):
                        # History is gone (compacted): start over from a full read.
                        LOG.info("etcd board %s: watch cancelled at revision %d (%s); "
                                 "re-reading the board", self.url, revision,
                                 result.get("cancel_reason") or "compacted")
                        rows, revision = self._range()
                        yield True, self._decoder.decode(rows)
                        break
                    header = result.get("header") or {}
                    events = result.get("events") or ()
                    changed = []
                    for event in events:
                        kv = event.get("kv") or {}
                        key = base64.b64decode(kv.get("key", "")).decode("utf-8", "replace")
                        if event.get("type") == "DELETE":
                            changed.append((key[len(self.prefix):], None))
                        else:
                            changed.append((key[len(self.prefix):],
                                            base64.b64decode(kv.get("value", ""))))
                        revision = max(revision, int(kv.get("mod_revision", 0)))
                    if "revision" in header and not events and not result.get("created"):
                        # A progress notification: everything up to it was delivered.
                        revision = max(revision, int(header["revision"]))
                    if changed:
                        yield False, self._decoder.decode_changes(changed)
            except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
                if stop.is_set():
                    return
                LOG.debug("etcd board %s: watch stream ended (%s); resuming from revision %d",
                          self.url, exc, revision + 1)
                stop.wait(0.1)
            finally:
                self._watch_response = None
                resp.close()

    def count(self):
        try:
            result = self._client.post(self._client.get_url("/kv/range"), json={
                "key": _b64(self.prefix.encode("utf-8")),
                "range_end": _b64(_prefix_end(self.prefix.encode("utf-8"))),
                "count_only": True})
            return int(result.get("count", 0))
        except _ERRORS as exc:
            raise self._fail("count", exc) from exc

    def withdraw(self):
        """Revoke this board's lease: every key published through it vanishes now."""
        with self._lock:
            if self._lease is None:
                return
            try:
                self._lease.revoke()
            except _ERRORS as exc:
                raise self._fail("lease revoke", exc) from exc
            finally:
                self._lease = None

    def close(self):
        resp = self._watch_response
        if resp is not None:
            _shutdown_stream(resp)
        with self._lock:
            self._client.session.close()
