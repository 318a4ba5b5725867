#!/usr/bin/env bash
# build-image.sh - the guest image of the VM test node (scripts/e2e-vm.sh):
# Debian 12 from Debian packages only (mmdebstrap --mode=unshare: every
# mount stays in a private namespace, nothing on the host is mounted) with
# systemd as PID 1 (cgroup v2), udev, dbus, the cloud kernel and what the
# runtimes need (conmon, iptables, skopeo, libseccomp2, libsqlite3-0), made
# into an ext4 disk image without loop mounts (mkfs.ext4 -d).
#
# Cached in $E2E_CACHE/vm/debian12-<hash>/ (root.img, vmlinuz, initrd.img),
# <hash> being a hash of the recipe (this script and guest/), so a changed
# recipe builds a new image and an unchanged one is reused. Older images
# are removed once a new one is complete. Idempotent, flock-protected.
#
# stdout: the image directory. Logs: stderr.
# Environment: E2E_CACHE (/var/cache/nri-e2e), VM_MIRROR
# (http://deb.debian.org/debian), E2E_SKIP_APT=1.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=scripts/lib-setup.sh
source "$HERE/../lib-setup.sh"
need_root "mmdebstrap and mkfs.ext4 -d keep the image's owners only as root"

E2E_CACHE=${E2E_CACHE:-/var/cache/nri-e2e}
VM_MIRROR=${VM_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
PKGS=(systemd systemd-sysv udev dbus kmod iproute2 procps util-linux mount
	linux-image-cloud-amd64 initramfs-tools busybox-static ca-certificates
	libseccomp2 libsqlite3-0 conmon skopeo iptables curl xz-utils)

want_cmd mmdebstrap mmdebstrap
want_cmd mkfs.ext4 e2fsprogs
want_cmd qemu-system-x86_64 qemu-system-x86
want_cmd qemu-img qemu-utils
install_wanted

# The recipe's hash: the package list, the suite and every file that goes
# into the image.
hash=$( {
	echo "$SUITE ${PKGS[*]}"
	cat "$HERE/build-image.sh" "$HERE"/guest/*
} | sha256sum | cut -c1-12)
DIR=$E2E_CACHE/vm/debian12-$hash
mkdir -p "$E2E_CACHE/vm"
if [ -s "$DIR/root.img" ] && [ -s "$DIR/vmlinuz" ] && [ -s "$DIR/initrd.img" ]; then
	log "guest image $DIR (cached)"
	echo "$DIR"
	exit 0
fi

exec 8>"$E2E_CACHE/vm/.build.lock"
flock 8
if [ -s "$DIR/root.img" ]; then # built by another caller while this one waited
	echo "$DIR"
	exit 0
fi
T0=$SECONDS
BUILD=$(mktemp -d "$E2E_CACHE/vm/build.XXXXXX")
trap 'rm -rf "$BUILD"' EXIT
log "building the guest image (Debian 12, mmdebstrap, about 2-4 min) into $DIR"
pkgs=$(IFS=,; echo "${PKGS[*]}")
# Hooks: hostname, fstab, root without password on the console, the runner
# unit, timers the tests do not want (they would run apt or fstrim midway),
# and the kernel and initrd copied out for -kernel/-initrd.
nice -n 10 mmdebstrap --mode=unshare --variant=minbase --include="$pkgs" \
	--customize-hook='echo nri-vm >"$1/etc/hostname"' \
	--customize-hook='echo "/dev/vda / ext4 rw,noatime 0 1" >"$1/etc/fstab"' \
	--customize-hook='chroot "$1" passwd -d root' \
	--customize-hook="copy-in $HERE/guest/nri-vm-run.service /etc/systemd/system/" \
	--customize-hook="copy-in $HERE/guest/nri-vm-run /usr/local/sbin/" \
	--customize-hook='chroot "$1" systemctl enable nri-vm-run.service' \
	--customize-hook='chroot "$1" systemctl mask systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer man-db.timer' \
	--customize-hook="sync-out /boot $BUILD/boot" \
	"$SUITE" "$BUILD/rootfs.tar" "$VM_MIRROR" >&2 || die "mmdebstrap failed"
log "mmdebstrap done in $((SECONDS - T0))s"
mkdir "$BUILD/rootfs"
tar -C "$BUILD/rootfs" --numeric-owner -xpf "$BUILD/rootfs.tar"
rm -f "$BUILD/rootfs.tar"
truncate -s 6G "$BUILD/root.img"
mkfs.ext4 -q -F -L root -d "$BUILD/rootfs" "$BUILD/root.img" || die "mkfs.ext4 -d failed"
cp "$BUILD"/boot/vmlinuz-* "$BUILD/vmlinuz"
cp "$BUILD"/boot/initrd.img-* "$BUILD/initrd.img"
mkdir -p "$DIR.part"
mv "$BUILD/root.img" "$BUILD/vmlinuz" "$BUILD/initrd.img" "$DIR.part/"
# Older recipes' images: removed now that this one is complete.
find "$E2E_CACHE/vm" -mindepth 1 -maxdepth 1 -type d -name 'debian12-*' ! -name "debian12-$hash*" -exec rm -rf {} +
mv "$DIR.part" "$DIR"
log "guest image built in $((SECONDS - T0))s: $DIR ($(du -sh "$DIR" | cut -f1) allocated)"
echo "$DIR"
