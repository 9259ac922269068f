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

"""Host reports for tests: a valid record with the fields a test cares about."""

import os
import tempfile
import time

from resex_libvirt import board as board_mod
from resex_libvirt.board import report as report_mod


def make(host="compute1", ts=None, **fields):
    """A valid :class:`HostReport` for ``host``, now unless ``ts`` is given."""
    values = dict(
        host=host, ts=time.time() if ts is None else ts, epoch=7,
        link_capacity_bytes_per_s=float(1 << 30), link_utilisation=0.0, cpu_price=1.0,
        io_price=1.0, latency_inflation_pct=0.0, vms=4, sensitive_vms=0, heavy_io_vms=0,
        sensitive_io_share=0.0, heavy_io_share=0.0, agent_version="test")
    values.update(fields)
    return report_mod.HostReport(**values)


def sqlite_board(test):
    """``(path, url, board)``: a SQLite board in a temporary directory, closed with ``test``."""
    tmp = tempfile.TemporaryDirectory(prefix="resex-board-")
    test.addCleanup(tmp.cleanup)
    path = os.path.join(tmp.name, "board.sqlite")
    board = board_mod.open_board("sqlite://" + path)
    test.addCleanup(board.close)
    return path, "sqlite://" + path, board
