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


@dataclasses.dataclass(slots=True)
class Account:
    """One VM's Resos for the current epoch."""

    shares: int
    allocation: float = 0.0
    balance: float = 0.0
    spent_cpu: float = 0.0
    spent_io: float = 0.0


class Ledger:
    """Balances of every VM; allocation by shares of a fixed supply."""

    def __init__(self, cpu_supply, io_supply):
        if cpu_supply < 0 or io_supply < 0:
            raise ValueError("supplies must be >= 0")
        self.cpu_supply = float(cpu_supply)
        self.io_supply = float(io_supply)
        self._accounts = {}
        self._total_shares = 0
        self._stale = False

    # -- membership -------------------------------------------------------
    def open_account(self, vm, shares, fraction_left=1.0):
        """Add ``vm``; it starts with its allocation prorated to what is left of the epoch.

        Returns its :class:`Account`.
        """
        if shares < 1:
            raise ValueError("shares must be >= 1")
        old = self._accounts.get(vm)
        if old is not None:
            self._total_shares -= old.shares
        self._accounts[vm] = acct = Account(shares=int(shares))
        # The others' allocations follow on the next read (one pass for many
        # VMs adopted at once, not one per VM).
        self._total_shares += acct.shares
        self._stale = True
        acct.allocation = self._share_of(acct.shares)
        acct.balance = acct.allocation * min(1.0, max(0.0, fraction_left))
        return acct

    def close_account(self, vm):
        """Remove ``vm``; the others' allocations grow from the next epoch."""
        acct = self._accounts.pop(vm, None)
        if acct is not None:
            self._total_shares -= acct.shares
            self._stale = True

    def set_supply(self, cpu_supply, io_supply):
        """New supplies; allocations follow, balances from the next epoch."""
        if cpu_supply < 0 or io_supply < 0:
            raise ValueError("supplies must be >= 0")
        self.cpu_supply = float(cpu_supply)
        self.io_supply = float(io_supply)
        self._stale = True

    def set_shares(self, vm, shares):
        acct = self._accounts[vm]
        self._total_shares += int(shares) - acct.shares
        acct.shares = int(shares)
        self._stale = True

    def _share_of(self, shares):
        return (self.cpu_supply + self.io_supply) * shares / self._total_shares

    def _fresh(self):
        """Bring every allocation up to date (after VMs joined or left, or a new supply)."""
        if self._stale:
            self._stale = False
            for acct in self._accounts.values():
                acct.allocation = self._share_of(acct.shares)

    # -- the epoch ----------------------------------------------------------
    def charge(self, vm, cpu_resos, io_resos):
        """Deduct this interval's usage; returns the balance left."""
        if cpu_resos < 0 or io_resos < 0:
            raise ValueError("charges must be >= 0")
        acct = self._accounts[vm]
        acct.spent_cpu += cpu_resos
        acct.spent_io += io_resos
        acct.balance = max(0.0, acct.balance - cpu_resos - io_resos)
        return acct.balance

    def replenish(self):
        """Start a new epoch: every balance back to its allocation, leftovers discarded."""
        self._fresh()
        for acct in self._accounts.values():
            acct.balance = acct.allocation
            acct.spent_cpu = 0.0
            acct.spent_io = 0.0

    # -- reading ------------------------------------------------------------
    def __contains__(self, vm):
        return vm in self._accounts

    def __iter__(self):
        return iter(self._accounts)

    def accounts(self):
        """``(vm, Account)`` pairs, read-only by convention."""
        self._fresh()
        return self._accounts.items()

    def account(self, vm):
        self._fresh()
        return self._accounts[vm]

    def balance(self, vm):
        return self._accounts[vm].balance

    def allocation(self, vm):
        self._fresh()
        return self._accounts[vm].allocation

    def fraction_left(self, vm):
        """Balance over allocation, in [0, 1] (1 when the allocation is zero)."""
        self._fresh()
        acct = self._accounts[vm]
        return acct.balance / acct.allocation if acct.allocation > 0 else 1.0
