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

"""What Nova writes into every domain it defines, read back by the agent.

Nova's libvirt driver (``nova/virt/libvirt/config.py``,
``LibvirtConfigGuestMetaNovaInstance``, ``...NovaFlavor`` and
``...NovaFlavorExtraSpecs``) puts the flavor of an instance, with its extra
specs, into the domain's ``<metadata>``::

    <metadata>
      <nova:instance xmlns:nova="http://openstack.org/xmlns/libvirt/nova/1.1">
        <nova:package version="34.0.0"/>
        <nova:name>web-1</nova:name>
        <nova:flavor name="m1.latency" id="...">
          <nova:memory>2048</nova:memory>
          <nova:vcpus>2</nova:vcpus>
          <nova:extraSpecs>
            <nova:extraSpec name="resex:latency_sla_us">200</nova:extraSpec>
            <nova:extraSpec name="quota:cpu_shares">2048</nova:extraSpec>
          </nova:extraSpecs>
        </nova:flavor>
        ...
      </nova:instance>
    </metadata>

The domain is redefined with the new flavor on a resize (and on hard
reboot, cold migration, unshelve, evacuation and rescue), so reading the
domain XML again after its define/start event gives the flavor in force: no
compute API call is needed.

Two things come out of it:

* the ``resex:*`` extra specs: the VM's SLA (:func:`resex_libvirt.sla.parse`);
* the ``quota:cpu_*`` extra specs: what Nova itself wrote into ``<cputune>``
  (``LibvirtDriver._update_guest_cputune``: ``quota:cpu_shares`` to
  ``<shares>``, ``quota:cpu_quota``/``quota:cpu_period`` to the per-vCPU
  ``<quota>``/``<period>``), the VM's true scheduler settings whatever a
  live domain carries (:func:`flavor_knobs`).
"""

import dataclasses
import logging

LOG = logging.getLogger(__name__)

#: Nova's metadata namespace (``nova.virt.libvirt.config.NOVA_NS``).
NAMESPACE = "http://openstack.org/xmlns/libvirt/nova/1.1"

#: Flavor extra spec -> libvirt scheduler parameter (``<cputune>`` element).
QUOTA_KEYS = {
    "quota:cpu_shares": "cpu_shares",
    "quota:cpu_period": "vcpu_period",
    "quota:cpu_quota": "vcpu_quota",
}


@dataclasses.dataclass(frozen=True)
class NovaFlavor:
    """The flavor Nova recorded in a domain: name, vCPUs and extra specs."""

    name: str
    vcpus: int | None
    extra_specs: dict


def _q(tag):
    return "{%s}%s" % (NAMESPACE, tag)


def flavor_of(root):
    """The :class:`NovaFlavor` in a parsed domain XML ``root``, or ``None``.

    ``None`` when the domain has no ``<nova:instance>`` (not a Nova guest)
    or that element has no flavor. An extra spec without a name is skipped.
    """
    instance = root.find("metadata/" + _q("instance"))
    if instance is None:
        return None
    flavor = instance.find(_q("flavor"))
    if flavor is None:
        return None
    specs = {}
    extra = flavor.find(_q("extraSpecs"))
    if extra is not None:
        for spec in extra.findall(_q("extraSpec")):
            name = spec.get("name")
            if name:
                specs[name] = (spec.text or "").strip()
    vcpus = None
    text = flavor.findtext(_q("vcpus"))
    if text:
        try:
            vcpus = int(text.strip())
        except ValueError:
            vcpus = None
    return NovaFlavor(name=flavor.get("name") or "", vcpus=vcpus, extra_specs=specs)


def instance_name(root):
    """The instance's name in Nova (``<nova:name>``) of a parsed domain XML, or ``None``."""
    name = (root.findtext("metadata/%s/%s" % (_q("instance"), _q("name"))) or "").strip()
    return name or None


def flavor_knobs(extra_specs):
    """``{libvirt parameter: int}`` of the ``quota:cpu_*`` extra specs Nova applied.

    Values Nova itself would refuse (not an integer) are skipped with a
    warning; the agent then falls back to the persistent definition.
    """
    knobs = {}
    for key, param in QUOTA_KEYS.items():
        raw = (extra_specs or {}).get(key)
        if raw is None:
            continue
        try:
            knobs[param] = int(str(raw).strip())
        except ValueError:
            LOG.warning("flavor extra spec %s=%r is not an integer; ignored", key, raw)
    return knobs
