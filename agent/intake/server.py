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

"""The latency intake: Unix sockets in, per-VM latency windows out.

Two ways in (ResEx paper, Ranadive et al. 2011, Section IV: BenchEx "continuously report[s] the
observed server-side latencies" to an agent that forwards them to ResEx):

* **Per-VM channel.** Operators give a latency-sensitive domain a
  virtio-serial channel::

      <channel type='unix'>
        <source mode='bind' path='/var/lib/libvirt/qemu/channel/target/NAME.org.resex.latency.0'/>
        <target type='virtio' name='org.resex.latency.0'/>
      </channel>

  QEMU binds (listens on) the host path, the guest writes reports into
  ``/dev/virtio-ports/org.resex.latency.0``, and the agent *connects* to the
  host path (``VMInfo.latency_channel``). Whatever arrives on that
  connection belongs to that VM: the channel is the identity, and a ``vm``
  field in a channel message is rejected (:mod:`benchex.wire`). QEMU's
  socket chardev serves one client at a time, so nothing else on the host
  can inject into a VM's channel while the agent holds it. When the VM stops
  (EOF) or the socket is not there yet, the agent retries every
  ``channel_retry_s``.
* **Host probe socket.** One Unix stream socket the agent creates (bound,
  set to mode 0600, and only then listening, so no one can connect before
  the mode is set). Probes on the host that measure a VM from outside name
  the VM by UUID in each message. The socket's permissions are the trust
  boundary, and so are its directory's: whoever can write the directory can
  replace the socket with one of their own and receive the probes' reports,
  so the agent refuses to start unless the directory is owned by its user and
  not writable by group or others. As defence in depth the agent reads the
  peer's credentials (``SO_PEERCRED``, unix(7)) and closes connections whose
  uid is neither 0 nor its own. Connections are bounded in number and time:
  one that leaves a line unfinished for ``probe_line_timeout_s`` or sends no
  complete report for ``probe_idle_timeout_s`` is closed, and when all
  ``max_probe_clients`` slots are taken a new connection evicts the one that
  has gone longest without a complete report (so slow-loris connections can
  never lock an honest probe out).

Status back to the guest: the channel is bidirectional, and the agent
writes each VM's own status into it (:mod:`resex_agent.status`, format
:mod:`benchex.status`). The loop hands the lines over with
:meth:`LatencyIntake.post_status`; this thread, the one owner of the channel
sockets, writes them, so no second writer races the reader. A write never
blocks: a line the socket cannot take whole is completed, in order, before
the next one, and a line that finds the socket full (the guest is not
reading) is dropped and counted, never queued; the socket's send buffer is
kept small (:data:`STATUS_SNDBUF`), so a guest that starts reading late finds
a few stale lines, not hours of them. Reading reports goes on regardless.

One native thread multiplexes every socket with :mod:`selectors` (no
eventlet). It reads at most ``_READ_BYTES`` per readable socket per round,
so one flooding tenant cannot starve the others, and frames lines with a
bounded buffer (:mod:`benchex.framing`). Validation, rate limits,
windows and counters live in :class:`~resex_agent.intake.store.ReportStore`.
"""

import errno
import logging
import os
import selectors
import socket
import stat
import struct
import threading
import time

from benchex import framing
from benchex import wire
from resex_agent.intake import params as params_mod
from resex_agent.intake import store as store_mod
from resex_libvirt import exceptions

LOG = logging.getLogger(__name__)

_READ_BYTES = 4096
_UCRED = struct.Struct("3i")
_CONNECT_RETRY_ERRNOS = (errno.ENOENT, errno.ECONNREFUSED, errno.EAGAIN, errno.EACCES,
                         errno.ENOTSOCK, errno.ENOTDIR, errno.EPERM)
#: A channel refused for want of permission is retried (libvirt may not have
#: set its directory's owner yet) but said once, as a warning: if it lasts, the
#: agent runs without the right to QEMU's socket and hears no report.
_DENIED_ERRNOS = (errno.EACCES, errno.EPERM)

