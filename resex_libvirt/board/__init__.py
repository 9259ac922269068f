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

"""The price board: host reports, their stores, and the scheduler's cached reader.

:func:`open_board` picks the backend from the URL's scheme (two real
implementations, so a small table, not a plugin framework):

``sqlite:///path``
    :class:`~resex_libvirt.board.sqlite.SQLiteBoard`, one file (all-in-one).
``etcd3+http://host:port``, ``etcd3+https://host:port``
    :class:`~resex_libvirt.board.etcd.EtcdBoard`, etcd v3 through its JSON
    gateway; a cluster's members comma-separated
    (``etcd3+http://host1:2379,host2:2379,host3:2379``).
"""

import importlib
import urllib.parse

from resex_libvirt import exceptions

#: URL scheme -> (module, class). Modules are imported on use, so a host
#: with the SQLite board never needs etcd3gw.
BACKENDS = {
    "sqlite": ("resex_libvirt.board.sqlite", "SQLiteBoard"),
    "etcd3+http": ("resex_libvirt.board.etcd", "EtcdBoard"),
    "etcd3+https": ("resex_libvirt.board.etcd", "EtcdBoard"),
}


def open_board(url, **opts):
    """Open the board at ``url``; ``opts`` go to the backend (timeout, prefix, lease_ttl...).

    Raises :class:`~resex_libvirt.exceptions.ConfigError` for an unknown
    scheme or a malformed URL and
    :class:`~resex_libvirt.exceptions.BoardUnavailable` when the store
    cannot be opened.
    """
    try:
        scheme = urllib.parse.urlsplit(url or "").scheme
    except ValueError as exc:     # an unbalanced IPv6 bracket
        raise exceptions.ConfigError("malformed board URL %r: %s" % (url, exc)) from exc
    if scheme not in BACKENDS:
        raise exceptions.ConfigError(
            "unknown board URL scheme in %r; known: %s" % (url, ", ".join(sorted(BACKENDS))))
    module, cls = BACKENDS[scheme]
    return getattr(importlib.import_module(module), cls)(url, **opts)


def redact(url):
    """``url`` without any user:password part (for logs and the CLI).

    The netloc is cut at its last ``@``, never parsed: an etcd cluster's URL
    names several ``host:port`` members, which ``urlsplit`` cannot parse.
    """
    scheme, sep, rest = (url or "").partition("://")
    if not sep:
        return url
    end = len(rest)
    for mark in "/?#":
        if mark in rest:
            end = min(end, rest.index(mark))
    netloc = rest[:end]
    if "@" not in netloc:
        return url
    return scheme + sep + netloc.rpartition("@")[2] + rest[end:]
