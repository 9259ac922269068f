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


"""The unit sandbox: a unit file read as systemd reads it, and run under it as root."""

import errno
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import unittest

from tests.cloud import cloud as cloud_mod
from tests.cloud import unit_sandbox as sandbox

SHIPPED = cloud_mod.AGENT_UNIT
#: A Python the shipped unit does not hide (ProtectHome=).
PYTHON = "/usr/bin/python3"

UNIT = """# a comment
[Unit]
Description=not the service's
ReadWritePaths=/ignored

[Service]
ExecStart=/usr/bin/agent --config-file /etc/a.conf
NoNewPrivileges=yes
ProtectSystem=strict
ReadWritePaths=-/run/libvirt \\
    /srv/state
; another comment
StateDirectory=resex
RuntimeDirectory=resex
PrivateTmp=yes
ProtectHome=yes
CapabilityBoundingSet=
UMask=0022
"""


def exists_except(*missing):
    return lambda path: path not in missing


class ParseTest(unittest.TestCase):

    def test_only_the_service_section_with_comments_and_continuations(self):
        directives = sandbox.parse(UNIT)
        self.assertNotIn("Description", directives)
        self.assertEqual(len(directives["ReadWritePaths"]), 1)
        unit = sandbox.Unit(directives)
        self.assertEqual(unit.items("ReadWritePaths"), ["-/run/libvirt", "/srv/state"])
        self.assertTrue(unit.flag("NoNewPrivileges"))
        self.assertFalse(unit.flag("PrivateDevices"))
        self.assertEqual(unit.exec_start(), ["/usr/bin/agent", "--config-file", "/etc/a.conf"])

    def test_a_drop_in_overrides_a_value_and_an_empty_assignment_resets_a_list(self):
        directives = sandbox.parse(UNIT)
        sandbox.parse("[Service]\nStateDirectory=\nProtectHome=tmpfs\nExecStart=\n"
                      "ExecStart=-/opt/agent --check\nReadWritePaths=/more\n", directives)
        unit = sandbox.Unit(directives)
        self.assertEqual(unit.items("StateDirectory"), [])
        self.assertEqual(unit.items("RuntimeDirectory"), ["resex"])
        self.assertEqual(unit.value("ProtectHome"), "tmpfs")
        self.assertEqual(unit.items("ReadWritePaths"), ["-/run/libvirt", "/srv/state", "/more"])
        self.assertEqual(unit.exec_start(), ["/opt/agent", "--check"])

    def test_capability_bounding_set_as_systemd_adds_it_up(self):
        def caps(*lines):
            return sandbox.Unit({"CapabilityBoundingSet": list(lines)}).capabilities()
        self.assertIsNone(sandbox.Unit({}).capabilities())
        self.assertEqual(caps(""), set())
        self.assertEqual(caps("CAP_DAC_OVERRIDE", "cap_chown CAP_KILL"),
                         {"dac_override", "chown", "kill"})
        self.assertEqual(caps("CAP_KILL", ""), set())
        self.assertEqual(caps("~CAP_SYS_ADMIN"), set(sandbox.CAPABILITIES) - {"sys_admin"})
        with self.assertRaises(sandbox.UnitError):
            caps("CAP_NOPE")
        self.assertEqual(sandbox.capability_mask({"chown", "dac_override"}), 0x3)

    def test_the_shipped_unit_drops_what_it_says_and_names_what_is_not_emulated(self):
        unit = sandbox.Unit.load(SHIPPED)
        with open(SHIPPED) as f:
            text = f.read()
        bounding = [line for line in text.splitlines()
                    if line.startswith("CapabilityBoundingSet=")][-1].split("=", 1)[1]
        self.assertEqual(unit.capabilities(),
                         {sandbox._cap(w) for w in bounding.split()})
        self.assertTrue(unit.flag("NoNewPrivileges"))
        self.assertEqual(unit.value("ProtectSystem"), "strict")
        self.assertIn("RestrictNamespaces", unit.unemulated())
        self.assertIn("LockPersonality", unit.unemulated())
        self.assertNotIn("RestrictAddressFamilies", unit.unemulated())
        self.assertNotIn("ProtectSystem", unit.unemulated())
        # Every hardening directive of the unit is either emulated or said not to be.
        known = set(sandbox.EMULATED) | set(sandbox.NOT_EMULATED)
        hardening = {k for k in unit.directives
                     if k.startswith(("Protect", "Private", "Restrict", "Capability",
                                      "NoNew", "ReadWrite", "Lock", "SystemCall", "Memory"))}
        self.assertEqual(hardening - known, set())


