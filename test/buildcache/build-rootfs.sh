#!/usr/bin/env bash
# build-rootfs.sh OUT_DIR
# build-rootfs.sh --print-mirror
#
# Builds a minimal Debian root file system that boots with
# `systemd-nspawn --boot`: debootstrap's minbase plus the packages asked for,
# configured for a container (empty machine-id, no hostname or DNS of the
# build machine, a persistent journal, units that hang or do maintenance in a
# container masked). It is the one builder of the test hosts' tree
# (test/aclhost) and of the worker machine's image (test/fixtures); the Go
# package next to it (test/buildcache) runs it into its cache.
#
# Environment:
#   ROOTFS_PACKAGES  comma-separated packages on top of minbase (required)
#   ROOTFS_MASK      space-separated units to mask besides the common ones
#   ROOTFS_SUITE     Debian suite (default: bookworm)
#   ROOTFS_MIRROR    Debian archive URL (default: the one apt on this machine
#                    uses for ROOTFS_SUITE; see --print-mirror)
#
# --print-mirror prints the archive the build would use and exits.
#
# OUT_DIR must not exist or be empty. On failure anything debootstrap mounted
# under OUT_DIR is unmounted; the partial tree is left for the caller to remove.
set -euo pipefail

die() {
	echo "build-rootfs: $*" >&2
	exit 1
}

suite=${ROOTFS_SUITE:-bookworm}

# apt_source_files names where apt reads its sources on this machine, as apt
# itself resolves them (Dir::Etc and friends, APT_CONFIG).
apt_source_files() {
	local SL='' SP=''
	eval "$(apt-config shell SL Dir::Etc::sourcelist/f SP Dir::Etc::sourceparts/d)"
	echo "${SL:-/etc/apt/sources.list}, ${SP:-/etc/apt/sources.list.d/}*.list and ${SP:-/etc/apt/sources.list.d/}*.sources"
}

# detect_mirror prints the archive apt is configured to fetch $suite's main
# component from. apt parses its own sources (one-line .list files and deb822
# .sources alike, honouring Enabled: no), so this needs no knowledge of any
# mirror; a machine that may only reach its own mirror builds from that one.
detect_mirror() {
	command -v apt-get >/dev/null || die "apt-get not found: cannot read this machine's apt sources; set ROOTFS_MIRROR"
	local site
	# shellcheck disable=SC2016 # $(...) are apt-get's format fields, not the shell's
	site=$(apt-get indextargets --no-release-info --format '$(SITE) $(RELEASE) $(TARGET_OF) $(COMPONENT)' |
		awk -v suite="$suite" '$2 == suite && $3 == "deb" && $4 == "main" { print $1; exit }')
	[[ -n $site ]] || die "no apt source for suite $suite (type deb, component main) in $(apt_source_files); add one there or set ROOTFS_MIRROR"
	echo "${site%/}"
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

if [[ ${1:-} == --print-mirror ]]; then
	mirror=${ROOTFS_MIRROR:-$(detect_mirror)}
	echo "$mirror"
	exit 0
fi
[[ $# -eq 1 ]] || die "usage: $0 OUT_DIR | --print-mirror"
out=$1
[[ -n ${ROOTFS_PACKAGES:-} ]] || die "ROOTFS_PACKAGES is empty: name the packages to install on top of minbase"
packages=$ROOTFS_PACKAGES
read -r -a extra_masked <<<"${ROOTFS_MASK:-}"
[[ $(id -u) -eq 0 ]] || die "must run as root"
command -v debootstrap >/dev/null || die "debootstrap not found (apt-get install debootstrap)"
if [[ -e $out ]] && [[ -n $(ls -A "$out") ]]; then
	die "$out exists and is not empty"
fi
mirror=${ROOTFS_MIRROR:-$(detect_mirror)}
mkdir -p "$out"
out=$(realpath "$out")

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

# The machine's name comes from nspawn (--machine=); debootstrap copied the
# build machine's name and DNS settings, neither of which belongs in a test
# tree: test hosts and machines only talk to addresses the test sets up.
rm -f "$out/etc/hostname"
echo "# no DNS: this tree only talks to addresses its test sets up" >"$out/etc/resolv.conf"
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$out/etc/hosts"

# Units that hang or fail in a container, or do periodic maintenance that
# would write to the tree while a test is comparing it.
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
	"${extra_masked[@]}"
)
for unit in "${masked[@]}"; do
	ln -sfn /dev/null "$out/etc/systemd/system/$unit"
done

# A persistent journal can be read from outside (journalctl -D) after the
# machine was killed, which is when a failing test needs it most.
mkdir -p "$out/etc/systemd/journald.conf.d" "$out/var/log/journal"
cat >"$out/etc/systemd/journald.conf.d/10-test-rootfs.conf" <<'CONF'
[Journal]
Storage=persistent
SystemMaxUse=64M
CONF

# Keep the tree small: nothing can be installed from a cache that is not
# there, and nobody reads the documentation of a test tree.
rm -rf "$out"/var/cache/apt/archives/*.deb "$out"/var/cache/apt/*.bin "$out"/var/lib/apt/lists/*
rm -rf "$out"/var/log/*.log "$out"/var/log/apt/* "$out/var/cache/debconf/"*-old
rm -rf "$out"/usr/share/doc/* "$out"/usr/share/man/* "$out"/usr/share/info/*
# /run is a tmpfs in the booted machine; what the build left there is noise.
rm -rf "${out:?}"/run/*

echo "build-rootfs: done: $out"
