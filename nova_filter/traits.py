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

"""What a compute node's ResEx traits in Placement should be: the pure decisions.

Nova asks Placement for candidates before any filter runs, and keeps at most
``[scheduler] max_placement_results`` of them: a filter alone cannot reach a
clean host beyond them, and schedulers that read Placement (not the board)
never see the board at all. Two traits carry the board's verdict there:

* :data:`MANAGED` (``CUSTOM_RESEX_MANAGED``): an agent runs on the node.
  nova-compute sets it itself from a provider config file
  (``[compute] provider_config_location``; ``devstack/plugin.sh`` writes
  it): a latency-sensitive flavor that requires it never lands on a node
  without an agent.
* :data:`CLOSED` (``CUSTOM_RESEX_CLOSED``): the node refuses latency-sensitive
  requests now. ``resex-placement-sync`` (:mod:`resex_nova.placement_sync`)
  sets and clears it; a flavor forbids it
  (``trait:CUSTOM_RESEX_CLOSED=forbidden``).

**When a node is closed** (:func:`closed`): exactly when the filter would
refuse a request of the default threshold T (``[resex]
congestion_threshold``): the host's smoothed congestion index
(:mod:`resex_libvirt.board.admission`) rises above T, and it opens again only
once the index has fallen to ``(1 - h) T``. The admission latch of the
scheduler's reader gives that for a host followed without a break; here the
trait itself is the latch (:func:`admission_closed`), so that a restarted
service, whose reader starts every host afresh, continues from what
Placement holds instead of reopening hosts inside the hysteresis band. A
trait therefore flips when admission flips, not every epoch.

**Hosts without a fresh report** (no report, older than ``max_age``, or a
blind agent) follow ``[placement_sync] unknown_host_policy``:

* ``closed`` (default): the node is closed. A latency-sensitive VM placed
  there would run without a market protecting it (no agent, or one that
  cannot see its hypervisor), and Placement has no "only when nothing better
  is left" (the filter's ``last``): the honest answer is "not clean". The
  cost: a fleet-wide agent outage closes every node to latency-sensitive
  flavors that forbid the trait, and boots fail with NoValidHost instead of
  landing unprotected; those flavors are the ones that asked for protection.
* ``keep``: leave the trait as it is (a node that goes silent stays open
  if it was open).
* ``open``: clear it (as clean as a reporting, quiet host).

When the service itself cannot read the board, every host is unknown to it
but none is known to be worse: it changes nothing (:func:`closed` with
``board_failing``) until the board is back.

Only :data:`CLOSED` is ever written, and only by :func:`with_trait`, which
adds or removes that one name and keeps every other trait as it was.
"""

CLOSED = "CUSTOM_RESEX_CLOSED"
MANAGED = "CUSTOM_RESEX_MANAGED"

#: ``[placement_sync] unknown_host_policy`` values.
UNKNOWN_CLOSED, UNKNOWN_KEEP, UNKNOWN_OPEN = "closed", "keep", "open"
UNKNOWN_POLICIES = (UNKNOWN_CLOSED, UNKNOWN_KEEP, UNKNOWN_OPEN)


def admission_closed(smoothed, latched, threshold, hysteresis, was_closed):
    """Whether a reporting host is closed, given its admission state and the trait's.

    ``was_closed`` is what the trait is now (True, False) or None when not
    known (then the reader's latch decides: ``latched > threshold``). With
    the trait known, it is the latch: closed above ``threshold``, open at or
    below ``(1 - hysteresis) threshold``, unchanged in between. For a host
    followed from its first report this is the scheduler's own rule
    (:meth:`resex_libvirt.board.admission.Admission.refuses`).
    """
    if was_closed is None:
        return latched > threshold
    if smoothed > threshold:
        return True
    # The reader's arithmetic (admission.advance): a latch let down to
    # S / (1 - h) admits again once that is at most the threshold.
    if smoothed / (1.0 - hysteresis) <= threshold:
        return False
    return was_closed


def fresh(entry, now, max_age):
    """True when ``entry`` (a board reader's Entry, or None) is a fresh, seeing report."""
    return entry is not None and now - entry.ts <= max_age and not entry.blind


def closed(entry, was_closed, now, max_age, threshold, hysteresis, unknown_policy,
           board_failing=False, link_pct=None):
    """Whether the node should carry :data:`CLOSED`: True, False, or None (leave it).

    ``entry`` is the host's :class:`resex_libvirt.board.reader.Entry` (or
    None); ``was_closed`` the trait now (None: unknown). See the module
    docstring for the rule and the unknown-host policy. ``link_pct``: the
    congestion of the most congested shared link the host sends into
    (:func:`~resex_libvirt.board.links.worst_by_host`), or None: a host
    behind a more congested link is judged by the link's, as the filter
    judges it (:meth:`resex_libvirt.board.reader.Entry.behind`).
    """
    if not fresh(entry, now, max_age):
        if board_failing or unknown_policy == UNKNOWN_KEEP:
            return None
        return unknown_policy == UNKNOWN_CLOSED
    admission = entry.admission
    smoothed, latched = admission.smoothed, admission.latched
    if link_pct is not None:
        smoothed, latched = max(smoothed, link_pct), max(latched, link_pct)
    return admission_closed(smoothed, latched, threshold, hysteresis, was_closed)


def with_trait(traits, trait, present):
    """``traits`` with ``trait`` present or absent, every other name untouched (a new set)."""
    out = set(traits)
    if present:
        out.add(trait)
    else:
        out.discard(trait)
    return out


def changes(desired, actual):
    """``{host: closed}`` to write: the hosts whose desired state is known and differs.

    ``desired`` maps host -> True/False/None (None: leave it); ``actual``
    host -> True/False (the trait in Placement), a missing host counting as
    not closed.
    """
    return {host: want for host, want in desired.items()
            if want is not None and want != actual.get(host, False)}