#: Bytes of status a channel's socket may hold for a guest that does not read
#: (the kernel doubles it): a few dozen lines.
STATUS_SNDBUF = 8192
#: A VM's status is written again, unchanged, after this many seconds (a guest
#: that opens its port late learns its status without waiting for a change).
STATUS_REFRESH_S = 5.0

#: Probe connections closed by the intake, counted as rejections of these reasons.
IDLE_TIMEOUT = "idle_timeout"
LINE_TIMEOUT = "line_timeout"
EVICTED = "evicted"


class _Conn:
    """One socket the selector watches: a channel, a probe client, the listener, the waker."""

    __slots__ = ("kind", "sock", "vm", "framer", "last_line", "line_since")

    def __init__(self, kind, sock, vm=None, framer=None, now=0.0):
        self.kind = kind
        self.sock = sock
        self.vm = vm
        self.framer = framer
        self.last_line = now        # connect time, then the last complete line
        self.line_since = None      # when the pending half line began


class LatencyIntake:
    """Latency reports from tenants and host probes, kept in bounded per-VM windows.

    ``LatencyIntake(conf_or_params, clock=time.monotonic)``: ``conf_or_params``
    is an oslo.config ``ConfigOpts`` with ``[latency]`` registered
    (:func:`resex_agent.conf.latency.register_opts`) or an
    :class:`~resex_agent.intake.params.IntakeParams`. ``clock`` (seconds,
    monotonic) stamps reports for the freshness horizon and the rate limits.

    The agent loop calls :meth:`start` once, :meth:`sync` with every fresh
    ``{uuid: VMInfo}``, :meth:`windows` each interval, and :meth:`close` at
    the end.
    """

    def __init__(self, conf_or_params=None, clock=time.monotonic):
        if conf_or_params is None:
            params = params_mod.IntakeParams()
        elif isinstance(conf_or_params, params_mod.IntakeParams):
            params = conf_or_params
        else:
            params = params_mod.IntakeParams.from_conf(conf_or_params)
        self.params = params
        self.store = store_mod.ReportStore(params, clock)
        self._lock = threading.Lock()
        self._wanted = {}
        self._channels = {}
        self._retry_at = {}
        self._retry_path = {}   # the path that failed: a new one (VM restarted) is tried at once
        self._denied = {}       # VM -> the path whose permission refusal was said
        self._probe_clients = set()
        self._selector = None
        self._thread = None
        self._stop = threading.Event()
        self._waker_r = self._waker_w = None
        self._listener = None
        self._probe_inode = None
        self._outbox = {}           # uuid -> the latest status line not yet written
        self._tails = set()         # channels with the rest of a status line to write
        self._status_sent = 0
        self._status_dropped = 0

    # -- the interface the agent loop calls ------------------------------------------
    def start(self):
        """Create the probe socket (if configured) and start the selector thread."""
        if self._thread is not None:
            return
        self._selector = selectors.DefaultSelector()
        self._waker_r, self._waker_w = socket.socketpair()
        self._waker_r.setblocking(False)
        self._waker_w.setblocking(False)
        self._selector.register(self._waker_r, selectors.EVENT_READ, _Conn("waker", self._waker_r))
        if self.params.probe_socket_path:
            try:
                self._listener = self._bind_probe_socket(self.params.probe_socket_path)
            except BaseException:
                self._selector.close()
                self._waker_r.close()
                self._waker_w.close()
                raise
            self._selector.register(self._listener, selectors.EVENT_READ,
                                    _Conn("listener", self._listener))
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="latency-intake", daemon=True)
        self._thread.start()

    def sync(self, vms):
        """Follow the VMs on the host: ``{uuid: VMInfo}``.

        Opens a channel for each VM whose ``latency_channel`` is set, closes
        the channels of VMs that left or lost it, and learns which VMs have a
        latency SLA (``VMInfo.sla.sensitive``).
        """
        self.store.set_vms({uuid: info.sla for uuid, info in vms.items()})
        wanted = {uuid: info.latency_channel for uuid, info in vms.items()
                  if info.latency_channel}
        with self._lock:
            changed = wanted != self._wanted
            self._wanted = wanted
        if changed:
            self._wake()

    def windows(self):
        """``{uuid: LatencyWindow}`` of the sensitive VMs with fresh reports."""
        return self.store.windows()

    def stats(self):
        """Accepted and rejected report counters per VM and reason (see ReportStore.stats)."""
        return self.store.stats()

    def channels(self):
        """UUIDs of the VMs whose channel is connected now."""
        with self._lock:
            return set(self._channels)

    def post_status(self, lines):
        """Have each VM's status line written down its channel: ``{uuid: bytes}``.

        Returns at once: the intake's thread writes them, without blocking
        (the module docstring). A line replaces the VM's line not yet
        written, so at most one waits per VM; a line equal to the last one
        written is written again only after :data:`STATUS_REFRESH_S`.
        """
        with self._lock:
            self._outbox.update(lines)
        self._wake()

    def status_counts(self):
        """``(sent, dropped)``: status lines written, and dropped because the socket was full."""
        with self._lock:
            return self._status_sent, self._status_dropped

    def close(self):
        """Stop the thread, close every socket, remove the probe socket we created."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._stop.set()
            self._wake()
            thread.join()
        for conn in list(self._channels.values()) + list(self._probe_clients):
            conn.sock.close()
        self._channels.clear()
        self._probe_clients.clear()
        if self._selector is not None:
            self._selector.close()
            self._selector = None
        for sock in (self._waker_r, self._waker_w):
            if sock is not None:
                sock.close()
        self._waker_r = self._waker_w = None
        if self._listener is not None:
            self._listener.close()
            self._listener = None
            self._unlink_probe_socket()

    # -- the probe socket -------------------------------------------------------------
    def _bind_probe_socket(self, path):
        directory = os.path.dirname(path) or "."
        try:
            os.makedirs(directory, mode=0o755, exist_ok=True)
            check_socket_directory(directory)
            if _existing_socket(path):
                os.unlink(path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.bind(path)
                os.chmod(path, 0o600)
                sock.listen(16)
                sock.setblocking(False)
                self._probe_inode = os.stat(path).st_ino
            except BaseException:
                sock.close()
                raise
        except OSError as exc:
            raise exceptions.ConfigError("cannot create probe socket %s: %s" % (path, exc)) \
                from exc
        LOG.info("latency probe socket listening on %s (mode 0600)", path)
        return sock

    def _unlink_probe_socket(self):
        path = self.params.probe_socket_path
        try:
            if os.stat(path).st_ino == self._probe_inode:
                os.unlink(path)
        except OSError:
            pass

    def _accept(self):
        try:
            sock, _addr = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            LOG.warning("latency probe socket accept failed: %s", exc)
            return
        try:
            _pid, uid, _gid = _UCRED.unpack(
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
        except OSError:
            uid = -1
        if uid not in (0, os.geteuid()):
            sock.close()
            self.store.reject(store_mod.UNATTRIBUTED, wire.PEER_NOT_ALLOWED)
            return
        if len(self._probe_clients) >= self.params.max_probe_clients:
            # Full: the connection that has gone longest without a complete
            # report makes room (an honest probe reports; a slow-loris does not).
            oldest = min(self._probe_clients, key=lambda c: c.last_line)
            self._close_probe(oldest, EVICTED)
        sock.setblocking(False)
        conn = _Conn("probe", sock, framer=framing.LineFramer(self.params.max_message_bytes),
                     now=time.monotonic())
        self._probe_clients.add(conn)
        self._selector.register(sock, selectors.EVENT_READ, conn)

    def _close_probe(self, conn, reason=None):
        if reason is not None:
            self.store.reject(store_mod.UNATTRIBUTED, reason)
        self._selector.unregister(conn.sock)
        conn.sock.close()
        self._probe_clients.discard(conn)

    def _expire_probes(self, now):
        """Close probe connections idle or mid-line for too long; returns the next due time."""
        idle, line = self.params.probe_idle_timeout_s, self.params.probe_line_timeout_s
        due = now + min(idle, line)
        for conn in list(self._probe_clients):
            if conn.line_since is not None and now - conn.line_since >= line:
                self._close_probe(conn, LINE_TIMEOUT)
            elif now - conn.last_line >= idle:
                self._close_probe(conn, IDLE_TIMEOUT)
            else:
                due = min(due, conn.last_line + idle)
                if conn.line_since is not None:
                    due = min(due, conn.line_since + line)
        return due

    # -- channels -----------------------------------------------------------------------
    def _reconcile(self, now):
        with self._lock:
            wanted = dict(self._wanted)
        for vm, conn in list(self._channels.items()):
            if wanted.get(vm) != conn.framer_path:
                self._drop_channel(vm, "VM left or its channel changed")
        for vm in [v for v in self._retry_at if v not in wanted]:
            del self._retry_at[vm]
            self._retry_path.pop(vm, None)
            self._denied.pop(vm, None)
        for vm, path in wanted.items():
            if vm in self._channels or (self._retry_at.get(vm, 0.0) > now
                                        and self._retry_path.get(vm) == path):
                continue
            self._connect_channel(vm, path, now)

    def _connect_channel(self, vm, path, now):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(path)
        except OSError as exc:
            sock.close()
            if exc.errno not in _CONNECT_RETRY_ERRNOS:
                LOG.warning("latency channel of VM %s at %s: %s", vm, path, exc)
            elif exc.errno in _DENIED_ERRNOS and self._denied.get(vm) != path:
                self._denied[vm] = path
                LOG.warning("latency channel of VM %s at %s: %s; retrying, but no latency "
                            "report is heard until the agent may open QEMU's socket (run it "
                            "with CAP_DAC_OVERRIDE or in QEMU's group: doc/source/"
                            "deployment.rst)", vm, path, exc)
            else:
                LOG.debug("latency channel of VM %s at %s not ready: %s", vm, path, exc)
            self._retry_at[vm] = now + self.params.channel_retry_s
            self._retry_path[vm] = path
            return
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, STATUS_SNDBUF)
        except OSError:
            pass
        conn = _ChannelConn(sock, vm, path, framing.LineFramer(self.params.max_message_bytes))
        self._selector.register(sock, selectors.EVENT_READ, conn)
        with self._lock:
            self._channels[vm] = conn
        self._retry_at.pop(vm, None)
        self._denied.pop(vm, None)
        LOG.info("latency channel of VM %s connected (%s)", vm, path)

    def _drop_channel(self, vm, why):
        with self._lock:
            conn = self._channels.pop(vm, None)
        if conn is None:
            return
        self._tails.discard(conn)
        self._selector.unregister(conn.sock)
        conn.sock.close()
        self._retry_at[vm] = time.monotonic() + self.params.channel_retry_s
        self._retry_path[vm] = conn.framer_path
        LOG.info("latency channel of VM %s closed: %s", vm, why)

    # -- the selector thread ------------------------------------------------------------
    def _wake(self):
        waker = self._waker_w
        if waker is None:
            return
        try:
            waker.send(b"\0")
        except (BlockingIOError, OSError):
            pass

    def _next_timeout(self, now, due=None):
        nxt = min(self._retry_at.values()) if self._retry_at else now + 1.0
        if due is not None:
            nxt = min(nxt, due)
        return max(0.0, min(1.0, nxt - now))

    def _run(self):
        while not self._stop.is_set():
            try:
                self._round()
            except Exception:
                LOG.exception("latency intake round failed; continuing")
                self._stop.wait(0.1)

    def _round(self):
        now = time.monotonic()
        self._reconcile(now)
        due = self._expire_probes(now) if self._probe_clients else None
        for key, _events in self._selector.select(self._next_timeout(now, due)):
            conn = key.data
            if conn.kind == "waker":
                try:
                    while conn.sock.recv(4096):
                        pass
                except (BlockingIOError, InterruptedError):
                    pass
            elif conn.kind == "listener":
                self._accept()
            else:
                self._read(conn)
        if self._outbox or self._tails:
            self._write_statuses(time.monotonic())

    # -- status back to the guests ------------------------------------------------------
    def _write_statuses(self, now):
        """Finish the lines half written, then write the posted ones (never blocks)."""
        for conn in list(self._tails):
            self._send_tail(conn)
        with self._lock:
            outbox, self._outbox = self._outbox, {}
        for vm, line in outbox.items():
            conn = self._channels.get(vm)
            if conn is None:
                continue        # not connected (any more): no one to tell
            if line == conn.last_status and now - conn.last_status_at < STATUS_REFRESH_S:
                continue
            self._write_status(conn, line, now)

    def _write_status(self, conn, line, now):
        if conn.tail and not self._send_tail(conn):
            self._count_status(dropped=True)    # the line before is not out yet
            return
        try:
            n = conn.sock.send(line)
        except (BlockingIOError, InterruptedError):
            self._count_status(dropped=True)    # full: the guest is not reading
            return
        except OSError as exc:
            self._count_status(dropped=True)    # the reader sees the end of stream
            LOG.debug("status to VM %s not written: %s", conn.vm, exc)
            return
        conn.last_status, conn.last_status_at = line, now
        self._count_status(dropped=False)
        if n < len(line):
            conn.tail = line[n:]
            self._tails.add(conn)

    def _send_tail(self, conn):
        """Write what is left of a status line; True once nothing is left."""
        try:
            n = conn.sock.send(conn.tail)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError:
            n = len(conn.tail)
        conn.tail = conn.tail[n:]
        if conn.tail:
            return False
        self._tails.discard(conn)
        return True

    def _count_status(self, dropped):
        with self._lock:
            if dropped:
                self._status_dropped += 1
            else:
                self._status_sent += 1

    def _read(self, conn):
        try:
            data = conn.sock.recv(_READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            data = b""
            LOG.debug("latency %s of %s: %s", conn.kind, conn.vm, exc)
        if not data:
            if conn.kind == "channel":
                self._drop_channel(conn.vm, "end of stream")
            else:
                self._close_probe(conn)
            return
        source = wire.SOURCE_CHANNEL if conn.kind == "channel" else wire.SOURCE_PROBE
        lines = conn.framer.feed(data)
        for line in lines:
            self.store.offer(source, line, vm=conn.vm)
        if conn.kind == "probe":
            now = time.monotonic()
            if lines:
                conn.last_line = now
            if not conn.framer.mid_line:
                conn.line_since = None
            elif lines or conn.line_since is None:
                conn.line_since = now


def _writers(mode):
    return " and ".join(w for w, bit in (("its group", stat.S_IWGRP), ("others", stat.S_IWOTH))
                        if mode & bit)


def _ancestors(path):
    """``path`` and each directory above it, up to ``/``."""
    out = [path]
    while True:
        parent = os.path.dirname(path)
        if parent == path:
            return out
        out.append(parent)
        path = parent


def _ancestor_problems(path, st, trusted):
    if stat.S_ISLNK(st.st_mode):
        if st.st_uid not in trusted:
            return ["%s is a symlink owned by uid %d" % (path, st.st_uid)]
        return []
    problems = []
    if st.st_uid not in trusted:
        problems.append("%s is owned by uid %d" % (path, st.st_uid))
    # A sticky directory (/tmp) lets nobody rename or remove what others own.
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
        problems.append("%s is writable by %s (mode %04o)" % (
            path, _writers(st.st_mode), stat.S_IMODE(st.st_mode)))
    return problems


def check_socket_directory(directory):
    """Refuse (``ConfigError``) a socket directory that others could swap or write to.

    The directory itself must be owned by the agent's effective user and
    writable neither by its group nor by others. Every directory above it,
    on the path as written (symlinks included, not followed) and on the
    path they resolve to, must be owned by root or the agent's user and not
    writable by group or others unless sticky, as OpenSSH's ``StrictModes``
    checks a user's ``~/.ssh`` (a sticky ``/tmp`` is accepted: nobody can
    rename what they do not own in it). Otherwise another user could replace
    a directory on the way and bind a socket of their own in its place.
    """
    euid = os.geteuid()
    resolved = os.path.realpath(directory)
    st = os.stat(resolved)
    if not stat.S_ISDIR(st.st_mode):
        raise exceptions.ConfigError("probe socket directory %s is not a directory" % directory)
    problems = []
    if st.st_uid != euid:
        problems.append("owned by uid %d, not the agent's uid %d" % (st.st_uid, euid))
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        problems.append("writable by %s (mode %04o)" % (_writers(st.st_mode),
                                                        stat.S_IMODE(st.st_mode)))
    _refuse(directory, problems + _above(directory))


def _above(directory):
    """The problems of every directory above ``directory`` (literal and resolved paths)."""
    trusted = {0, os.geteuid()}
    literal = os.path.abspath(directory)
    resolved = os.path.realpath(directory)
    problems = []
    seen = set()
    for path, look in [(p, os.lstat) for p in _ancestors(literal)] + [
            (p, os.stat) for p in _ancestors(resolved)[1:]]:
        if (path, look) in seen or path == resolved:
            continue
        seen.add((path, look))
        problems.extend(_ancestor_problems(path, look(path), trusted))
    return problems


def _refuse(directory, problems):
    if problems:
        raise exceptions.ConfigError(
            "refusing the probe socket directory %s: %s; anyone who can write it or a "
            "directory above it can replace the socket (use a directory of the agent's own, "
            "e.g. /run/resex, mode 0755)" % (directory, "; ".join(dict.fromkeys(problems))))


def _existing_socket(path):
    """True when a socket is at ``path``, False when nothing is; else ``ConfigError``."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(st.st_mode):
        raise exceptions.ConfigError("probe_socket_path %s exists and is not a socket" % path)
    return True


