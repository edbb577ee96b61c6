#!/usr/bin/env bash
# Installs the system package Atrium builds against when it is missing: libffi-dev (the host
# calls the C functions manifests declare through libffi). Needs root (or sudo) to install.
set -euo pipefail
if ! dpkg -s libffi-dev >/dev/null 2>&1 && [ ! -e /usr/include/ffi.h ] && [ ! -e /usr/include/x86_64-linux-gnu/ffi.h ]; then
    echo "Installing libffi-dev (needed to build atriumd)..."
    if [ "$(id -u)" = 0 ]; then
        apt-get update -qq && apt-get install -y -qq libffi-dev
    else
        sudo apt-get update -qq && sudo apt-get install -y -qq libffi-dev
    fi
fi
