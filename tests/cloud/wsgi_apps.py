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


"""The cloud's WSGI applications, for gunicorn (``tests.cloud.wsgi_apps:nova``).

Each OpenStack WSGI module parses its configuration with oslo.config when
imported, and oslo.config reads ``sys.argv``: under gunicorn that is
gunicorn's command line, which it rejects. The argv is cleared first.
"""

import importlib
import sys

MODULES = {
    "keystone": "keystone.wsgi.api",
    "glance": "glance.wsgi.api",
    "placement": "placement.wsgi.api",
    "nova": "nova.wsgi.osapi_compute",
}


def neutron():
    """The neutron stand-in (gunicorn calls ``tests.cloud.wsgi_apps:neutron()``)."""
    from tests.cloud import neutron_stub
    return neutron_stub.make_application()


def __getattr__(name):
    if name not in MODULES:
        raise AttributeError(name)
    sys.argv = sys.argv[:1]
    return importlib.import_module(MODULES[name]).application
