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

"""One cache for values worked out from the market's rows: kept until their key changes.

The key is what the value depends on, most often the table's ``version``
(it moves whenever a VM joins or leaves); a value is worked out again only
when its key changes.
"""

_UNSET = object()


class Memo:
    """``make(key)``, worked out again only when ``key`` changes (compared with ``!=``)."""

    __slots__ = ("_make", "_key", "_value")

    def __init__(self, make):
        self._make = make
        self._key = _UNSET
        self._value = None

    def __call__(self, key):
        if self._key is _UNSET or key != self._key:
            self._value = self._make(key)
            self._key = key
        return self._value

    def clear(self):
        """Forget the value: the next call works it out whatever its key."""
        self._key = _UNSET
        self._value = None
