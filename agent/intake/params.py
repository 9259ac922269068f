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

"""The intake's settings, from ``[latency]`` (:mod:`resex_agent.conf.latency`) or by hand."""

import dataclasses

from benchex import wire


@dataclasses.dataclass(frozen=True)
class IntakeParams:
    """Bounds and timings of the latency intake; see :mod:`resex_agent.conf.latency` for each."""

    probe_socket_path: str | None = None
    max_message_bytes: int = 512
    rate_limit_per_s: float = 20.0
    rate_burst: int = 40
    window_reports: int = 16
    freshness_s: float = 3.0
    plausible_max_us: float = 10_000_000.0
    max_samples_per_report: int = 1_000_000
    log_interval_s: float = 60.0
    channel_retry_s: float = 2.0
    max_probe_clients: int = 32
    probe_idle_timeout_s: float = 60.0
    probe_line_timeout_s: float = 5.0
    status_interval_s: float = 1.0

    def __post_init__(self):
        if self.max_message_bytes < 64:
            raise ValueError("max_message_bytes must be >= 64")
        if not self.rate_limit_per_s > 0 or self.rate_burst < 1:
            raise ValueError("rate_limit_per_s must be > 0 and rate_burst >= 1")
        if self.window_reports < 1 or not self.freshness_s > 0:
            raise ValueError("window_reports must be >= 1 and freshness_s > 0")
        if not self.plausible_max_us > 0 or self.max_samples_per_report < 1:
            raise ValueError("plausible_max_us and max_samples_per_report must be positive")
        if not self.channel_retry_s > 0 or self.max_probe_clients < 1:
            raise ValueError("channel_retry_s must be > 0 and max_probe_clients >= 1")
        if not self.probe_idle_timeout_s > 0 or not self.probe_line_timeout_s > 0:
            raise ValueError("probe_idle_timeout_s and probe_line_timeout_s must be > 0")
        if not self.status_interval_s >= 0:
            raise ValueError("status_interval_s must be >= 0 (0: no status)")

    @property
    def limits(self):
        return wire.Limits(max_bytes=self.max_message_bytes,
                           plausible_max_us=self.plausible_max_us,
                           max_n=self.max_samples_per_report)

    @classmethod
    def from_conf(cls, conf):
        """Read ``conf.latency`` (the group must be registered)."""
        grp = conf.latency
        return cls(
            probe_socket_path=grp.probe_socket_path or None,
            max_message_bytes=grp.max_message_bytes,
            rate_limit_per_s=grp.rate_limit_per_s,
            rate_burst=grp.rate_burst,
            window_reports=grp.window_reports,
            freshness_s=grp.freshness_s,
            plausible_max_us=grp.plausible_max_us,
            max_samples_per_report=grp.max_samples_per_report,
            log_interval_s=grp.log_interval_s,
            channel_retry_s=grp.channel_retry_s,
            max_probe_clients=grp.max_probe_clients,
            probe_idle_timeout_s=grp.probe_idle_timeout_s,
            probe_line_timeout_s=grp.probe_line_timeout_s,
            status_interval_s=grp.status_interval_s,
        )
