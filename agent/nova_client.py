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

"""The compute API client of the optional SLA lookup, from ``[nova]``.

keystoneauth's loading helpers turn the ``[nova]`` group (see
``agent/conf/nova.py``) into an auth plugin, a session (timeouts, TLS) and
an ``Adapter`` for the compute service, as every OpenStack service loads its
clients. The library (:mod:`resex_libvirt.hypervisor.nova_sla`) is handed
the adapter: it reads no configuration.
"""

from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading

from resex_agent.conf import nova as nova_conf
from resex_libvirt import exceptions
from resex_libvirt.hypervisor import nova_sla


def load_auth(conf):
    """The auth plugin of ``[nova]``; ``ConfigError`` when none is configured."""
    try:
        auth = ks_loading.load_auth_from_conf_options(conf, nova_conf.GROUP)
    except ks_exc.ClientException as exc:
        raise exceptions.ConfigError("[nova] credentials: %s" % exc) from exc
    if auth is None:
        raise exceptions.ConfigError(
            "[nova] sla_lookup = true needs credentials: set [nova] auth_type (e.g. "
            "password) and its options (auth_url, username, password, project_name, ...)")
    return auth


def compute_adapter(conf, auth=None):
    """A keystoneauth ``Adapter`` of the compute service, loaded from ``[nova]``."""
    auth = auth if auth is not None else load_auth(conf)
    session = ks_loading.load_session_from_conf_options(conf, nova_conf.GROUP, auth=auth)
    return ks_loading.load_adapter_from_conf_options(conf, nova_conf.GROUP, session=session,
                                                     auth=auth)


def sla_source(conf):
    """The :class:`~resex_libvirt.hypervisor.nova_sla.NovaSLASource`, or ``None`` when off.

    The credentials are checked here, at start (a missing ``auth_type`` is a
    clear ``ConfigError``); the token is fetched later, on the lookup thread.
    """
    if not conf.nova.sla_lookup:
        return None
    auth = load_auth(conf)
    return nova_sla.NovaSLASource(lambda: compute_adapter(conf, auth=auth),
                                  ttl=conf.nova.cache_ttl)
