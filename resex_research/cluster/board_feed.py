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

"""The scheduler's reader of a SQLite board, fed the changed rows at the simulation's times.

The fleet refreshes the scheduler's shared reader itself, at its own
refresh times, so that a run is repeatable. A full snapshot per refresh
costs the whole fleet (10,000 rows read and merged); the reader's
``follow`` mode merges only what changed. :func:`follow` creates the
shared reader in that mode, before the plugin asks for it, over a
:class:`ChangesBoard`: its ``follow`` gives the whole board once (the
reader's first load) and then waits for the reader to stop, and its
``snapshot`` gives the rows changed since its previous call (SQLite's
``changes``, the query the board's own ``follow`` polls). Each refresh of
the reader then merges the changes since the last one: the entries, and so
every decision, are the ones a full snapshot would give.
"""

from resex_libvirt import board as board_mod
from resex_libvirt.board import backend
from resex_libvirt.board import reader as reader_mod


class ChangesBoard(backend.Board):
    """A SQLite board whose ``snapshot`` is the rows changed since the previous one."""

    def __init__(self, board):
        self._board = board
        self.url = board.url
        self._decoder = backend.RecordDecoder(board.url)
        self._since = -1

    def publish(self, report):
        self._board.publish(report)

    def snapshot(self):
        rows, self._since = self._board.changes(self._since)
        return self._decoder.decode_changes(rows)

    def follow(self, stop, interval):
        yield True, self.snapshot()
        stop.wait()

    def count(self):
        return self._board.count()

    def close(self):
        self._board.close()


def follow(url, opts):
    """The shared reader of the SQLite board ``url``, fed by :class:`ChangesBoard`.

    ``opts`` is nova's ``CONF.resex``: the reader is built with the settings
    the plugin would give it (``resex_nova.rules.board_reader``), in
    ``follow`` mode; the plugin then finds it already made.
    """
    def opener(board_url, **board_opts):
        return ChangesBoard(board_mod.open_board(board_url, **board_opts))

    return reader_mod.shared(
        url, max_age=opts.max_age, refresh_interval=opts.refresh_interval,
        load_timeout=opts.first_load_timeout, mode="follow",
        tau=opts.admission_time_constant, hysteresis=opts.admission_hysteresis,
        board_opts={"timeout": opts.board_timeout, "create": False}, opener=opener)
