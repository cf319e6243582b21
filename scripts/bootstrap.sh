#!/usr/bin/env bash
# Prepare a Debian 12 machine for tsdn, as root: Debian packages, Open vSwitch (userspace
# datapath: the kernel has no openvswitch module), a venv with tsdn installed. Idempotent and
# quick when everything is already there.
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(
    python3 python3-venv python3-pip  # Debian's python3 is the one mininet works with
    mininet openvswitch-switch        # emulated WAN on real OVS switches
    iperf3 iputils-ping ethtool numactl iproute2 psmisc
    default-jre-headless              # FDT (fdt.jar is the user's; tests use ../shared/tools/fdt.jar)
    openssl                           # TLS certificates in the API tests
    chromium chromium-driver          # the live map's browser tests (selenium, headless)
    etcd-server                       # the shared store of several controllers (--store etcd://...)
)

missing=()
for package in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
    if [ "$(id -u)" -ne 0 ]; then
        echo "bootstrap: missing Debian packages (${missing[*]}); run as root to install them" >&2
        exit 1
    fi
    echo "bootstrap: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# A venv over Debian's /usr/bin/python3 that still sees Debian's mininet package.
if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import sys; assert sys.version_info >= (3, 11)' 2>/dev/null; then
    rm -rf .venv
    /usr/bin/python3 -m venv --system-site-packages .venv
fi
stamp=.venv/.tsdn-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
    touch "$stamp"
fi

# The OpenALTO client that tests/test_alto.py drives: not on PyPI (the name `alto` there is another
# project), so from the shared tools when they are beside the repository; its client only (README.md there).
openalto=(../shared/tools/openalto/openalto-src-*.tar.gz)
if [ -f "${openalto[0]}" ] && ! .venv/bin/python -c 'import alto.client, pytricia' 2>/dev/null; then
    unpacked=$(mktemp -d)
    tar -xzf "${openalto[0]}" -C "$unpacked"
    .venv/bin/python -m pip install -q --disable-pip-version-check requests pytricia
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps "$unpacked/openalto-src"
    rm -rf "$unpacked"
fi

# Open vSwitch in userspace (ENVIRONMENT.md: the kernel has no openvswitch module), with the packet
# socket every emulated port sends through big enough for a congested link's queue
# (topologies/open_vswitch.py says why): net.core.wmem_default raised first, Open vSwitch restarted if
# it runs with a smaller socket.
if [ "$(id -u)" -eq 0 ]; then
    .venv/bin/python -m topologies.open_vswitch || { echo "bootstrap: Open vSwitch is not ready" >&2; exit 1; }
fi
