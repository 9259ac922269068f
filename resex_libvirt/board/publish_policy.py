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

"""When the agent publishes its host report: every epoch, or on change.

A small fleet publishes every epoch (one SQLite row or one etcd put a
second is nothing). Past ``on_change_fleet_size`` hosts every put costs
etcd a revision (about 414 bytes before compaction, measured) and every
scheduler snapshot grows, so the agent publishes only when the report
changed in a way that can change a placement, and at least every
``max_interval_s`` so that readers never judge a quiet host stale.

"A way that can change a placement" is what the Nova filter and weigher
read: the congestion index (moved by ``min_index_delta_pct`` points), the
link utilisation (by ``min_utilisation_delta``), the sensitive or heavy I/O
VM counts (any change: the bulk rule counts them), or a price (by a relative
``min_price_rel_delta``: a new tax means an interferer appeared). A report
that carries remote claims or ensemble members, or follows one that did,
is always published: another host's control loop reads those windows
(:doc:`/fabric`), a claim that ends must reach it at once, and a member's
window must stay fresher than the readers' expiry.
"""

import dataclasses


@dataclasses.dataclass
class PublishPolicy:
    """Decides, epoch by epoch, whether the agent publishes its report."""

    on_change_fleet_size: int = 200
    max_interval_s: float = 20.0
    min_utilisation_delta: float = 0.05
    min_index_delta_pct: float = 5.0
    min_price_rel_delta: float = 0.10
    fleet_size: int = 0

    def __post_init__(self):
        self._last = None
        self._last_at = None

    def observe_fleet(self, hosts):
        """Record the fleet's size (e.g. ``Board.count()``, refreshed now and then)."""
        self.fleet_size = max(0, int(hosts))

    @property
    def on_change(self):
        """True when the fleet is large enough to publish only on change."""
        return self.fleet_size >= self.on_change_fleet_size > 0

    def should_publish(self, report, now):
        """True if ``report`` (closed at monotonic ``now``) is to be published."""
        if not self.on_change or self._last is None:
            return True
        if now - self._last_at >= self.max_interval_s:
            return True
        return self.changed(self._last, report)

    def changed(self, old, new):
        """True when ``new`` differs from ``old`` enough to matter to a scheduler."""
        if new.remote_claims or old.remote_claims or new.ensembles or old.ensembles:
            return True
        if (old.sensitive_vms, old.heavy_io_vms, old.state) != (
                new.sensitive_vms, new.heavy_io_vms, new.state):
            return True
        if abs(new.link_utilisation - old.link_utilisation) >= self.min_utilisation_delta:
            return True
        if abs(new.congestion_index - old.congestion_index) >= self.min_index_delta_pct:
            return True
        for name in ("io_price", "cpu_price"):
            a, b = getattr(old, name), getattr(new, name)
            if abs(b - a) > self.min_price_rel_delta * max(abs(a), 1e-9):
                return True
        return False

    def published(self, report, now):
        """Tell the policy ``report`` went out at monotonic ``now``."""
        self._last = report
        self._last_at = now
