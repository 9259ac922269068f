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

"""resex-libvirt: ResourceExchange (ResEx) for libvirt and OpenStack.

The core library. It imports neither ``resex_agent`` nor ``resex_nova``; the
dependency direction is ``resex_agent -> resex_libvirt`` and
``resex_nova -> resex_libvirt.board, resex_libvirt.sla``.
"""

import importlib.metadata


def version():
    """The installed distribution's version, or ``"unknown"`` from a bare tree."""
    try:
        return importlib.metadata.version("resex-libvirt")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
