"""Every name an OCI (CPU) platform has, in one table: the OCI name and ${TARGETARCH}, the Debian architecture, the
machine of wheel tags, uv's --python-platform, the QEMU user-mode binfmt entry, the host's `uname -m` and the ELF
e_machine. Nothing else in imagebuild/ spells an arch name: it asks `platform(oci)`, `for_host(machine)` or
`for_architecture(arch)` and reads the answer off the `OciPlatform`.

Where each name comes from:
- OCI os/architecture and the default variant a pull assumes (`linux/arm64` is `linux/arm64/v8`): containerd's
  platforms.Normalize (containerd/platforms@v0.2.1:platforms.go, Normalize); ${TARGETARCH} is the architecture.
- Debian architecture: what `dpkg --print-architecture` says and debootstrap's `--arch` takes (amd64, arm64).
- wheel machine: the last part of a wheel's platform tag (`manylinux_2_28_x86_64`, PEP 600), `uname -m` on Linux.
- uv's --python-platform: `<machine>-<manylinux policy>` (astral-sh/uv@8c7076869e90200b662a1ff92de51c5d6debfa66:
  crates/uv-configuration/src/target_triple.rs:80 `x86_64-manylinux_2_28`, :145 `aarch64-manylinux_2_28`).
- QEMU: the binfmt_misc entry qemu-user-static registers, `qemu-<machine>` (scripts/setup.sh checks
  /proc/sys/fs/binfmt_misc/qemu-aarch64).
- ELF e_machine: torvalds/linux@84a73014d86fd660822a20c032625e3afe99ca58:include/uapi/linux/elf-em.h:30
  (EM_X86_64 62) and :40 (EM_AARCH64 183).
- host names: Linux's `uname -m` is the wheel machine; macOS and Windows call the same CPUs arm64 and AMD64, so a
  host is also known by its OCI architecture.
"""

from __future__ import annotations

from dataclasses import dataclass

from imagebuild.errors import ConfigError


@dataclass(frozen=True)
class OciPlatform:
    """One OCI (CPU) platform and every name it has elsewhere."""

    os: str  # OCI os: linux
    architecture: str  # OCI architecture, ${TARGETARCH}, GOARCH: amd64, arm64
    default_variant: str  # the variant a pull assumes when an index entry names none (containerd's Normalize)
    debian: str  # Debian architecture (dpkg, debootstrap --arch)
    machine: str  # `uname -m` on Linux, the machine of wheel platform tags: x86_64, aarch64
    elf_machine: int  # ELF header e_machine of its binaries

    @property
    def oci(self) -> str:
        """linux/amd64: the matrix's, BuildKit's and the index's name."""
        return f"{self.os}/{self.architecture}"

    @property
    def slug(self) -> str:
        """linux-arm64: directory, tag and file names."""
        return f"{self.os}-{self.architecture}"

    @property
    def qemu(self) -> str:
        """qemu-aarch64: the binfmt_misc entry (and user-mode emulator) that runs its binaries on another host."""
        return f"qemu-{self.machine}"

    @property
    def host_names(self) -> tuple[str, ...]:
        """What a host of this CPU reports as its machine (lowercased): Linux's `uname -m`, and the OCI name."""
        return (self.machine, self.architecture)

    def wheel_tag(self, policy: str) -> str:
        """manylinux_2_28 -> manylinux_2_28_x86_64: the platform tag of a wheel for it under a manylinux policy."""
        return f"{policy}_{self.machine}"

    def uv_platform(self, policy: str) -> str:
        """manylinux_2_28 -> x86_64-manylinux_2_28: uv's --python-platform for it under a manylinux policy."""
        return f"{self.machine}-{policy}"


AMD64 = OciPlatform("linux", "amd64", "v1", "amd64", "x86_64", 62)
ARM64 = OciPlatform("linux", "arm64", "v8", "arm64", "aarch64", 183)
KNOWN: tuple[OciPlatform, ...] = (AMD64, ARM64)
BASELINE = AMD64  # the matrix's values are this platform's; `oci_platforms:` says what differs on the others


def known_names() -> str:
    """linux/amd64, linux/arm64: for messages."""
    return ", ".join(p.oci for p in KNOWN)


def schema_pattern() -> str:
    """The regular expression of a known OCI platform name (the matrix schema's `oci_platforms` keys)."""
    return f"linux/(?:{'|'.join(p.architecture for p in KNOWN)})"


def platform(oci: str) -> OciPlatform:
    """linux/arm64 (or linux/arm64/v8) -> its OciPlatform; a ConfigError names the known ones."""
    parts = oci.split("/")
    found = next((p for p in KNOWN if parts[:2] == [p.os, p.architecture]), None)
    if found is None or len(parts) > 3:
        raise ConfigError(f"OCI platform {oci}: not a known platform (known: {known_names()})")
    return found


def for_architecture(architecture: str) -> OciPlatform | None:
    """amd64 -> linux/amd64 (an image config's or index entry's `architecture`); None when unknown."""
    return next((p for p in KNOWN if p.architecture == architecture), None)


def for_host(machine: str) -> OciPlatform | None:
    """The platform a host runs natively, from its machine name (`uname -m`, platform.machine()); None: unknown."""
    name = machine.lower()
    return next((p for p in KNOWN if name in p.host_names), None)


def default_variant(architecture: str) -> str:
    """The variant a pull assumes for an architecture ("" when none): arm64 -> v8."""
    found = for_architecture(architecture)
    return found.default_variant if found else ""
