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
import ssl
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


def _openssl(*args):
    subprocess.run(("openssl",) + args, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def make_certs(directory, users=()):
    """A test CA, a server certificate for 127.0.0.1 and a client's (EC P-256, one day).

    Returns ``{"ca", "server_cert", "server_key", "client_cert", "client_key"}``
    paths, and for each name of ``users`` ``users[name] = (cert, key)``, a
    client certificate whose common name is ``name`` (etcd's user, once its
    authentication is on).
    """
    def path(name):
        return os.path.join(directory, name)

    key = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *key, "-keyout", path("ca.key"), "-out", path("ca.pem"),
             "-days", "1", "-subj", "/CN=resex-test-ca")
    # etcd's gateway dials its own gRPC port with the server's certificate: it
    # must be good for client authentication too.
    server = "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth"
    client = "extendedKeyUsage=clientAuth"
    for who, ext, cn in ((("server", server, "resex-test-server"),
                          ("client", client, "resex-test-client"))
                         + tuple(("user-" + name, client, name) for name in users)):
        with open(path(who + ".ext"), "w") as f:
            f.write(ext + "\n")
        _openssl("req", *key, "-keyout", path(who + ".key"), "-out", path(who + ".csr"),
                 "-subj", "/CN=" + cn)
        _openssl("x509", "-req", "-in", path(who + ".csr"), "-CA", path("ca.pem"),
                 "-CAkey", path("ca.key"), "-CAcreateserial", "-days", "1",
                 "-extfile", path(who + ".ext"), "-out", path(who + ".pem"))
    return {"ca": path("ca.pem"), "server_cert": path("server.pem"),
            "server_key": path("server.key"), "client_cert": path("client.pem"),
            "client_key": path("client.key"),
            "users": {name: (path("user-%s.pem" % name), path("user-%s.key" % name))
                      for name in users}}


class EtcdServer(fixtures.Fixture):
    """One etcd member on 127.0.0.1; ``url`` is the board URL to use.

    ``tls``: the member serves HTTPS and requires a client certificate signed
    by a test CA (``--client-cert-auth``); ``certs`` holds the files
    (:func:`make_certs`), or the caller's own (the keys of :func:`make_certs`'
    answer but ``users``; its client certificate is the health check's).
    """

    def __init__(self, start_timeout=30.0, tls=False, users=(), certs=None):
        super().__init__()
        self.start_timeout = start_timeout
        self.tls = tls or certs is not None
        self.users = tuple(users)
        self.certs = certs
        self.proc = None

    @staticmethod
    def available():
        return os.access(ETCD, os.X_OK)

    def _setUp(self):
        self.data_dir = tempfile.mkdtemp(prefix="resex-etcd-")
        self.addCleanup(shutil.rmtree, self.data_dir, True)
        self.client_port = free_port()
        self.peer_port = free_port()
        scheme = "https" if self.tls else "http"
        self.url = "etcd3+%s://127.0.0.1:%d" % (scheme, self.client_port)
        if self.tls and self.certs is None:
            self.certs = make_certs(self.data_dir, self.users)
        self.addCleanup(self.kill)
        self.start()

    def start(self):
        client = "%s://127.0.0.1:%d" % ("https" if self.tls else "http", self.client_port)
        peer = "http://127.0.0.1:%d" % self.peer_port
        tls, context = [], None
        if self.tls:
            tls = ["--cert-file", self.certs["server_cert"], "--key-file",
                   self.certs["server_key"], "--client-cert-auth", "--trusted-ca-file",
                   self.certs["ca"]]
            context = ssl.create_default_context(cafile=self.certs["ca"])
            context.load_cert_chain(self.certs["client_cert"], self.certs["client_key"])
        log = open(os.path.join(self.data_dir, "etcd.log"), "ab")
        try:
            self.proc = subprocess.Popen(
                [ETCD, "--name", "resex-test", "--data-dir", os.path.join(self.data_dir, "d"),
                 "--listen-client-urls", client, "--advertise-client-urls", client,
                 "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                 "--initial-cluster", "resex-test=" + peer] + tls,
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        finally:
            log.close()
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("etcd exited with %s; see %s/etcd.log"
                                   % (self.proc.returncode, self.data_dir))
            try:
                with urllib.request.urlopen(client + "/health", timeout=1,
                                            context=context) as resp:
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
