#!/bin/sh
# systemd-nspawn mounts the cgroup v1 hierarchies read-only in the machine;
# containerd and the kubelet create cgroups there, so make them writable.
set -eu

# /proc/self/mountinfo: id parent major:minor root mountpoint options
# [optional fields...] - fstype source superoptions
read_only_cgroup_mounts() {
	while IFS= read -r line; do
		rest=${line#* * * * }
		mnt=${rest%% *}
		rest=${rest#* }
		opts=${rest%% *}
		fstype=${line#* - }
		fstype=${fstype%% *}
		case ",$opts," in
		*,ro,*) ;;
		*) continue ;;
		esac
		case "$mnt" in
		/sys/fs/cgroup)
			if [ "$fstype" = tmpfs ]; then
				printf '%s\n' "$mnt"
			fi
			;;
		/sys/fs/cgroup/*/*) ;;
		/sys/fs/cgroup/*)
			case "$fstype" in
			cgroup | cgroup2) printf '%s\n' "$mnt" ;;
			esac
			;;
		esac
	done </proc/self/mountinfo
	return 0
}

mounts=$(read_only_cgroup_mounts)
for mnt in $mounts; do
	echo "remounting $mnt read-write"
	mount -o remount,bind,rw "$mnt"
done
