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

"""Per-VM state in slot-indexed columns.

The market keeps every VM's state (its ledger account, cap, rate, averages,
tallies, and the policy's own per-VM state) as one row of a :class:`Table`:
row ``i`` of every column belongs to the VM ``names[i]``. One interval is
then a handful of whole-column operations instead of a Python loop over
the VMs (doc/source/performance.rst, "The array-backed market").

Rows are kept in the order the VMs joined: a VM that leaves is deleted from
every column and the rows after it move up one slot. Joins and departures
are rare (a VM starting or stopping), intervals are not, so a change of
membership may cost O(VMs) while an interval stays a few column operations.
:attr:`Table.version` moves on every change of membership, so that a reader
holding slot-aligned arrays (the sampler) knows when to realign them.
"""

import typing

import numpy as np

from resex_libvirt.market import memo


class Layout(typing.NamedTuple):
    """The rows of a table at one version: row ``i`` is the VM ``names[i]``."""

    names: tuple
    version: int


class Table:
    """Named numpy columns, one row per VM, in the order the VMs joined."""

    def __init__(self):
        #: Row -> VM name.
        self.names = []
        #: VM name -> row.
        self.slots = {}
        #: Moves on every join and departure.
        self.version = 0
        self._fill = {}
        self._rank = memo.Memo(self._name_rank)
        self._layout = memo.Memo(lambda version: Layout(tuple(self.names), version))

    def __len__(self):
        return len(self.names)

    def __contains__(self, vm):
        return vm in self.slots

    def column(self, name, fill=0.0, dtype=np.float64):
        """Declare the column ``name`` (rows of new VMs start at ``fill``); returns it.

        Declaring an existing column returns it unchanged.
        """
        if name not in self._fill:
            self._fill[name] = (fill, dtype)
            setattr(self, name, np.full(len(self.names), fill, dtype=dtype))
        return getattr(self, name)

    def drop(self, name):
        """Forget the column ``name`` (a policy replaced by another)."""
        if self._fill.pop(name, None) is not None:
            delattr(self, name)

    def add(self, vm):
        """Append a row for ``vm`` (every column at its fill value); returns its slot."""
        slot = self.slots.get(vm)
        if slot is not None:
            return slot
        slot = len(self.names)
        self.names.append(vm)
        self.slots[vm] = slot
        for name, (fill, dtype) in self._fill.items():
            setattr(self, name, np.append(getattr(self, name), np.array([fill], dtype=dtype)))
        self.version += 1
        return slot

    def remove(self, vm):
        """Delete ``vm``'s row from every column; later rows move up one slot."""
        slot = self.slots.pop(vm, None)
        if slot is None:
            return None
        del self.names[slot]
        for name in self._fill:
            setattr(self, name, np.delete(getattr(self, name), slot))
        for later, other in enumerate(self.names[slot:], start=slot):
            self.slots[other] = later
        self.version += 1
        return slot

    def layout(self):
        """The rows as they are now (:class:`Layout`: the same object until a join or leave)."""
        return self._layout(self.version)

    def align(self, names):
        """Make the rows those of ``names``, in its order: rows kept by VM, new ones filled."""
        if self.names == list(names):
            return
        keep = set(names)
        for vm in [vm for vm in self.names if vm not in keep]:
            self.remove(vm)
        for vm in names:
            self.add(vm)
        if self.names != list(names):
            order = np.array([self.slots[vm] for vm in names], dtype=np.intp)
            for name in self._fill:
                setattr(self, name, getattr(self, name)[order])
            self.names = list(names)
            self.slots = {vm: k for k, vm in enumerate(self.names)}
            self.version += 1

    def name_rank(self):
        """Each row's position in the VMs' names sorted (cached until the next join or leave)."""
        return self._rank(self.version)

    def _name_rank(self, _version):
        names = self.names
        rank = np.empty(len(names), dtype=np.int64)
        rank[sorted(range(len(names)), key=names.__getitem__)] = np.arange(len(names))
        return rank

    def mapping(self, name, mask=None):
        """``{vm: value}`` of column ``name`` (rows where ``mask`` is true), as Python values."""
        values = getattr(self, name).tolist()
        if mask is None:
            return dict(zip(self.names, values))
        return {self.names[i]: values[i] for i in np.flatnonzero(mask).tolist()}


def number(value, dtype=np.float64):
    """``value`` as a read-only 0-d array: a constant of the per-interval rules.

    numpy applies an array operand faster than it converts a Python number,
    which it does on every operation (about 0.26 against 0.41 us on 64 rows).
    ``dtype`` is the one the Python number takes against the column
    (float64, or int64 for an integer column), so the results are the same
    to the last bit.
    """
    out = np.array(value, dtype=dtype)
    out.flags.writeable = False
    return out


ZERO = number(0.0)
ONE = number(1.0)
HUNDRED = number(100.0)
IZERO = number(0, np.int64)


def seqsum(values):
    """The sum of ``values`` added left to right, as Python's ``sum`` does.

    ``numpy.sum`` adds pairwise, which may differ in the last bit; the
    market's totals must not depend on how they are computed.
    """
    if len(values) == 0:
        return 0.0
    return float(np.add.accumulate(values)[-1])


def pick(cond, yes, no):
    """``numpy.where(cond, yes, no)``, cheaper on short rows (``no`` an array)."""
    out = no.copy()
    np.copyto(out, yes, where=cond)
    return out


_LARGEST = number(np.finfo(np.float64).max)
_LOWEST = number(-np.finfo(np.float64).max)


def nan_to_num(values, nan=0.0):
    """``numpy.nan_to_num(values, nan=nan)`` of a float64 column, cheaper on short rows.

    A new array: NaN becomes ``nan``, +inf and -inf the largest and lowest
    finite floats (whatever ``nan`` is, as numpy's: the masks are those of
    ``values``); every other value is kept to the last bit (-0.0 too).
    numpy's own costs about 20 us a call in Python before any arithmetic.
    """
    out = np.minimum(values, _LARGEST)
    np.maximum(out, _LOWEST, out=out)
    np.copyto(out, nan, where=np.isnan(values))
    return out


def filled(n, value, dtype=np.float64):
    """``numpy.full(n, value, dtype)``, cheaper on short rows."""
    out = np.empty(n, dtype=dtype)
    out.fill(value)
    return out
