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

It also records who owns the instance (``LibvirtConfigGuestMetaNovaOwner``)::

      <nova:owner>
        <nova:user uuid="...">alice</nova:user>
        <nova:project uuid="8d6f...">web-team</nova:project>
      </nova:owner>

Three things come out of it:

* the project that owns the instance (:func:`owner_project`): the label that
  lets an operator tell whose VM a metric or a board entry is about;
* the ``resex:*`` extra specs: the VM's SLA (:func:`resex_libvirt.sla.parse`);
* the ``quota:cpu_*`` extra specs: what Nova itself wrote into ``<cputune>``
  (``LibvirtDriver._update_guest_cputune``: ``quota:cpu_shares`` to
  ``<shares>``, ``quota:cpu_quota``/``quota:cpu_period`` to the per-vCPU
  ``<quota>``/``<period>``), the VM's true scheduler settings whatever a
  live domain carries (:func:`flavor_knobs`).
"""

import dataclasses
import logging
import re
import typing

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


#: Longest project ID or name kept (Keystone's own column bounds: 64 and 64 characters).
MAX_PROJECT_CHARS = 64
_PROJECT_ID = re.compile(r"[A-Za-z0-9_-]+")


class NovaProject(typing.NamedTuple):
    """The project that owns a Nova instance: Keystone's ID and, if Nova wrote it, its name."""

    uuid: str
    name: str | None = None


def owner_project(root):
    """The :class:`NovaProject` of ``<nova:owner>/<nova:project>`` in a parsed domain, or ``None``.

    ``None`` when the domain has no owner, or a project ID that is empty,
    too long or not made of letters, digits, ``-`` and ``_`` (Keystone IDs
    are 32 hexadecimal digits, some deployments write UUIDs): the ID becomes
    a Prometheus label and a board field, so anything else in it is refused
    rather than carried. A name that is blank or too long is left out.
    """
    project = root.find("metadata/%s/%s/%s" % (_q("instance"), _q("owner"), _q("project")))
    if project is None:
        return None
    uuid = (project.get("uuid") or "").strip()
    if not uuid or len(uuid) > MAX_PROJECT_CHARS or not _PROJECT_ID.fullmatch(uuid):
        return None
    name = (project.text or "").strip()
    return NovaProject(uuid, name if name and len(name) <= MAX_PROJECT_CHARS else None)


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
