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

"""A Prometheus registry served over HTTP on a daemon thread: the agent's and the sync's.

Both ``resex_agent.metrics`` (on a compute node) and ``resex_nova.sync_metrics``
(the controller-side ``resex-placement-sync``) serve a registry of their
own with ``prometheus_client.start_http_server``; the two install apart, so
what they share lives here. Plain arguments only: the callers read their
configuration.
"""

import logging

import prometheus_client

from resex_libvirt import exceptions

LOG = logging.getLogger(__name__)


class Endpoint:
    """``registry`` served on ``host``:``port`` once started; ``what`` names it in errors.

    :meth:`start` is idempotent; :meth:`close` stops serving and joins the
    server's thread. A port that cannot be bound is a
    :class:`~resex_libvirt.exceptions.ConfigError` (:meth:`error`).
    """

    def __init__(self, host, port, registry, what):
        self.host = host
        self.port = port
        self.registry = registry
        self.what = what
        self._server = None
        self._thread = None

    def error(self, exc):
        """The ``ConfigError`` for an ``OSError`` met binding the endpoint's address."""
        return exceptions.ConfigError("%s cannot listen on %s port %d: %s"
                                      % (self.what, self.host, self.port, exc))

    def start(self):
        """Listen and serve on a daemon thread; returns the bound ``(address, port)``."""
        if self._server is not None:
            return self.address
        try:
            self._server, self._thread = prometheus_client.start_http_server(
                self.port, addr=self.host, registry=self.registry)
        except OSError as exc:
            raise self.error(exc) from exc
        LOG.info("Prometheus metrics on http://%s:%d/metrics", *self.address[:2])
        return self.address

    @property
    def address(self):
        """``(host, port)`` the endpoint is bound to (``None`` before :meth:`start`)."""
        if self._server is None:
            return None
        return self._server.server_address[:2]

    def close(self):
        """Stop serving and join the server thread."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
