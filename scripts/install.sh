#!/usr/bin/env bash
# Installs the aks-flex-node binary into the layout's bin dir.
#
# Where it goes is declared, never guessed: --install-dir, or the binDir of
# the layout the config declares (agent.hostPrefix), asked of the staged
# binary itself so this script never re-implements the prefix rule. When the
# target cannot work (a read-only /usr on Azure Container Linux) it refuses
# before writing anything and says what to set.
set -euo pipefail

readonly NAME=aks-flex-node
readonly STATE_DIR=/var/lib/aks-flex-node
readonly RECORD="$STATE_DIR/install-record"
readonly DEFAULT_CONFIG=/etc/aks-flex-node/config.json
readonly RELEASE_BASE=https://github.com/Azure/aks-flex-node/releases/download
# A download is at most this many bytes (transport.MaxFile in the binary).
readonly MAX_DOWNLOAD=$((512 * 1024 * 1024))

usage() {
	cat <<EOF
Usage: install.sh [options]

Binary source (one of):
  --binary PATH          install a local file         (AKS_FLEX_NODE_LOCAL_BINARY)
  --version VERSION      download a release           (AKS_FLEX_NODE_VERSION)
  --download-url URL     download from URL            (AKS_FLEX_NODE_DOWNLOAD_URL)
                         https; plain http only from localhost/127.0.0.0/8/[::1]
Checksum (required; mismatch installs nothing):
  --sha256 HEX           expected SHA-256             (AKS_FLEX_NODE_SHA256)
                         default: PATH.sha256 or URL.sha256
Target:
  --install-dir DIR      /usr/local/bin or <prefix>/bin (AKS_FLEX_NODE_INSTALL_DIR)
  --config PATH          config whose layout gives the bin dir (default $DEFAULT_CONFIG)
Other:
  --with-azure-cli       also install the Azure CLI (needs a package manager)
  -h, --help             this help
EOF
}

die() {
	echo "install.sh: $*" >&2
	exit 1
}
note() { echo "install.sh: $*"; }

# The transport policy the binary applies to everything it fetches
# (internal/transport), here for the binary itself, which cannot be asked
# before it is downloaded: https; plain http only from a loopback host,
# never proxied; redirects only to https; bounded in time (connect 30 s, no
# data for 60 s, 60 min overall) and size.
curl_opts=()
check_url() {
	local u="$1" authority host
	case "$u" in
	https://*)
		curl_opts=(--proto "=https" --proto-redir "=https")
		return 0
		;;
	http://*) ;;
	*) die "$u: only https URLs are downloaded (plain http only from a loopback host)" ;;
	esac
	authority=${u#http://}
	authority=${authority%%[/?#]*}
	authority=${authority##*@}
	case "$authority" in
	\[*)
		host=${authority#[}
		host=${host%%]*}
		;;
	*) host=${authority%%:*} ;;
	esac
	host=${host,,}
	if [ "$host" = localhost ] || [ "$host" = ::1 ] || [[ $host =~ ^127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$ ]]; then
		curl_opts=(--proto "=http" --proto-redir "=https" --noproxy '*')
		return 0
	fi
	die "$u: plain http is downloaded only from a loopback host (localhost, 127.0.0.0/8, [::1]); use an https URL"
}

# fetch URL DEST: download under the policy check_url set. --max-filesize
# refuses an announced size up front; head stops a body that never ends.
# Retries here, not curl's --retry, so a retry starts DEST afresh; a
# refused protocol (1) or an HTTP error (22) is not retried.
fetch() {
	local url="$1" dest="$2" rc=0 attempt
	for attempt in 1 2 3; do
		rc=0
		curl -fsSL "${curl_opts[@]}" --connect-timeout 30 --speed-limit 1 --speed-time 60 --max-time 3600 \
			--max-filesize "$MAX_DOWNLOAD" "$url" | head -c "$((MAX_DOWNLOAD + 1))" >"$dest" || rc=$?
		if [ "$rc" -eq 63 ] || [ "$(wc -c <"$dest")" -gt "$MAX_DOWNLOAD" ]; then
			die "$url is larger than $MAX_DOWNLOAD bytes, more than an aks-flex-node binary can be; nothing was installed"
		fi
		case "$rc" in
		0 | 1 | 22) return "$rc" ;;
		esac
		sleep "$attempt"
	done
	return "$rc"
}

binary="${AKS_FLEX_NODE_LOCAL_BINARY:-}"
version="${AKS_FLEX_NODE_VERSION:-}"
url="${AKS_FLEX_NODE_DOWNLOAD_URL:-}"
sha="${AKS_FLEX_NODE_SHA256:-}"
install_dir="${AKS_FLEX_NODE_INSTALL_DIR:-}"
config="$DEFAULT_CONFIG"
config_given=false
azure_cli=false

while [ $# -gt 0 ]; do
	case "$1" in
	--binary) binary="${2:?--binary needs a path}"; shift 2 ;;
	--version) version="${2:?--version needs a value}"; shift 2 ;;
	--download-url) url="${2:?--download-url needs a URL}"; shift 2 ;;
	--sha256) sha="${2:?--sha256 needs a value}"; shift 2 ;;
	--install-dir) install_dir="${2:?--install-dir needs a directory}"; shift 2 ;;
	--config) config="${2:?--config needs a path}"; config_given=true; shift 2 ;;
	--with-azure-cli) azure_cli=true; shift ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; echo >&2; die "unknown argument: $1" ;;
	esac
