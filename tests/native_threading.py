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
