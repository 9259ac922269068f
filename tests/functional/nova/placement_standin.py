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

"""A stand-in for Placement: the few endpoints ``resex-placement-sync`` calls, over HTTP.

A stand-in for speed (it starts in milliseconds on the loopback, where the
real Placement needs its database and Keystone); the real Placement is
checked by the cloud's rows (``tests/cloud/scenarios.py``: ``PLACEMENT``).
What it keeps of Placement's API reference:

* ``GET /resource_providers`` with ``name=`` and ``required=`` (a
  comma-separated list, microversion 1.18 or later, else 400);
* ``GET`` and ``PUT /resource_providers/{uuid}/traits`` (1.6 or later, else
  404 as for an unknown route): the whole set with the provider's
  **generation**; a ``PUT`` with another generation answers **409**
  (``placement.concurrent_update``) and changes nothing; a successful one
  bumps the generation; an unknown trait answers 400; an unknown provider 404;
* ``PUT /traits/{name}``: 201 when created, 204 when it existed; only
  ``CUSTOM_`` names.

The microversion is read from ``OpenStack-API-Version: placement X.Y`` as
keystoneauth sends it. Tests act as the other writers through
:meth:`Placement.edit` (nova-compute's update, an operator: the generation
moves), :attr:`Placement.before_put` (a write that lands between a client's
read and its ``PUT``), and take it down and up again on the same port
(:meth:`Placement.stop`, :meth:`Placement.start`). Every request is recorded
in :attr:`Placement.log` as ``(method, path, status)``.
"""

import http.server
import json
import re
import socket
import threading
import urllib.parse
import uuid as uuid_mod

STANDARD_TRAITS = frozenset({"COMPUTE_NODE", "COMPUTE_STATUS_DISABLED", "HW_CPU_X86_AVX2"})


def _version(headers):
    value = headers.get("OpenStack-API-Version", "")
    match = re.match(r"\s*placement\s+(\d+)\.(\d+)", value)
    return (int(match.group(1)), int(match.group(2))) if match else (1, 0)


class Placement:
    """The stand-in's state and server (see the module docstring)."""

    def __init__(self, port=0):
        self.lock = threading.Lock()
        self.providers = {}      # uuid -> {"name", "generation", "traits": set}
        self.traits = set(STANDARD_TRAITS)
        self.log = []
        self.before_put = None   # called with the uuid before a PUT is judged
        self._connections = set()
        self._server = None
        self._thread = None
        self.port = port

    # -- the world ---------------------------------------------------------------------
    def add_provider(self, name, traits=()):
        uuid = str(uuid_mod.uuid5(uuid_mod.NAMESPACE_DNS, "resex-test-" + name))
        with self.lock:
            self.traits.update(t for t in traits)
            self.providers[uuid] = {"name": name, "generation": 0, "traits": set(traits)}
        return uuid

    def uuid_of(self, name):
        return next(u for u, p in self.providers.items() if p["name"] == name)

    def traits_of(self, name):
        with self.lock:
            return set(self.providers[self.uuid_of(name)]["traits"])

    def edit(self, name, add=(), remove=()):
        """Another writer changes ``name``'s traits (the generation moves)."""
        with self.lock:
            provider = self.providers[self.uuid_of(name)]
            self.traits.update(add)
            provider["traits"] = (provider["traits"] | set(add)) - set(remove)
            provider["generation"] += 1

    def calls(self, method=None):
        return [c for c in self.log if method is None or c[0] == method]

    # -- serving ----------------------------------------------------------------------
    @property
    def endpoint(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self):
        placement = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def setup(self):
                super().setup()
                placement._connections.add(self.connection)

            def finish(self):
                placement._connections.discard(self.connection)
                super().finish()

            def _answer(self, status, body=None):
                data = json.dumps(body).encode() if body is not None else b""
                self.send_response(status)
                if data:
                    self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                placement.log.append((self.command, self.path, status))

            def do_GET(self):
                self._answer(*placement.get(self.path, _version(self.headers)))

            def do_PUT(self):
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                self._answer(*placement.put(self.path, body, _version(self.headers)))

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="placement-standin", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Placement down: the port refuses connections until :meth:`start`."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            # Kept-alive connections too: a client's pooled one must fail as well.
            for conn in list(self._connections):
                try:
                    conn.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._thread.join(5.0)
            self._server = None

    # -- the API ----------------------------------------------------------------------
    @staticmethod
    def _error(status, title, code=None):
        error = {"status": status, "title": title, "detail": title}
        if code:
            error["code"] = code
        return status, {"errors": [error]}

    def get(self, path, version):
        url = urllib.parse.urlsplit(path)
        query = urllib.parse.parse_qs(url.query)
        with self.lock:
            if url.path == "/resource_providers":
                if "required" in query and version < (1, 18):
                    return self._error(400, "Invalid query string parameters: required")
                required = set(",".join(query.get("required", [])).split(",")) - {""}
                names = query.get("name")
                found = [{"uuid": u, "name": p["name"], "generation": p["generation"]}
                         for u, p in sorted(self.providers.items())
                         if (not names or p["name"] == names[0])
                         and required <= p["traits"]]
                return 200, {"resource_providers": found}
            match = re.fullmatch(r"/resource_providers/([^/]+)/traits", url.path)
            if match and version >= (1, 6):
                provider = self.providers.get(match.group(1))
                if provider is None:
                    return self._error(404, "No resource provider with uuid %s found"
                                       % match.group(1))
                return 200, {"traits": sorted(provider["traits"]),
                             "resource_provider_generation": provider["generation"]}
        return self._error(404, "The resource could not be found.")

    def put(self, path, body, version):
        match = re.fullmatch(r"/traits/([^/]+)", path)
        if match and version >= (1, 6):
            name = match.group(1)
            if not name.startswith("CUSTOM_"):
                return self._error(400, "The trait is invalid: %s" % name)
            with self.lock:
                created = name not in self.traits
                self.traits.add(name)
            return (201 if created else 204), None
        match = re.fullmatch(r"/resource_providers/([^/]+)/traits", path)
        if not match or version < (1, 6):
            return self._error(404, "The resource could not be found.")
        uuid = match.group(1)
        if self.before_put is not None:
            hook, self.before_put = self.before_put, None
            hook(uuid)
        with self.lock:
            provider = self.providers.get(uuid)
            if provider is None:
                return self._error(404, "No resource provider with uuid %s found" % uuid)
            if body.get("resource_provider_generation") != provider["generation"]:
                return self._error(409, "resource provider generation conflict",
                                   "placement.concurrent_update")
            unknown = set(body["traits"]) - self.traits
            if unknown:
                return self._error(400, "No such trait(s): %s" % ", ".join(sorted(unknown)))
            provider["traits"] = set(body["traits"])
            provider["generation"] += 1
            return 200, {"traits": sorted(provider["traits"]),
                         "resource_provider_generation": provider["generation"]}
