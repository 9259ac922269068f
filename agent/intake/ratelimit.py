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

"""A token bucket: the per-VM, per-source report rate limit.

``rate`` tokens per second refill a bucket of ``burst`` tokens; a report
takes one. The clock is passed in (``now``, seconds, monotonic) so the
bucket is deterministic under test.
"""


class TokenBucket:
    __slots__ = ("rate", "burst", "_tokens", "_last")

    def __init__(self, rate, burst, now):
        if not rate > 0 or burst < 1:
            raise ValueError("rate must be > 0 and burst >= 1")
        self.rate = float(rate)
        self.burst = float(burst)
        self._tokens = float(burst)
        self._last = now

    def take(self, now):
        """Take one token; ``False`` when the bucket is empty."""
        elapsed = now - self._last
        if elapsed > 0:
            self._tokens = min(self.burst, self._tokens + elapsed * self.rate)
            self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False
