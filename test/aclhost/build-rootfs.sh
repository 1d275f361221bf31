#!/usr/bin/env bash
# build-rootfs.sh OUT_DIR
#
# Builds the Debian bookworm root file system of the "ACL-like test host": a
# minimal systemd host that boots with `systemd-nspawn --boot` and reaches
# multi-user.target. The ACL specifics (os-release, no package manager,
# read-only /usr) are applied per variant by the Go package next to this
# script, on top of this tree, so one build serves both variants.
#
# Environment:
#   ACLHOST_SUITE     Debian suite (default: bookworm)
#   ACLHOST_MIRROR    Debian mirror (default: the one apt on this machine uses)
#   ACLHOST_PACKAGES  comma-separated packages to include (default: below)
#
# OUT_DIR must not exist or be empty. On failure anything debootstrap mounted
# under OUT_DIR is unmounted; the partial tree is left for the caller to remove.
set -euo pipefail

default_packages=(
	systemd systemd-sysv dbus systemd-container
	iproute2 util-linux mount kmod procps
	iptables nftables ca-certificates curl coreutils
)

die() {
	echo "build-rootfs: $*" >&2
	exit 1
}

# detect_mirror prints the first main Debian archive URI apt is configured
# with (deb822 .sources or one-line sources.list), skipping the security
# archive, so the build uses whatever mirror this machine is allowed to reach.
detect_mirror() {
	local f uri
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -r $f ]] || continue
		while read -r uri; do
			case $uri in
			*debian-security*) ;;
			*/debian | */debian/)
				echo "${uri%/}"
				return 0
				;;
			esac
		done < <(awk 'tolower($1) == "uris:" { for (i = 2; i <= NF; i++) print $i }' "$f")
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -r $f ]] || continue
		uri=$(awk '$1 == "deb" && $0 !~ /debian-security/ {
			for (i = 2; i <= NF; i++) if ($i ~ /^https?:\/\/.*\/debian\/?$/) { print $i; exit }
		}' "$f")
		if [[ -n $uri ]]; then
			echo "${uri%/}"
			return 0
		fi
	done
	echo "http://deb.debian.org/debian"
}

# unmount_below unmounts, deepest first, every mount point at or under $1.
unmount_below() {
	local root=$1 target
	[[ -d $root ]] || return 0
	root=$(realpath "$root")
	while read -r target; do
		case $target in
		"$root" | "$root"/*) umount -l "$target" || true ;;
		esac
	done < <(awk '{ print $5 }' /proc/self/mountinfo | sort -r)
}

[[ $# -eq 1 ]] || die "usage: $0 OUT_DIR"
out=$1
[[ $(id -u) -eq 0 ]] || die "must run as root"
command -v debootstrap >/dev/null || die "debootstrap not found (apt-get install debootstrap)"
if [[ -e $out ]] && [[ -n $(ls -A "$out") ]]; then
	die "$out exists and is not empty"
fi
mkdir -p "$out"
out=$(realpath "$out")

suite=${ACLHOST_SUITE:-bookworm}
mirror=${ACLHOST_MIRROR:-$(detect_mirror)}
if [[ -n ${ACLHOST_PACKAGES:-} ]]; then
	packages=$ACLHOST_PACKAGES
else
	packages=$(
		IFS=,
		echo "${default_packages[*]}"
	)
fi

trap 'unmount_below "$out"' EXIT

echo "build-rootfs: debootstrap $suite from $mirror into $out"
echo "build-rootfs: packages: $packages"
debootstrap --variant=minbase --merged-usr --components=main \
	--include="$packages" "$suite" "$out" "$mirror"

echo "build-rootfs: configuring"

# An empty machine-id lets systemd use the ID nspawn passes in (a fresh one per
# boot) without treating the boot as a first boot that prompts on a console.
: >"$out/etc/machine-id"
rm -f "$out/var/lib/dbus/machine-id"
ln -s /etc/machine-id "$out/var/lib/dbus/machine-id"

# The container manager sets the hostname (--machine=); debootstrap copied the
# build machine's name and DNS settings, neither of which belongs in a test host.
rm -f "$out/etc/hostname"
echo "# test hosts have no DNS; they only talk to addresses the test sets up" >"$out/etc/resolv.conf"
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$out/etc/hosts"

# Units that either hang or fail in a container, or do periodic maintenance
# that would write to the tree while a test is comparing it.
masked=(
	systemd-networkd-wait-online.service
	systemd-firstboot.service
	console-getty.service
	getty@.service
	apt-daily.timer apt-daily-upgrade.timer
	apt-daily.service apt-daily-upgrade.service
	dpkg-db-backup.timer dpkg-db-backup.service
	e2scrub_all.timer e2scrub_reap.service
	fstrim.timer
	systemd-tmpfiles-clean.timer
)
for unit in "${masked[@]}"; do
	ln -sfn /dev/null "$out/etc/systemd/system/$unit"
done

# A persistent journal can be read from outside (journalctl -D) after the host
# was killed, which is when a failing test needs it most.
mkdir -p "$out/etc/systemd/journald.conf.d" "$out/var/log/journal"
cat >"$out/etc/systemd/journald.conf.d/10-aclhost.conf" <<'EOF'
[Journal]
Storage=persistent
SystemMaxUse=64M
EOF

# Keep the image small: nothing can be installed from a cache that is not there.
rm -rf "$out"/var/cache/apt/archives/*.deb "$out"/var/lib/apt/lists/*
rm -rf "$out"/var/log/*.log "$out"/var/log/apt/* "$out/var/cache/debconf/"*-old

echo "build-rootfs: done: $out"
