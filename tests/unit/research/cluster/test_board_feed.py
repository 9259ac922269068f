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

"""The fleet's board reader fed the changed rows (resex_research.cluster.board_feed)."""

import random
import time
import types

from resex_libvirt import board as board_mod
from resex_libvirt.board import reader as reader_mod
from resex_research.cluster import board_feed
from tests.unit.board import reports

OPTS = types.SimpleNamespace(max_age=60.0, refresh_interval=300.0, first_load_timeout=3.0,
                             admission_time_constant=20.0, admission_hysteresis=0.3,
                             board_timeout=2.0)


def rep(host, ts, index):
    return reports.make(host, ts=ts, link_utilisation=index / (100.0 + index))


def test_a_reader_fed_the_changes_holds_what_a_full_snapshot_gives(tmp_path):
    url = "sqlite://%s" % (tmp_path / "board.sqlite")
    writer = board_mod.open_board(url, ttl=0)
    hosts = ["h%02d" % i for i in range(20)]
    rng = random.Random(3)
    t0 = time.time()
    for host in hosts:
        writer.publish(rep(host, t0, 0.0))
    full = reader_mod.BoardReader(url, max_age=60.0, refresh_interval=300.0, mode="snapshot",
                                  tau=20.0, hysteresis=0.3, board_opts={"create": False})
    try:
        fed = board_feed.follow(url, OPTS)       # its first load: the whole board
        assert full.refresh() and fed.mode == "follow"
        # The plugin, asking later with its own settings, gets the same reader.
        assert reader_mod.shared(url, mode="snapshot", max_age=60.0) is fed
        for step in range(1, 60):
            for host in rng.sample(hosts, 4):
                writer.publish(rep(host, t0 + step, rng.uniform(0.0, 40.0)))
            assert fed.refresh() and full.refresh()
            now = t0 + step
            assert {h: fed.entry(h, now).admission for h in hosts} == \
                {h: full.entry(h, now).admission for h in hosts}
    finally:
        reader_mod.stop_all()
        full.stop()
        writer.close()
