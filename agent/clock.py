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
