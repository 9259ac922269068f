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

"""A real 3-member etcd cluster (Debian's ``etcd-server``) on loopback, as a test fixture.

Every member has free client and peer ports and a data directory under
one temporary directory (removed at cleanup); members are started by
:class:`EtcdCluster` and stopped by their PIDs. The bad days of a cloud's
etcd, by member index: :meth:`~EtcdCluster.kill` (``kill -9``),
:meth:`~EtcdCluster.pause` / :meth:`~EtcdCluster.resume` (SIGSTOP /
SIGCONT, a member that stops answering without closing its connections),
:meth:`~EtcdCluster.start` (back on its data), :meth:`~EtcdCluster.replace`
(its data directory wiped, removed from the cluster and added again),
:meth:`~EtcdCluster.compact` and :meth:`~EtcdCluster.defragment`;
:meth:`~EtcdCluster.leader` asks the members' ``/v3/maintenance/status``.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid

import fixtures

from tests.functional.board import etcd_server
from tests import machine

ETCD = etcd_server.ETCD
HOST = "127.0.0.1"


class Member:
    """One member: its name, ports, data directory and process."""

    def __init__(self, index, root):
        self.index = index
        self.name = "m%d" % index
        self.client_port = etcd_server.free_port()
        self.peer_port = etcd_server.free_port()
        self.dir = os.path.join(root, self.name)
        self.data_dir = os.path.join(self.dir, "data")
        self.log = os.path.join(root, self.name + ".log")
        self.proc = None
        self.started = None
        self.paused = False
        self.id = None

    @property
    def client(self):
        return "http://%s:%d" % (HOST, self.client_port)

    @property
    def peer(self):
        return "http://%s:%d" % (HOST, self.peer_port)

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None


class EtcdCluster(fixtures.Fixture):
    """``size`` etcd members on 127.0.0.1; ``url`` is the board URL naming them all."""

    def __init__(self, size=3, start_timeout=90.0):
        super().__init__()
        self.size = size
        self.start_timeout = start_timeout
        self.members = []

    available = staticmethod(etcd_server.EtcdServer.available)

    def _setUp(self):
        self.root = tempfile.mkdtemp(prefix="resex-etcd-cluster-")
        self.addCleanup(shutil.rmtree, self.root, True)
        self.token = "resex-test-%s" % uuid.uuid4().hex[:12]
        self.members = [Member(i, self.root) for i in range(self.size)]
        self.addCleanup(self.stop_all)
        for m in self.members:
            self._spawn(m, "new")
        for m in self.members:
            self.wait_healthy(m.index)

    # -- URLs ----------------------------------------------------------------------------
    @property
    def url(self):
        """The board URL naming every member, in index order."""
        return self.url_of(range(self.size))

    def url_of(self, indexes):
        """The board URL naming the members ``indexes`` in that order (the first asked first)."""
        return "etcd3+http://" + ",".join("%s:%d" % (HOST, self.members[i].client_port)
                                          for i in indexes)

    def first(self, index):
        """The board URL naming every member, ``index`` first."""
        return self.url_of([index] + [i for i in range(self.size) if i != index])

    def index_of(self, endpoint):
        """The index of the member at ``host:port``."""
        port = int(endpoint.rpartition(":")[2])
        return next(m.index for m in self.members if m.client_port == port)

    # -- processes -------------------------------------------------------------------------
    def _spawn(self, m, state):
        os.makedirs(m.dir, exist_ok=True)
        cluster = ",".join("%s=%s" % (o.name, o.peer) for o in self.members)
        log = open(m.log, "ab")
        try:
            m.proc = subprocess.Popen(
                [ETCD, "--name", m.name, "--data-dir", m.data_dir,
                 "--listen-client-urls", m.client, "--advertise-client-urls", m.client,
                 "--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
                 "--initial-cluster", cluster, "--initial-cluster-state", state,
                 "--initial-cluster-token", self.token],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        finally:
            log.close()
        m.started = machine.start_time(m.proc.pid)
        m.paused = False

    def start(self, index, state="existing"):
        """Start member ``index`` again on its data directory; wait until it is healthy."""
        m = self.members[index]
        if m.running:
            return
        self._spawn(m, state)
        self.wait_healthy(index)

    def wait_healthy(self, index, timeout=None):
        """Wait until member ``index`` says it is healthy (it has a leader and a quorum)."""
        m = self.members[index]
        deadline = time.monotonic() + (timeout or self.start_timeout)
        while time.monotonic() < deadline:
            if not m.running:
                raise RuntimeError("etcd member %s exited with %s; see %s"
                                   % (m.name, m.proc and m.proc.returncode, m.log))
            try:
                with urllib.request.urlopen(m.client + "/health", timeout=2) as resp:
                    if b'"true"' in resp.read():
                        m.id = self.status(index)["header"]["member_id"]
                        return
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.1)
        raise RuntimeError("etcd member %s was not healthy within %.0f s; see %s"
                           % (m.name, timeout or self.start_timeout, m.log))

    def kill(self, index):
        """``kill -9`` member ``index`` (by its PID) and reap it."""
        m = self.members[index]
        if m.proc is None:
            return
        if m.running:
            os.kill(m.proc.pid, signal.SIGKILL)
        m.proc.wait(30)
        m.proc = None
        m.paused = False

    def pause(self, index):
        """SIGSTOP member ``index``: its connections stay open and nothing answers."""
        m = self.members[index]
        os.kill(m.proc.pid, signal.SIGSTOP)
        m.paused = True

    def resume(self, index):
        """SIGCONT member ``index``."""
        m = self.members[index]
        if m.paused and m.running:
            os.kill(m.proc.pid, signal.SIGCONT)
        m.paused = False

    def stop(self, index):
        """Stop member ``index`` by its PID (SIGTERM, SIGKILL after 10 s)."""
        m = self.members[index]
        if m.proc is None:
            return
        self.resume(index)
        machine.stop_pid(m.proc.pid, m.started)
        m.proc.poll()
        m.proc = None

    def stop_all(self):
        for m in self.members:
            self.stop(m.index)

    # -- the JSON API ----------------------------------------------------------------------
    def api(self, index, path, body=None, timeout=5.0):
        """POST ``body`` to ``/v3/<path>`` of member ``index``; the decoded answer."""
        req = urllib.request.Request(
            self.members[index].client + "/v3/" + path.lstrip("/"),
            data=json.dumps(body or {}).encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read())

    def status(self, index, timeout=2.0):
        """Member ``index``'s ``/v3/maintenance/status``."""
        return self.api(index, "maintenance/status", timeout=timeout)

    def live(self):
        """Indexes of the members running and not paused."""
        return [m.index for m in self.members if m.running and not m.paused]

    def leader(self, timeout=60.0):
        """The index of the member the live members agree leads (waits for an election)."""
        found = []

        def agreed():
            leaders = set()
            for i in self.live():
                try:
                    leaders.add(self.status(i)["leader"])
                except (OSError, ValueError, KeyError):
                    return False
            ids = {m.id: m.index for m in self.members if m.index in self.live()}
            if len(leaders) == 1 and next(iter(leaders)) in ids:
                found.append(ids[next(iter(leaders))])
                return True
            return False
        machine.wait_for(agreed, timeout, step=0.1, what="a leader the live members agree on")
        return found[-1]

    def follower(self):
        """The index of a live member that does not lead."""
        leader = self.leader()
        return next(i for i in self.live() if i != leader)

    def ask(self, path, body=None, done=None, timeout=60.0):
        """``api()`` on the live members in turn until one answers (an election may be on).

        An error whose body holds ``done`` means the change was made already
        (its first answer was lost): ``{}``.
        """
        answers = []

        def one():
            for i in self.live():
                if self._try(i, path, body, done, answers):
                    return True
            return False
        machine.wait_for(one, timeout, step=0.2, what="an answer to %s" % path)
        return answers[-1]

    def revision(self):
        """The cluster's current revision (a range read)."""
        return int(self.ask("kv/range", {"key": "AA=="})["header"]["revision"])

    def compact(self):
        """Compact the history up to the current revision (physically); that revision."""
        revision = self.revision()
        self.ask("kv/compaction", {"revision": revision, "physical": True}, b"compacted")
        return revision

    def defragment(self, indexes=None):
        """Defragment members ``indexes`` (every live one), one after the other."""
        for i in self.live() if indexes is None else indexes:
            machine.wait_for(lambda: self._try(i, "maintenance/defragment", {}), 60.0,
                             step=0.2, what="member %d defragmented" % i)

    def replace(self, index):
        """Member ``index`` loses its disk: killed, removed, wiped, added again and started."""
        m = self.members[index]
        self.kill(index)
        other = next(i for i in self.live() if i != index)
        machine.wait_for(lambda: self._try(other, "cluster/member/remove", {"ID": m.id},
                                           b"not found"),
                         60.0, step=0.2, what="etcd member %s removed" % m.name)
        shutil.rmtree(m.data_dir, True)
        machine.wait_for(lambda: self._try(other, "cluster/member/add", {"peerURLs": [m.peer]},
                                           b"exists"),
                         60.0, step=0.2, what="etcd member %s added" % m.name)
        self._spawn(m, "existing")
        self.wait_healthy(index)

    def _try(self, index, path, body, done=None, answers=None):
        """``api()``: True if it worked or was done already (``done`` in the error).

        A change whose answer was lost (a timeout under load) is retried, and
        etcd then says it is done already. The answer goes to ``answers``.
        """
        try:
            answer = self.api(index, path, body)
        except urllib.error.HTTPError as exc:
            answer = {}
            if done is None or done not in exc.read():
                return False
        except (OSError, ValueError):
            return False
        if answers is not None:
            answers.append(answer)
        return True


