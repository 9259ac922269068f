"""The etcd v3 price board, through etcd3gw (etcd's gRPC-JSON gateway).

``etcd3+http://host:2379`` (or ``etcd3+https://``; query parameters
``prefix``, ``timeout``, ``lease_ttl`` override the keyword defaults).
etcd is what an OpenStack control plane already runs (devstack starts it on
the controller), so a fleet needs no new service.

Layout and costs:

* One key per host, ``<prefix><host>``, holding the report's JSON. A publish
  is one ``put`` (FIELD-NOTES: about 1.4 ms), plus a lease keep-alive once a
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

Operators must enable etcd auto-compaction: every put adds a revision
(about 414 bytes, FIELD-NOTES), which is why a large fleet publishes on
change (:mod:`resex_libvirt.board.publish_policy`).
"""

import base64
import logging
import threading
import time
import urllib.parse

import etcd3gw
from etcd3gw import exceptions as etcd_exc
import requests

from resex_libvirt.board import backend
from resex_libvirt import exceptions

LOG = logging.getLogger(__name__)

DEFAULT_PREFIX = "/resex/board/"
SCHEMES = {"etcd3+http": "http", "etcd3+https": "https"}
_ERRORS = (etcd_exc.Etcd3Exception, requests.RequestException, ValueError, KeyError, TypeError)


def _b64(data):
    return base64.b64encode(data).decode("ascii")


def _prefix_end(prefix):
    """The etcd ``range_end`` of a prefix: the prefix with its last byte + 1."""
    return prefix[:-1] + bytes([prefix[-1] + 1])


def _lease_lost(exc):
    text = "%s %s" % (exc, getattr(exc, "detail_text", ""))
    return "lease not found" in text


class EtcdBoard(backend.Board):
    """A board under a key prefix of an etcd v3 cluster (see the module docstring)."""

    def __init__(self, url, prefix=DEFAULT_PREFIX, timeout=2.0, lease_ttl=120,
                 ca_cert=None, cert_key=None, cert_cert=None, clock=time.monotonic,
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
        self._client = etcd3gw.client(
            host=parts.hostname, port=port, protocol=SCHEMES[parts.scheme],
            ca_cert=ca_cert, cert_key=cert_key, cert_cert=cert_cert, timeout=self.timeout)

    def _fail(self, what, exc):
        return exceptions.BoardUnavailable(
            "etcd board %s: %s failed: %s: %s" % (self.url, what, type(exc).__name__, exc))

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
        with self._lock:
            self._client.session.close()
