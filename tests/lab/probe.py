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

"""A BenchEx probe on the host: open-loop client, reports to the agent, keeps every sample.

``python -m tests.lab.probe --host IP --rate R --seconds S --report-socket PATH
--vm UUID --out FILE`` runs BenchEx's own client
(:func:`benchex.client.open_loop`) against the sensitive guest's
server, reports one summary per 100 ms window to the agent's probe socket
exactly as ``benchex client --report-socket`` does
(:class:`benchex.reporter.LatencyReporter`), and in addition keeps
each request's completion time and latency so the experiment can compute
exact percentiles and plot latency over time. It runs as its own process so
that the experiment's sink and pollers never share its interpreter lock.

The latency of an open-loop request runs from its *scheduled* send time
(paper Section IV: the client timestamps each request; coordinated
omission avoided as in :mod:`benchex.client`).
"""

import argparse
import json
import sys
import threading
import time

from benchex import client as client_mod
from benchex import reporter as reporter_mod


class RecordingReporter:
    """Forwards each latency to the agent's reporter and keeps ``(t, latency_us)``."""

    def __init__(self, reporter, t0):
        self.reporter = reporter
        self.t0 = t0
        self.samples = []
        self._lock = threading.Lock()

    def add(self, latency_us):
        with self._lock:
            self.samples.append((round(time.monotonic() - self.t0, 4), round(latency_us, 1)))
        if self.reporter is not None:
            self.reporter.add(latency_us)

    def connected(self, sockaddr):
        """The client connected to ``sockaddr`` (the reports' peer, if they name one)."""
        if self.reporter is not None:
            self.reporter.connected(sockaddr)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--port", type=int, default=7788)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--report-socket")
    parser.add_argument("--vm")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    reporter = None
    if args.report_socket:
        reporter = reporter_mod.LatencyReporter(
            reporter_mod.ProbeSocketSink(args.report_socket, args.vm), interval_s=0.1)
    t0 = time.monotonic()
    recorder = RecordingReporter(reporter, t0)
    requests = max(1, int(args.rate * args.seconds))
    try:
        summary = client_mod.open_loop(args.host, args.port, requests, args.rate,
                                       reporter=recorder)
    finally:
        if reporter is not None:
            reporter.close()
    result = {"summary": summary, "samples": recorder.samples,
              "reports_sent": reporter.sent if reporter else 0,
              "reports_dropped": reporter.dropped if reporter else 0}
    with open(args.out, "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
