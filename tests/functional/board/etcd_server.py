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

"""A real etcd (Debian's ``etcd-server``) on a free loopback port, as a test fixture.

Started in a temporary data directory, stopped by its PID (SIGTERM, then
SIGKILL after 10 s). :meth:`EtcdServer.kill` and :meth:`EtcdServer.start`
simulate an outage and a recovery on the same port and data.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request

import fixtures

ETCD = "/usr/bin/etcd"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class EtcdServer(fixtures.Fixture):
    """One etcd member on 127.0.0.1; ``url`` is the board URL to use."""

    def __init__(self, start_timeout=30.0):
        super().__init__()
        self.start_timeout = start_timeout
        self.proc = None

    @staticmethod
    def available():
        return os.access(ETCD, os.X_OK)

    def _setUp(self):
        self.data_dir = tempfile.mkdtemp(prefix="resex-etcd-")
        self.addCleanup(shutil.rmtree, self.data_dir, True)
        self.client_port = free_port()
        self.peer_port = free_port()
        self.url = "etcd3+http://127.0.0.1:%d" % self.client_port
        self.addCleanup(self.kill)
        self.start()

    def start(self):
        client = "http://127.0.0.1:%d" % self.client_port
        peer = "http://127.0.0.1:%d" % self.peer_port
        log = open(os.path.join(self.data_dir, "etcd.log"), "ab")
        try:
            self.proc = subprocess.Popen(
                [ETCD, "--name", "resex-test", "--data-dir", os.path.join(self.data_dir, "d"),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", "resex-test=" + peer],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        finally:
            log.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("etcd exited with %s; see %s/etcd.log"
                                   % (self.proc.returncode, self.data_dir))
            try:
                with urllib.request.urlopen(client + "/health", timeout=1) as resp:
                    if b'"true"' in resp.read():
                        return
            except OSError:
                pass
            time.sleep(0.1)
        self.kill()
        raise RuntimeError("etcd did not become healthy in %.0fs" % self.start_timeout)

    def kill(self):
        """Stop etcd by its PID (the outage); safe to call twice."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
