#!/usr/bin/env bash
# Installs the system packages Atrium builds against when they are missing: libffi-dev (the
# host calls the C functions manifests declare through libffi) and libavahi-client-dev (the
# host advertises itself, and clients find hosts, with DNS-SD through avahi-daemon). Needs
# root (or sudo) to install.
set -euo pipefail
missing=()
if ! dpkg -s libffi-dev >/dev/null 2>&1 && [ ! -e /usr/include/ffi.h ] && [ ! -e /usr/include/x86_64-linux-gnu/ffi.h ]; then
    missing+=(libffi-dev)
fi
if ! dpkg -s libavahi-client-dev >/dev/null 2>&1 && [ ! -e /usr/include/avahi-client/client.h ]; then
    missing+=(libavahi-client-dev)
fi
if [ ${#missing[@]} -gt 0 ]; then
    echo "Installing ${missing[*]} (needed to build Atrium)..."
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