class ArgvTest(unittest.TestCase):

    def test_setpriv_clears_every_set_but_the_bounding_sets_capabilities(self):
        unit = sandbox.Unit(sandbox.parse(UNIT))
        self.assertEqual(sandbox.setpriv_argv(unit, ["agent", "-x"]), [
            "setpriv", "--no-new-privs", "--bounding-set", "-all", "--inh-caps", "-all",
            "--ambient-caps", "-all", "--", "agent", "-x"])
        sandbox.parse("[Service]\nCapabilityBoundingSet=CAP_DAC_OVERRIDE\n"
                      "NoNewPrivileges=no\n", unit.directives)
        self.assertEqual(sandbox.setpriv_argv(unit, ["agent"])[:3],
                         ["setpriv", "--bounding-set", "-all,+dac_override"])

    def test_supplementary_groups(self):
        unit = sandbox.Unit(sandbox.parse("[Service]\nSupplementaryGroups=libvirt-qemu kvm\n"))
        self.assertEqual(sandbox.setpriv_argv(unit, ["a"])[:3],
                         ["setpriv", "--groups", "libvirt-qemu,kvm"])

    def test_no_bounding_set_leaves_it_alone(self):
        argv = sandbox.setpriv_argv(sandbox.Unit({}), ["a"])
        self.assertNotIn("--bounding-set", argv)
        self.assertNotIn("--no-new-privs", argv)


class PlanTest(unittest.TestCase):

    def plan(self, text, exists=exists_except()):
        return sandbox.plan(sandbox.Unit(sandbox.parse(text)), exists=exists)

    def test_the_units_paths_writable_and_everything_else_read_only(self):
        steps = self.plan(UNIT, exists_except("/run/libvirt"))
        self.assertEqual(steps[:4], [
            ("mkdir", "/var/lib/resex", 0o755),
            ("bind", "/var/lib/resex", "/var/lib/resex", False),
            ("mkdir", "/run/resex", 0o755), ("bind", "/run/resex", "/run/resex", False)])
        self.assertIn(("tmpfs", "/tmp", 0o1777, False), steps)
        self.assertIn(("tmpfs", "/var/tmp", 0o1777, False), steps)
        for home in sandbox.HOME_PATHS:
            self.assertIn(("inaccessible", home), steps)
        # -/run/libvirt is missing: skipped, as systemd does.
        self.assertIn(("bind", "/srv/state", "/srv/state", False), steps)
        self.assertNotIn(("bind", "/run/libvirt", "/run/libvirt", False), steps)
        readonly = steps[-1]
        self.assertEqual(readonly[:2], ("readonly", ("/",)))
        self.assertEqual(set(readonly[2]), {"/var/lib/resex", "/run/resex", "/tmp", "/var/tmp",
                                            "/srv/state", "/dev", "/proc", "/sys"})

    def test_a_missing_path_without_its_dash_is_an_error(self):
        with self.assertRaises(sandbox.UnitError):
            self.plan(UNIT, exists_except("/srv/state"))

    def test_binds_into_the_private_tmp_and_a_tmpfs_home(self):
        steps = self.plan(UNIT + "ProtectHome=tmpfs\nBindPaths=/var/tmp/cloud/state\n"
                          "BindReadOnlyPaths=/root/.pyenv /srv/a:/opt/b\n")
        self.assertIn(("tmpfs", "/root", 0o755, True), steps)
        tmp = steps.index(("tmpfs", "/var/tmp", 0o1777, False))
        bind = steps.index(("bind", "/var/tmp/cloud/state", "/var/tmp/cloud/state", False))
        self.assertLess(tmp, bind)
        self.assertLess(steps.index(("tmpfs", "/root", 0o755, True)),
                        steps.index(("bind", "/root/.pyenv", "/root/.pyenv", True)))
        self.assertIn(("bind", "/srv/a", "/opt/b", True), steps)
        self.assertIn("/var/tmp/cloud/state", steps[-1][2])
        self.assertNotIn("/root/.pyenv", steps[-1][2])

    def test_kernel_and_devices(self):
        steps = self.plan("[Service]\nPrivateDevices=yes\nProtectKernelTunables=yes\n"
                          "ProtectControlGroups=yes\nProtectKernelLogs=yes\n")
        self.assertEqual(steps[0], ("tmpfs", "/dev", 0o755, False))
        self.assertIn(("bind", "/dev/null", "/dev/null", False), steps)
        self.assertIn(("link", "/dev/fd", "/proc/self/fd"), steps)
        self.assertIn(("bind", "/proc/sys", "/proc/sys", True), steps)
        self.assertIn(("readonly", ("/sys",), ()), steps)
        self.assertIn(("readonly", ("/sys/fs/cgroup",), ()), steps)
        self.assertIn(("inaccessible", "/proc/kmsg"), steps)

    def test_another_user_is_refused(self):
        with self.assertRaises(sandbox.UnitError):
            self.plan("[Service]\nUser=nova\n")

    def test_readonly_targets_and_mountinfo(self):
        text = ("22 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
                "23 22 0:5 / /dev rw,nosuid - devtmpfs udev rw\n"
                "24 22 0:6 / /var/lib/my\\040dir rw,nodev - tmpfs t rw\n"
                "25 22 0:7 / /run/libvirt rw - tmpfs t rw\n"
                "26 25 0:8 / /run/libvirt/x rw - tmpfs t rw\n")
        mounts = sandbox.mountinfo(text)
        self.assertEqual(mounts[2], ("/var/lib/my dir", {"rw", "nodev"}))
        points = [p for p, _ in sandbox.readonly_targets(mounts, ("/",),
                                                         ("/dev", "/run/libvirt"))]
        self.assertEqual(points, ["/", "/var/lib/my dir"])
        self.assertEqual([p for p, _ in sandbox.readonly_targets(mounts, ("/run",), ())],
                         ["/run/libvirt", "/run/libvirt/x"])


