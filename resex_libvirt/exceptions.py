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

"""The project's own exceptions.

Errors from the outside world (libvirt, sysfs, netlink, SQLite, etcd, sockets)
are translated into these at the boundary of the adapter that met them, with
the original exception chained (``raise X(...) from exc``). Code inside the
project speaks only these.
"""


class ResexError(Exception):
    """Base class of every error this project raises on purpose."""


class ConfigError(ResexError, ValueError):
    """A configuration value, scenario file or command-line input is invalid."""


class SLAError(ConfigError):
    """A ``resex:`` SLA key has a value outside its type or range."""

    def __init__(self, key, value, reason):
        self.key = key
        self.value = value
        self.reason = reason
        super().__init__("%s=%r: %s" % (key, value, reason))


class SLAConflict(SLAError):
    """Two ``resex:`` keys valid alone contradict each other (a limit below the reservation)."""


class HypervisorError(ResexError):
    """A call to the hypervisor failed."""


class HypervisorUnavailable(HypervisorError):
    """The hypervisor connection is down; transient, retried with backoff."""


class SampleLate(HypervisorError):
    """A sweep of the hypervisor (the VM list, the statistics) is still running.

    libvirt is up but busy (a domain being created or destroyed holds every
    call that walks the domain list for 1-2 s): the interval is skipped, the
    knobs are held, and the sweep's result is taken when it comes.
    """


class VMGone(HypervisorError):
    """The VM vanished (shut down, migrated, undefined) between two calls."""


class KnobUnsupported(HypervisorError):
    """The VM's driver has no knob for this control: monitor-only."""


class FabricError(ResexError):
    """An RDMA/IB or network statistics source could not be read."""


class BoardUnavailable(ResexError):
    """The price board's backend cannot be reached or answered badly."""


class CheckFailed(Exception):
    """One step of an operator's check failed; the message is what the operator reads.

    Raised inside ``resex-agent --check`` and ``python -m resex_nova.check``.
    """

    def __init__(self, part, message):
        super().__init__("%s: %s" % (part, message))
        self.part = part
        self.message = message
