#!/usr/bin/env bash
# Makes a Debian package of Atrium with dpkg-deb: what Scripts/install.sh puts under /usr (the
# programs, the plugin SDK's header, the reference plugins, units, man pages, completions),
# the reference manifests in /etc/atrium/manifests.d (conffiles), and the Swift runtime the
# programs need, in /usr/lib/atrium/swift. It creates no user: the unit runs atriumd as a
# dynamic one.
#
#   Scripts/package-deb.sh [--output DIR]     # builds release into .build-deb, writes DIR/atrium_VERSION_ARCH.deb
#   Scripts/package-deb.sh --from BUILD_DIR   # packages what is built there already (the tests)
#   --fast                                    # gzip -1 instead of xz (the tests)
#
# Then: sudo apt install ./atrium_VERSION_ARCH.deb && sudo systemctl enable --now atriumd.socket
set -euo pipefail
cd "$(dirname "$0")/.."

output=.
from=""
compression=(-Zxz)
while [ $# -gt 0 ]; do
    case "$1" in
        --output) output="$2"; shift 2 ;;
        --from) from="$2"; shift 2 ;;
        --fast) compression=(-Zgzip -z1); shift ;;
        -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "package-deb.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
done
command -v dpkg-deb >/dev/null || { echo "package-deb.sh: dpkg-deb is missing (Debian's dpkg)" >&2; exit 1; }
command -v patchelf >/dev/null || {
    echo "package-deb.sh: patchelf is missing (sudo apt-get install patchelf): the packaged programs are made to look for the Swift runtime only where the package puts it" >&2
    exit 1
}

version="$(sed -n 's/.*static let current = "\(.*\)".*/\1/p' Sources/AtriumProtocol/Version.swift)"
architecture="$(dpkg --print-architecture)"
runtime=/usr/lib/atrium/swift
if [ -z "$from" ]; then
    Scripts/ensure-deps.sh
    # A build of its own: the programs and plugins also look for the Swift runtime where the
    # package puts it.
    swift build -c release --scratch-path .build-deb -Xlinker -rpath -Xlinker "$runtime" >&2
    from=".build-deb/release"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
root="$work/atrium"
Scripts/install.sh --no-build --from "$from" --prefix /usr --destdir "$root" >&2
# dpkg keeps its own list of what it installed.
rm -f "$root/usr/share/atrium/installed-files" "$root/usr/share/atrium/installed-files.dirs"
rmdir "$root/usr/share/atrium" 2>/dev/null || true

# The Swift runtime libraries the programs and plugins load (from the toolchain they were built
# with), copied as files.
mkdir -p "$root$runtime"
for binary in "$root/usr/bin/atriumd" "$root/usr/bin/atrium" "$root"/usr/lib/atrium/plugins/*.so; do
    ldd "$binary" | awk '/=> \// { print $3 }'
done | sort -u | while read -r library; do
    case "$library" in
        */swift/linux/*|*/usr/lib/swift/*) cp -L "$library" "$root$runtime/" ;;
    esac
done
chmod 644 "$root$runtime"/*

# Every program and plugin looks for the Swift runtime only where the package puts it: not in
# the toolchain it was built with (swift build records /opt/swift/... first), where another
# machine may have another Swift, of another ABI, or a build folder. The runtime's own
# libraries keep $ORIGIN, which is that same folder.
find "$root" -type f | while read -r file; do
    [ "$(head -c 4 "$file" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
    case "$file" in
        "$root$runtime"/*) patchelf --set-rpath '$ORIGIN' "$file" ;;
        *) patchelf --set-rpath "$runtime" "$file" ;;
    esac
done

mkdir -p "$root/DEBIAN"
size="$(du -sk "$root" | cut -f1)"
cat > "$root/DEBIAN/control" <<EOF
Package: atrium
Version: $version
Architecture: $architecture
Maintainer: Atrium maintainers <atrium@localhost>
Installed-Size: $size
Depends: libc6, libstdc++6, libgcc-s1, libffi8, libavahi-client3
Recommends: avahi-daemon
Section: net
Priority: optional
Description: Windows App Services and Project Rome, received on Linux
 atriumd loads app services as plugins declared in manifests and serves them to
 clients on this machine and on the network (TLS, paired devices): connections by
 service name and package id, ValueSet messages, URI launches and Roman pings.
 atrium is its command-line client.
EOF
find "$root/etc" -type f | sed "s|^$root||" | sort > "$root/DEBIAN/conffiles"
cat > "$root/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
EOF
cat > "$root/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then systemctl daemon-reload || true; fi
EOF
chmod 755 "$root/DEBIAN/postinst" "$root/DEBIAN/postrm"

mkdir -p "$output"
package="$output/atrium_${version}_${architecture}.deb"
dpkg-deb --root-owner-group "${compression[@]}" --build "$root" "$package" >&2
echo "$package"
