#!/usr/bin/env bash
# Installs the programs the tests run besides Go, or says exactly what is
# missing and how to get it: `make test` never skips a test because a
# program was not installed.
#   redis-server  the Redis replication tests run real servers
#   promtool      the alert rules are checked and unit-tested
#   ip            the lab and the network tests (iproute2)
#   moto_server   the aws provider's wire tests (moto; part of the machine
#                 image, not a Debian package: pip install 'moto[server]')
# With arguments it sees to those programs only, e.g. `hack/test-deps.sh
# keepalived` for `make bench-failover-keepalived`.
set -euo pipefail

declare -A package=([redis-server]=redis-server [promtool]=prometheus [ip]=iproute2 [keepalived]=keepalived)
want=(redis-server promtool ip)
if (($#)); then
	want=("$@")
	for cmd in "${want[@]}"; do
		[[ -v "package[$cmd]" ]] || { echo "hack/test-deps.sh: no package known for $cmd" >&2; exit 2; }
	done
fi
missing=()
for cmd in "${want[@]}"; do
	command -v "$cmd" >/dev/null || missing+=("$cmd")
done
if ((${#missing[@]})) && [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
	pkgs=()
	for cmd in "${missing[@]}"; do pkgs+=("${package[$cmd]}"); done
	echo "Installing ${pkgs[*]} (for ${missing[*]})"
	apt-get update -qq
	# --no-install-recommends: promtool comes with the prometheus package;
	# nothing of it runs as a service here.
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
	missing=()
	for cmd in "${want[@]}"; do
		command -v "$cmd" >/dev/null || missing+=("$cmd")
	done
fi
(($#)) || command -v moto_server >/dev/null || missing+=(moto_server)
if ((${#missing[@]})); then
	echo "make test needs these programs, which are not installed: ${missing[*]}" >&2
	for cmd in "${missing[@]}"; do
		case $cmd in
		moto_server) echo "  moto_server: pip install 'moto[server]==5.2.1'" >&2 ;;
		*) echo "  $cmd: apt-get install -y ${package[$cmd]} (as root; make test installs it itself when run as root)" >&2 ;;
		esac
	done
	exit 1
fi
