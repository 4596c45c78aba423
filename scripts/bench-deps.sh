#!/usr/bin/env bash
# Installs the baselines `nearstore bench` compares against: nbdkit (the
# userspace NBD server, with its memory plugin) and fio (with the nbd ioengine,
# built on libnbd). Idempotent; run as root on Debian 12 (or via sudo).
set -euo pipefail

need=()
command -v nbdkit >/dev/null 2>&1 || need+=(nbdkit)
command -v fio >/dev/null 2>&1 || need+=(fio)
# taskset (util-linux) pins the benchmark processes to cores when present.
command -v taskset >/dev/null 2>&1 || need+=(util-linux)

if ((${#need[@]})); then
	SUDO=
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null 2>&1 || { echo "bench-deps: need root (or sudo) to install: ${need[*]}" >&2; exit 1; }
		SUDO=sudo
	fi
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -qq
	$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# fio's nbd engine is built in on Debian (fio links libnbd); check anyway, so a
# fio from somewhere else fails here rather than in the middle of a benchmark.
if ! fio --enghelp 2>/dev/null | grep -qx '[[:space:]]*nbd'; then
	echo "bench-deps: $(command -v fio) has no nbd ioengine (fio --enghelp); install Debian's fio (>= 3.20, built with libnbd)" >&2
	exit 1
fi
# nbdkit's memory plugin ships in the nbdkit package itself.
if ! nbdkit memory --dump-plugin >/dev/null 2>&1; then
	echo "bench-deps: nbdkit has no memory plugin (nbdkit memory --dump-plugin)" >&2
	exit 1
fi
echo "bench-deps: $(nbdkit --version | head -n1), $(fio --version), nbd engine present"