class ReaderSampler:
    """What a scheduler's reader served for ``host``, every 20 ms, on its own thread.

    ``timeline``: ``(monotonic, wall, published, ts)`` per read, ``published``
    what ``published()`` said then (e.g. an agent publisher's count), ``ts``
    the served report's or None. A read is **stale** when the reader served a
    report older than ``max_age`` (the bound the filter trusts); **unknown**
    when it served none (the host is then handled as unknown, never as clean).
    """

    def __init__(self, reader, host, max_age, published=lambda: None):
        self.reader, self.host, self.max_age, self.published = reader, host, max_age, published
        self.timeline = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reader-sampler", daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            wall = time.time()      # before the read: the reader's own now is later
            rec = self.reader.get(self.host)
            self.timeline.append((time.monotonic(), wall, self.published(),
                                  None if rec is None else rec.ts))
            self._stop.wait(0.02)

    def stop(self):
        self._stop.set()
        self._thread.join(10)

    @property
    def samples(self):
        return len(self.timeline)

    @property
    def stale(self):
        """The age of each report served past ``max_age``, in seconds."""
        return [wall - ts for _t, wall, _p, ts in list(self.timeline)
                if ts is not None and wall - ts > self.max_age]

    @property
    def unknown(self):
        return sum(1 for *_rest, ts in list(self.timeline) if ts is None)
