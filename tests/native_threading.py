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

"""Put nova in native-threading mode before anything imports eventlet.

Importing ``nova.tests.functional`` runs ``nova.monkey_patch.patch()``: it
eventlet-patches the whole process unless ``OS_NOVA_DISABLE_EVENTLET_PATCHING``
is set, and when it is set it refuses to run if eventlet is already imported
(etcd3gw's futurist and nova's own API modules import it when it is
installed). Running ``patch()`` first, in threading mode, installs nova's
import guard instead: later ``import eventlet`` attempts fail with
ImportError, which those libraries handle. The project runs native threads
only (doc/source/architecture.rst), so nothing here needs eventlet.
"""

import os
import sys

os.environ.setdefault("OS_NOVA_DISABLE_EVENTLET_PATCHING", "1")
if "eventlet" not in sys.modules:
    from nova import monkey_patch

    monkey_patch.patch()