done

[ "$(id -u)" -eq 0 ] || die "must run as root"

arch=$(uname -m)
case "$arch" in
x86_64) arch=amd64 ;;
aarch64) arch=arm64 ;;
*) die "unsupported architecture $arch" ;;
esac

# Stage the binary in a private temp dir. Nothing outside it is written
# until every check has passed. /var/tmp first: /tmp is often noexec.
stage=""
for base in /var/tmp "${TMPDIR:-/tmp}"; do
	if stage=$(mktemp -d "$base/aks-flex-node-install.XXXXXX" 2>/dev/null); then
		break
	fi
done
[ -n "$stage" ] || die "cannot create a staging directory in /var/tmp or ${TMPDIR:-/tmp}"
trap 'rm -rf "$stage"' EXIT
staged="$stage/$NAME"

if [ -n "$binary" ]; then
	[ -f "$binary" ] || die "--binary $binary: no such file"
	cp "$binary" "$staged"
	if [ -z "$sha" ] && [ -f "$binary.sha256" ]; then
		sha=$(awk '{print $1; exit}' "$binary.sha256")
	fi
	source_desc="$binary"
else
	if [ -z "$url" ]; then
		[ -n "$version" ] || die "no binary source: give --binary PATH, --version VERSION or --download-url URL"
		url="$RELEASE_BASE/$version/$NAME-linux-$arch"
	fi
	check_url "$url"
	command -v curl >/dev/null || die "curl is needed to download $url"
	fetch "$url" "$staged" || die "download $url failed"
	if [ -z "$sha" ]; then
		fetch "$url.sha256" "$stage/sum" || die "no --sha256 given and $url.sha256 could not be downloaded"
		sha=$(awk '{print $1; exit}' "$stage/sum")
		note "checksum from $url.sha256, the server the binary came from: it catches a damaged download, not a compromised server (pass --sha256 from another source for that)"
	fi
	source_desc="$url"
fi

[ -n "$sha" ] || die "no checksum for $source_desc: give --sha256 HEX (sha256sum prints it) or put it in $source_desc.sha256"
sha=$(printf '%s' "$sha" | tr 'A-F' 'a-f')
case "$sha" in
*[!0-9a-f]* | "") die "--sha256 $sha is not a hex SHA-256" ;;
esac
[ "${#sha}" -eq 64 ] || die "--sha256 $sha is not 64 hex digits"
actual=$(sha256sum "$staged" | awk '{print $1}')
if [ "$actual" != "$sha" ]; then
	die "checksum mismatch for $source_desc: expected $sha, got $actual; nothing was installed"
fi
chmod 0755 "$staged"
"$staged" version >/dev/null 2>&1 ||
	die "the staged binary does not run ($staged version failed; is $(dirname "$stage") mounted noexec?)"
note "verified $source_desc (sha256 $sha)"

