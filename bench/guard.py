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

"""A figure measured on an error path is not a measure: the bench stops instead.

The agent's epoch and control step never raise: they log what failed and go
on. A benchmark timing them on a broken setup (no hypervisor, say) would
print the cost of the failure as the cost of the work. :class:`Problems`
collects what the project's loggers log at or above a level while a
benchmark runs: ``python -m bench`` fails on an error (some benchmarks
provoke warnings on purpose: the intake's bench sends claims it warns
about), the epoch row on a warning too.
"""

import logging


class ErrorPath(RuntimeError):
    """A benchmark timed work that failed: its figures would measure the failure."""


class Problems(logging.Handler):
    """What the project's loggers log at ``level`` or above while installed (a context manager).

    Installed on the project's loggers, not on the root logger: other
    libraries' warnings print as before. :meth:`check` raises
    :class:`ErrorPath` when there was one.
    """

    LOGGERS = ("resex_agent", "resex_libvirt", "resex_research", "resex_nova")

    def __init__(self, level=logging.WARNING):
        super().__init__(level)
        self.records = []

    def emit(self, record):
        self.records.append(record)

    def __enter__(self):
        for name in self.LOGGERS:
            logging.getLogger(name).addHandler(self)
        return self

    def __exit__(self, *exc):
        for name in self.LOGGERS:
            logging.getLogger(name).removeHandler(self)

    def check(self, what):
        """Raise :class:`ErrorPath` naming ``what`` and the first record, if any was logged."""
        if self.records:
            first = self.records[0]
            raise ErrorPath("%s logged %d record(s) at %s or above, the first from %s: %s"
                            % (what, len(self.records), logging.getLevelName(self.level),
                               first.name, first.getMessage()))
