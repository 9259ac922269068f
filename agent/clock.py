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

"""The loop's clock: real time in production, simulated time in the demo.

A clock has ``now()`` (seconds, monotonic), ``sleep_until(deadline)`` and
``finished`` (true when a simulated run has reached its end). The loop keeps
absolute deadlines (``next += interval``) against it.
"""

import time


class RealClock:
    """Monotonic wall-clock time."""

    finished = False

    def now(self):
        return time.monotonic()

    def sleep_until(self, deadline, stop_event=None):
        delay = deadline - time.monotonic()
        if delay <= 0:
            return
        if stop_event is not None:
            stop_event.wait(delay)
        else:
            time.sleep(delay)
