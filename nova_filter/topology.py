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

"""The topology file (``[resex] topology_file``), read again when it changes.

Shared by the filter, the weigher and ``resex-placement-sync`` (which does
not import Nova): :class:`Topologies` keeps each path's last good parse.
"""

import logging
import os
import threading

import yaml

from resex_libvirt.board import links as links_mod

LOG = logging.getLogger(__name__)


class Topologies:
    """The topology file, read again when it changes; the last good one kept on an error."""

    def __init__(self):
        self._lock = threading.Lock()
        self._cache = {}        # path -> (stat key, Topology or None)

    def __call__(self, path):
        try:
            st = os.stat(path)
            key = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError as exc:
            return self._failed(path, None, exc)
        cached = self._cache.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        with self._lock:
            cached = self._cache.get(path)
            if cached is not None and cached[0] == key:
                return cached[1]
            try:
                with open(path, encoding="utf-8") as f:
                    found = links_mod.parse(yaml.safe_load(f) or {})
            except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError) as exc:
                return self._failed(path, key, exc)
            LOG.info("ResEx: topology %s read: %d shared links over %d hosts", path,
                     len(found.links), len(found.of_host))
            self._cache[path] = (key, found)
            return found

    def _failed(self, path, key, exc):
        """Log once per file version; the last good topology (or None) stands."""
        cached = self._cache.get(path)
        last = cached[1] if cached is not None else None
        if cached is None or cached[0] != key or key is None and cached[0] is not None:
            LOG.error("ResEx: cannot use the topology file %s (%s); %s", path, exc,
                      "the last good one stands" if last is not None else
                      "no shared link is known")
            self._cache[path] = (key, last)
        return last
