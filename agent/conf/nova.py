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

"""Options of the optional compute API lookup: group ``[nova]``.

Each VM's SLA comes from its domain's metadata (the flavor extra specs Nova
writes into every domain it defines), so the agent needs no OpenStack
credentials. ``[nova] sla_lookup`` adds a lookup of each instance's flavor
through the compute API; it is off by default. The group carries
keystoneauth's own options (session, auth plugin, adapter), registered with
keystoneauth's loading helpers as nova does for its ``[placement]`` and
``[neutron]`` groups, so a ``[nova]`` section reads like any OpenStack
service's client section.
"""

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

GROUP = "nova"
DEFAULT_SERVICE_TYPE = "compute"

#: Seconds per HTTP request unless ``[nova] timeout`` says otherwise:
#: keystoneauth's own default is no timeout at all.
DEFAULT_TIMEOUT = 5.0

nova_group = cfg.OptGroup(
    GROUP, title="Nova compute API (optional SLA lookup)",
    help="Credentials and endpoint of Nova's compute API, used only with "
         "``sla_lookup = true``: the SLA normally comes from each domain's Nova "
         "metadata, with no API call and no credentials.")

NOVA_OPTS = [
    cfg.BoolOpt(
        "sla_lookup",
        default=False,
        deprecated_opts=[cfg.DeprecatedOpt("nova_lookup", group="libvirt")],
        help="""
Also look up each VM's flavor extra specs through the compute API.

The domain UUID is the instance UUID; ``GET /servers/{uuid}`` at compute API
microversion 2.71 embeds the flavor's ``extra_specs`` and names the server's
group (the VM's ensemble unless its metadata names one). Lookups run
on a background thread: the loop uses metadata/defaults until the answer
arrives. Off by default: Nova already writes the flavor's extra specs into
each domain's metadata, which the agent reads without credentials. Turn it
on only for instances whose domains lack them; the agent then needs
credentials (``auth_type`` and the plugin's options in this group) that may
read every project's servers, i.e. an admin role.

Possible values:

* ``false``: SLA from domain metadata and ``[sla]`` defaults only (default)
* ``true``: flavor extra specs from the compute API on top

Related options:

* ``auth_type``, ``auth_url``, ``username``, ... (keystoneauth, this group)
* ``cache_ttl``, ``timeout``
"""),
    cfg.FloatOpt(
        "cache_ttl",
        default=600.0, min=1.0, max=86400.0,
        deprecated_opts=[cfg.DeprecatedOpt("nova_cache_ttl", group="libvirt")],
        help="""
Seconds a VM's looked-up extra specs are trusted before they are fetched
again (a failed lookup is retried after 30 s, keeping the last good answer).

Possible values:

* 1..86400

Related options:

* ``sla_lookup``
"""),
]

#: Old ``[libvirt]`` names of the keystoneauth session options.
_DEPRECATED_SESSION = {"timeout": [cfg.DeprecatedOpt("nova_timeout", group="libvirt")]}


def _adapter_opts():
    opts = ks_loading.get_adapter_conf_options(include_deprecated=False)
    for opt in opts:
        if opt.dest == "service_type":
            opt.default = DEFAULT_SERVICE_TYPE
    return opts


def _session_opts():
    opts = ks_loading.get_session_conf_options(deprecated_opts=_DEPRECATED_SESSION)
    for opt in opts:
        if opt.dest == "timeout":
            opt.default = DEFAULT_TIMEOUT
    return opts


def _fresh():
    # A private OptGroup per ConfigOpts (oslo.config keeps state on it).
    return cfg.OptGroup(nova_group.name, title=nova_group.title, help=nova_group.help)


def register_opts(conf):
    conf.register_group(_fresh())
    conf.register_opts(NOVA_OPTS, group=GROUP)
    ks_loading.register_session_conf_options(conf, GROUP, deprecated_opts=_DEPRECATED_SESSION)
    ks_loading.register_auth_conf_options(conf, GROUP)
    ks_loading.register_adapter_conf_options(conf, GROUP, include_deprecated=False)
    conf.set_default("service_type", DEFAULT_SERVICE_TYPE, group=GROUP)
    conf.set_default("timeout", DEFAULT_TIMEOUT, group=GROUP)


def list_opts():
    return [(nova_group,
             NOVA_OPTS
             + _session_opts()
             + ks_loading.get_auth_common_conf_options()
             + ks_loading.get_auth_plugin_conf_options("password")
             + ks_loading.get_auth_plugin_conf_options("v3password")
             + _adapter_opts())]