def check_probe_socket_path(path):
    """Refuse (``ConfigError``) what binding the probe socket at ``path`` would refuse.

    Creates nothing (``resex-agent --check``): an existing directory is
    checked as :func:`check_socket_directory` does; a missing one, which
    the agent would create 0755 as its own, must have a writable directory
    to be created in, and every directory above must pass. A socket
    already at ``path`` (a running agent's) is fine; anything else is not.
    """
    directory = os.path.abspath(os.path.dirname(path) or ".")
    existing = directory
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if existing == directory:
        check_socket_directory(directory)
        _existing_socket(path)
        return
    if not os.path.isdir(existing) or not os.access(existing, os.W_OK | os.X_OK):
        raise exceptions.ConfigError(
            "probe socket directory %s does not exist and cannot be created in %s"
            % (directory, existing))
    trusted = {0, os.geteuid()}
    _refuse(directory, _ancestor_problems(existing, os.stat(existing), trusted)
            + _above(existing))


class _ChannelConn(_Conn):
    __slots__ = ("framer_path", "tail", "last_status", "last_status_at")

    def __init__(self, sock, vm, path, framer):
        super().__init__("channel", sock, vm=vm, framer=framer)
        self.framer_path = path
        self.tail = b""             # the rest of a status line the socket did not take
        self.last_status = None     # the last status line written, and when
        self.last_status_at = 0.0