# Know the host; the binary does the probing. The installer needs only the
# OS and its capabilities, not the provisioning payloads: asking IMDS off
# Azure would cost a timeout for nothing (preflight looks at payloads).
note "host: $("$staged" host inspect --summary --imds-endpoint off)"

# Where to install.
config_dir=""
if [ -f "$config" ]; then
	config_dir=$("$staged" layout --config "$config" --get binDir) ||
		die "config $config is not usable (see above); fix it or pass --install-dir"
elif $config_given; then
	die "--config $config: no such file"
fi

if [ -n "$install_dir" ]; then
	"$staged" layout --check-bin-dir "$install_dir" >/dev/null ||
		die "--install-dir $install_dir is not a layout bin dir (see above)"
	if [ -n "$config_dir" ] && [ "$config_dir" != "$install_dir" ]; then
		die "--install-dir $install_dir differs from the bin dir of the layout in $config ($config_dir); pass one or make them agree"
	fi
	target="$install_dir"
elif [ -n "$config_dir" ]; then
	target="$config_dir"
else
	target=$("$staged" layout --get binDir)
fi

# Refuse before writing anything when the target cannot work. Never
# relocate on our own: the layout is referenced by absolute paths later.
if ! reason=$("$staged" host check-dir --exec "$target" 2>&1); then
	cat >&2 <<EOF
install.sh: cannot install into $target: ${reason#aks-flex-node: }
install.sh: $target is on a read-only filesystem or unusable mount on this host; nothing was written.
install.sh: declare a writable install prefix instead: set agent.hostPrefix in $config
install.sh:   (e.g. "agent": {"hostPrefix": "/opt/aks-flex-node"}), or pass --install-dir /opt/aks-flex-node/bin
EOF
	exit 1
fi

# Record what we create, so uninstall.sh removes exactly that.
created=()
make_dirs() {
	local d="$1" missing=()
	while [ ! -d "$d" ]; do
		missing=("$d" "${missing[@]}")
		d=$(dirname "$d")
	done
	for d in "${missing[@]}"; do
		mkdir -m 0755 "$d"
		chmod 0755 "$d" # whatever the umask
		created+=("dir $d")
	done
}
make_dirs "$target"
make_dirs "$STATE_DIR"

dest="$target/$NAME"
# On a host where install-service seeded the upgrade slots, $dest is a
# symlink to the current slot; the rename below replaces the link itself,
# never the slot behind it, and install-service (or start) then adopts the
# new file as current and last-good.
seeded=false
if [ -L "$dest" ]; then seeded=true; fi
tmp="$target/.$NAME.tmp.$$"
cp "$staged" "$tmp"
chmod 0755 "$tmp"
sync "$tmp" 2>/dev/null || true
mv -f "$tmp" "$dest"
created+=("file $dest")

# Merge with an earlier record so a re-install keeps the first install's
# directories, then write the record atomically.
{
	if [ -f "$RECORD" ]; then cat "$RECORD"; fi
	printf '%s\n' "${created[@]}"
} | awk '!seen[$0]++' >"$RECORD.tmp.$$"
chmod 0600 "$RECORD.tmp.$$"
mv -f "$RECORD.tmp.$$" "$RECORD"

pkg=$("$staged" host inspect --output json --imds-endpoint off | sed -n 's/.*"packageManager": *"\([^"]*\)".*/\1/p')
if $azure_cli; then
	if [ -z "$pkg" ]; then
		note "Azure CLI: skipped, this host has no package manager"
	else
		note "Azure CLI: installing with $pkg"
		case "$pkg" in
		apt-get) DEBIAN_FRONTEND=noninteractive apt-get install -y -q azure-cli || note "warning: Azure CLI install failed; continuing" ;;
		*) "$pkg" install -y azure-cli || note "warning: Azure CLI install failed; continuing" ;;
		esac
	fi
fi

note "installed $dest"
if $seeded; then
	note "$dest was a link to the current upgrade slot; run '$dest install-service' (or start) to make the new binary current"
fi
case ":$PATH:" in
*":$target:"*) ;;
*) note "warning: $target is not on PATH; run $dest" ;;
esac
