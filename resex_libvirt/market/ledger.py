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

"""The Reso ledger (paper Sections V-C and VI-A).

Supply (VI-A): CPU is charged by the percent per interval, so one pCPU
supplies ``100 x intervals_per_epoch`` Resos per epoch ("PercentPerInterval
* NumberOfIntervals = 100 * 1000 = 100,000"). The link supplies
``link_bytes_per_epoch / MTU`` Resos per epoch ("1 * 1024^3 / 1024 =
1048576 MTUs in one second"). Both supplies are summed into one currency
and allocated to the VMs "equally ... or unequally based on priority or
weight": here by mClock shares (Gulati et al., OSDI 2010), which is equal when shares are.

Each interval the VM's usage is deducted; each epoch every balance is reset
to its allocation and "any Resos left over from the earlier epoch are
discarded" (V-C).

Deviation: a balance never goes below zero. The paper does not say what a
negative balance means; the spend is still recorded in full (``spent_*``),
so nothing is hidden, and the FreeMarket rule only needs "less than 10%
left".
"""

import dataclasses

import numpy as np

from resex_libvirt.market import table as table_mod


@dataclasses.dataclass(slots=True)
class Account:
    """One VM's Resos for the current epoch (a copy: the ledger keeps columns)."""

    shares: int
    allocation: float = 0.0
    balance: float = 0.0
    spent_cpu: float = 0.0
    spent_io: float = 0.0


class Ledger:
    """Balances of every VM; allocation by shares of a fixed supply.

    The accounts are columns of a :class:`~resex_libvirt.market.table.Table`
    (``shares``, ``allocation``, ``balance``, ``spent_cpu``, ``spent_io``):
    the market passes its own table, so that charging an interval is a few
    column operations (:meth:`Market.step`); a ledger made alone keeps one of
    its own.
    """

    def __init__(self, cpu_supply, io_supply, table=None):
        if cpu_supply < 0 or io_supply < 0:
            raise ValueError("supplies must be >= 0")
        self.cpu_supply = float(cpu_supply)
        self.io_supply = float(io_supply)
        self._own = table is None
        self.table = table_mod.Table() if table is None else table
        for name in ("shares", "allocation", "balance", "spent_cpu", "spent_io"):
            self.table.column(name)
        self.table.column("open", False, bool)
        self._total_shares = 0
        self._stale = False

    # -- membership -------------------------------------------------------
    def open_account(self, vm, shares, fraction_left=1.0):
        """Add ``vm``; it starts with its allocation prorated to what is left of the epoch.

        Returns its :class:`Account`.
        """
        if shares < 1:
            raise ValueError("shares must be >= 1")
        t = self.table
        slot = t.add(vm) if self._own else t.slots[vm]
        if t.open[slot]:
            self._total_shares -= int(t.shares[slot])
        shares = int(shares)
        # The others' allocations follow on the next read (one pass for many
        # VMs adopted at once, not one per VM).
        self._total_shares += shares
        self._stale = True
        allocation = self._share_of(shares)
        t.open[slot] = True
        t.shares[slot] = shares
        t.allocation[slot] = allocation
        t.balance[slot] = allocation * min(1.0, max(0.0, fraction_left))
        t.spent_cpu[slot] = t.spent_io[slot] = 0.0
        return self.account(vm)

    def close_account(self, vm):
        """Remove ``vm``; the others' allocations grow from the next epoch."""
        t = self.table
        slot = t.slots.get(vm)
        if slot is None or not t.open[slot]:
            return
        self._total_shares -= int(t.shares[slot])
        self._stale = True
        if self._own:
            t.remove(vm)
        else:
            t.open[slot] = False

    def set_supply(self, cpu_supply, io_supply):
        """New supplies; allocations follow, balances from the next epoch."""
        if cpu_supply < 0 or io_supply < 0:
            raise ValueError("supplies must be >= 0")
        self.cpu_supply = float(cpu_supply)
        self.io_supply = float(io_supply)
        self._stale = True

    def set_shares(self, vm, shares):
        slot = self._slot(vm)
        self._total_shares += int(shares) - int(self.table.shares[slot])
        self.table.shares[slot] = int(shares)
        self._stale = True

    def _share_of(self, shares):
        return (self.cpu_supply + self.io_supply) * shares / self._total_shares

    def refresh(self):
        """Bring every allocation up to date (after VMs joined or left, or a new supply)."""
        if self._stale:
            self._stale = False
            t = self.table
            if self._total_shares:
                fresh = (self.cpu_supply + self.io_supply) * t.shares / self._total_shares
                np.copyto(t.allocation, fresh, where=t.open)     # in place: read by views

    def _slot(self, vm):
        slot = self.table.slots.get(vm)
        if slot is None or not self.table.open[slot]:
            raise KeyError(vm)
        return slot

    # -- the epoch ----------------------------------------------------------
    def charge(self, vm, cpu_resos, io_resos):
        """Deduct this interval's usage; returns the balance left."""
        if cpu_resos < 0 or io_resos < 0:
            raise ValueError("charges must be >= 0")
        t, slot = self.table, self._slot(vm)
        t.spent_cpu[slot] += cpu_resos
        t.spent_io[slot] += io_resos
        t.balance[slot] = max(0.0, float(t.balance[slot]) - cpu_resos - io_resos)
        return float(t.balance[slot])

    def replenish(self):
        """Start a new epoch: every balance back to its allocation, leftovers discarded."""
        self.refresh()
        t = self.table
        t.balance[:] = t.allocation
        t.spent_cpu[:] = 0.0
        t.spent_io[:] = 0.0

    # -- reading ------------------------------------------------------------
    def __contains__(self, vm):
        slot = self.table.slots.get(vm)
        return slot is not None and bool(self.table.open[slot])

    def __iter__(self):
        t = self.table
        return iter([vm for vm, is_open in zip(t.names, t.open.tolist()) if is_open])

    def accounts(self):
        """``(vm, Account)`` pairs (copies)."""
        self.refresh()
        return [(vm, self.account(vm)) for vm in self]

    def account(self, vm):
        self.refresh()
        t, slot = self.table, self._slot(vm)
        return Account(int(t.shares[slot]), float(t.allocation[slot]), float(t.balance[slot]),
                       float(t.spent_cpu[slot]), float(t.spent_io[slot]))

    def balance(self, vm):
        return float(self.table.balance[self._slot(vm)])

    def allocation(self, vm):
        self.refresh()
        return float(self.table.allocation[self._slot(vm)])

    def fraction_left(self, vm):
        """Balance over allocation, in [0, 1] (1 when the allocation is zero)."""
        self.refresh()
        t, slot = self.table, self._slot(vm)
        allocation = float(t.allocation[slot])
        return float(t.balance[slot]) / allocation if allocation > 0 else 1.0