def run_bpf(prog, nr, arch=sandbox.AUDIT_ARCH_X86_64, arg0=0):
    """Classic BPF as the kernel runs a seccomp filter, on one system call."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == sandbox.BPF_LD_W_ABS:
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == sandbox.BPF_JEQ_K:
            pc += jt if acc == k else jf
        elif code == sandbox.BPF_JSET_K:
            pc += jt if acc & k else jf
        elif code == sandbox.BPF_RET_K:
            return k
        else:
            raise AssertionError("unknown instruction %r" % (prog[pc],))
        pc += 1


class SeccompTest(unittest.TestCase):

    def program(self, text):
        return sandbox.seccomp_program(sandbox.Unit(sandbox.parse("[Service]\n" + text)),
                                       machine="x86_64")

    def test_the_shipped_units_families_and_native_calls_only(self):
        prog = sandbox.seccomp_program(sandbox.Unit.load(SHIPPED), machine="x86_64")
        refused = sandbox.RET_ERRNO | errno.EAFNOSUPPORT
        for family in (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK):
            self.assertEqual(run_bpf(prog, sandbox.NR_SOCKET, arg0=family), sandbox.RET_ALLOW)
        for family in (socket.AF_PACKET, 31, 0x12345):
            self.assertEqual(run_bpf(prog, sandbox.NR_SOCKET, arg0=family), refused)
        self.assertEqual(run_bpf(prog, 0, arg0=socket.AF_PACKET), sandbox.RET_ALLOW)
        eperm = sandbox.RET_ERRNO | errno.EPERM
        self.assertEqual(run_bpf(prog, 1, arch=0x40000003), eperm)          # i386
        self.assertEqual(run_bpf(prog, sandbox.X32_SYSCALL_BIT | 1), eperm)  # x32

    def test_a_deny_list_and_architectures_alone(self):
        prog = self.program("RestrictAddressFamilies=~AF_PACKET")
        self.assertEqual(run_bpf(prog, sandbox.NR_SOCKET, arg0=socket.AF_PACKET),
                         sandbox.RET_ERRNO | errno.EAFNOSUPPORT)
        self.assertEqual(run_bpf(prog, sandbox.NR_SOCKET, arg0=socket.AF_INET),
                         sandbox.RET_ALLOW)
        self.assertEqual(run_bpf(prog, 1, arch=0x40000003), sandbox.RET_ALLOW)
        prog = self.program("SystemCallArchitectures=native")
        self.assertEqual(run_bpf(prog, sandbox.NR_SOCKET, arg0=socket.AF_PACKET),
                         sandbox.RET_ALLOW)
        self.assertEqual(run_bpf(prog, 1, arch=0x40000003), sandbox.RET_ERRNO | errno.EPERM)

    def test_nothing_to_filter_or_another_machine(self):
        self.assertIsNone(self.program("ProtectSystem=strict"))
        self.assertIsNone(sandbox.seccomp_program(sandbox.Unit.load(SHIPPED), machine="aarch64"))
        with self.assertRaises(sandbox.UnitError):
            self.program("RestrictAddressFamilies=AF_NOPE")


class CloudDropInTest(unittest.TestCase):

    def test_state_in_var_tmp_is_bound_and_python_under_root_opens_a_tmpfs_home(self):
        text = cloud_mod.agent_drop_in(
            writable=["/var/tmp/c/nodes/node1/resex-state", "/srv/run"],
            readable=["/var/tmp/c/nodes/node1/etc", "/work/repo", "/root/.pyenv/v"])
        unit = sandbox.Unit.load(SHIPPED)
        sandbox.parse(text, unit.directives)
        self.assertEqual(unit.items("StateDirectory"), [])
        self.assertEqual(unit.items("BindPaths"), ["/var/tmp/c/nodes/node1/resex-state"])
        self.assertEqual(unit.items("ReadWritePaths"), ["-/run/libvirt", "/srv/run"])
        self.assertEqual(unit.value("ProtectHome"), "tmpfs")
        self.assertEqual(unit.items("BindReadOnlyPaths"),
                         ["/root/.pyenv/v", "/var/tmp/c/nodes/node1/etc"])

    def test_nothing_hidden_nothing_bound(self):
        text = cloud_mod.agent_drop_in(writable=["/srv/state"], readable=["/usr", "/work"])
        self.assertNotIn("ProtectHome", text)
        self.assertNotIn("Bind", text)


@unittest.skipUnless(os.geteuid() == 0, "namespaces and mounts need root")
class SandboxTest(unittest.TestCase):
    """The shipped unit, for real: what a command under it may and may not do."""

    def test_a_command_under_the_shipped_unit(self):
        state = tempfile.mkdtemp(prefix="resex-sandbox-", dir="/var/tmp")
        self.addCleanup(shutil.rmtree, state, True)
        drop_in = os.path.join(state, "drop-in.conf")
        with open(drop_in, "w") as f:
            f.write(cloud_mod.agent_drop_in(writable=[state], readable=[]))
        script = ("grep -E '^(CapBnd|CapEff|NoNewPrivs)' /proc/self/status; umask; "
                  "touch /usr/resex-sandbox-probe 2>&1; touch %s/w && echo state-writable; "
                  "ls -A /tmp | wc -l; echo root-entries:$(ls -A /root 2>/dev/null | wc -l); "
                  "%s -c 'import socket; "
                  "socket.socket(socket.AF_PACKET)' 2>&1 | tail -1" % (state, PYTHON))
        proc = subprocess.run([sys.executable, "-m", "tests.cloud.unit_sandbox", "--unit",
                               SHIPPED, "--drop-in", drop_in, "--", "sh", "-c", script],
                              capture_output=True, text=True, timeout=60,
                              cwd=cloud_mod.ROOT)
        out = proc.stdout
        want = sandbox.capability_mask(sandbox.Unit.load(SHIPPED).capabilities())
        self.assertIn("CapBnd:\t%016x" % want, out, proc.stderr)
        self.assertIn("CapEff:\t%016x" % want, out)
        self.assertIn("NoNewPrivs:\t1", out)
        self.assertIn("\n0022\n", out)
        self.assertIn("Read-only file system", out)
        self.assertIn("state-writable", out)
        self.assertTrue(os.path.exists(os.path.join(state, "w")))
        self.assertIn("\n0\n", out)             # a private, empty /tmp
        self.assertIn("root-entries:0", out)     # ProtectHome: an empty /root
        self.assertFalse(os.path.exists("/usr/resex-sandbox-probe"))
        self.assertIn("[Errno 97] Address family not supported by protocol", out)
        self.assertIn("not emulated: RestrictNamespaces", proc.stderr)
