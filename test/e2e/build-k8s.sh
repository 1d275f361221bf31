#!/usr/bin/env bash
# Builds the Kubernetes components (and an embedded etcd) that the end-to-end
# control plane runs, from the Go module proxy, into a cache directory keyed by
# the Kubernetes version and a hash of everything that decides the binaries
# (cmd/go.mod, cmd/go.sum, cmd/*/main.go, the flags below and the Go version):
#
#   ${AKS_FLEX_NODE_TEST_CACHE:-/var/cache/aks-flex-node-test}/k8s-<version>-<hash>/
#     bin/<component>   the binaries
#     build.log         timings of the build that filled it
#     .complete         written last; its presence means bin/ is whole
#
# A complete directory is reused as is. Each binary is renamed into bin/ only
# once fully linked, so an interrupted build resumes where it stopped. A lock
# on the directory keeps two builds of the same thing from running at once.
#
# Usage: build-k8s.sh [--print-dir] [--module NAME] [component...]
#   --print-dir  print the cache directory and exit without building
#   --module     the module under test/e2e to build from (default cmd, the
#                control plane's; cmd-1.34 is the previous minor's kubelet)
#   component    build only these (default: all); .complete needs all
# The last line on stdout is the bin directory; progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

print_dir=false
module=cmd
args=()
while [[ $# -gt 0 ]]; do
	case "$1" in
	--module)
		module="${2:-}"
		shift 2 || true
		;;
	*)
		args+=("$1")
		shift
		;;
	esac
done
if [[ ! "${module}" =~ ^cmd(-[0-9.]+)?$ || ! -f "${here}/${module}/go.mod" ]]; then
	echo "build-k8s.sh: unknown module '${module}' (no ${here}/${module}/go.mod)" >&2
	exit 2
fi
# The binaries are their own module, pinned as k8s.io/kubernetes pins them.
cd "${here}/${module}"

# Every component the module has a main for.
all_components=()
for c in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kube-proxy; do
	if [[ -f "${c}/main.go" ]]; then
		all_components+=("${c}")
	fi
done

components=()
for arg in "${args[@]+"${args[@]}"}"; do
	case "${arg}" in
	--print-dir) print_dir=true ;;
	-*)
		echo "build-k8s.sh: unknown flag ${arg}" >&2
		exit 2
		;;
	*)
		if [[ ! -f "${arg}/main.go" ]]; then
			echo "build-k8s.sh: unknown component ${arg} (no ${here}/cmd/${arg}/main.go)" >&2
			exit 2
		fi
		components+=("${arg}")
		;;
	esac
done
if [[ ${#components[@]} -eq 0 ]]; then
	components=("${all_components[@]}")
fi

# The version comes from go.mod so there is one place to change it.
k8s_version="$(awk '$1 == "k8s.io/kubernetes" && $2 ~ /^v/ { print $2; exit }' go.mod)"
if [[ ! "${k8s_version}" =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]]; then
	echo "build-k8s.sh: cannot read the k8s.io/kubernetes version from ${here}/cmd/go.mod (got '${k8s_version}')" >&2
	exit 1
fi
k8s_major="${BASH_REMATCH[1]}"
k8s_minor="${BASH_REMATCH[2]}"

# Version checks (kubelet skew, kubectl, discovery) read these.
ldflags="-s -w"
ldflags+=" -X k8s.io/component-base/version.gitVersion=${k8s_version}"
ldflags+=" -X k8s.io/component-base/version.gitMajor=${k8s_major}"
ldflags+=" -X k8s.io/component-base/version.gitMinor=${k8s_minor}"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"
ldflags+=" -X k8s.io/client-go/pkg/version.gitVersion=${k8s_version}"
ldflags+=" -X k8s.io/client-go/pkg/version.gitMajor=${k8s_major}"
ldflags+=" -X k8s.io/client-go/pkg/version.gitMinor=${k8s_minor}"
# Static binaries: the kubelet is copied into test machines.
build_env=(CGO_ENABLED=0 GOOS=linux "GOARCH=$(go env GOARCH)")
go_version="$(go env GOVERSION)"

key="$(
	{
		printf '%s\n' "${ldflags}" "${build_env[*]}" "${go_version}"
		cat go.mod go.sum
		for c in "${all_components[@]}"; do
			printf '== %s\n' "${c}"
			cat "${c}/main.go"
		done
	} | sha256sum | cut -c1-12
)"

cache_root="${AKS_FLEX_NODE_TEST_CACHE:-/var/cache/aks-flex-node-test}"
dir="${cache_root}/k8s-${k8s_version}-${key}"
bin="${dir}/bin"

if [[ "${print_dir}" == true ]]; then
	echo "${dir}"
	exit 0
fi

if [[ -f "${dir}/.complete" ]]; then
	echo "build-k8s.sh: reusing ${dir}" >&2
	echo "${bin}"
	exit 0
fi

mkdir -p "${bin}"
exec 9>"${dir}/.lock"
if ! flock -n 9; then
	echo "build-k8s.sh: another build holds ${dir}/.lock; waiting" >&2
	flock 9
fi

log="${dir}/build.log"
say() {
	echo "build-k8s.sh: $*" | tee -a "${log}" >&2
}

say "k8s ${k8s_version}, ${go_version}, ${build_env[*]}, into ${bin}"
total_start="$(date +%s)"
for c in "${components[@]}"; do
	if [[ -x "${bin}/${c}" ]]; then
		say "${c}: present"
		continue
	fi
	start="$(date +%s)"
	say "${c}: building"
	env "${build_env[@]}" go build -trimpath -ldflags "${ldflags}" -o "${bin}/.${c}.tmp" "./${c}"
	mv -f "${bin}/.${c}.tmp" "${bin}/${c}"
	say "${c}: built in $(($(date +%s) - start))s ($(du -h "${bin}/${c}" | cut -f1))"
done
say "total $(($(date +%s) - total_start))s"

missing=()
for c in "${all_components[@]}"; do
	[[ -x "${bin}/${c}" ]] || missing+=("${c}")
done
if [[ ${#missing[@]} -eq 0 ]]; then
	date -u +%Y-%m-%dT%H:%M:%SZ >"${dir}/.complete"
	say "complete"
else
	say "not complete yet, missing: ${missing[*]}"
fi
echo "${bin}"
