#!/usr/bin/env bash
# Installs Atrium: builds it (release) and puts atriumd, atrium, the plugin SDK's header, the
# reference plugins and their manifests, the systemd units, man pages and shell completions
# in the usual places. Every file it puts there is listed in an install record; --uninstall
# removes exactly those files (and the folders it made that are left empty), nothing else.
#
#   Scripts/install.sh                     # system-wide under /usr/local (run as root)
#   Scripts/install.sh --prefix /usr       # system-wide under /usr
#   Scripts/install.sh --user              # for this user only, under ~/.local
#   Scripts/install.sh --uninstall [--user | --prefix P]
#
# System: PREFIX/bin, PREFIX/lib/atrium/plugins, PREFIX/include/atrium, PREFIX/share/man,
#   PREFIX/share/{bash-completion,zsh,fish}, PREFIX/lib/systemd/system, /etc/atrium/manifests.d
#   (the manifests; left in place on uninstall when changed since).
# User: ~/.local/bin, ~/.local/lib/atrium/plugins, ~/.local/include/atrium, ~/.local/share/man,
#   ~/.local/share/{bash-completion,zsh,fish}, ~/.config/systemd/user,
#   ~/.local/share/atrium/manifests.
#
# --destdir DIR puts everything under DIR (for packaging, and the tests); --configuration
# debug installs the debug build, and --no-build installs what is built already (with --from,
# the products in that folder: the tests).
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=/usr/local
user=false
uninstall=false
destdir=""
configuration=release
build_first=true
from=""
sysconfdir=/etc
while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) prefix="$2"; shift 2 ;;
        --prefix=*) prefix="${1#*=}"; shift ;;
        --user) user=true; shift ;;
        --uninstall) uninstall=true; shift ;;
        --destdir) destdir="$2"; shift 2 ;;
        --destdir=*) destdir="${1#*=}"; shift ;;
        --configuration) configuration="$2"; shift 2 ;;
        --sysconfdir) sysconfdir="$2"; shift 2 ;;
        --no-build) build_first=false; shift ;;
        --from) from="$2"; shift 2 ;;
        -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 64 ;;
    esac
done
case "$configuration" in release|debug) ;; *) echo "install.sh: --configuration is release or debug" >&2; exit 64 ;; esac

if $user; then
    home="${HOME:?}"
    prefix="$home/.local"
    data="${XDG_DATA_HOME:-$home/.local/share}"
    bindir="$prefix/bin"
    plugindir="$prefix/lib/atrium/plugins"
    includedir="$prefix/include/atrium"
    mandir="$data/man"
    completions="$data"
    unitdir="${XDG_CONFIG_HOME:-$home/.config}/systemd/user"
    manifestdir="$data/atrium/manifests"
    configfile="${XDG_CONFIG_HOME:-$home/.config}/atrium/atriumd.conf"
    record="$data/atrium/installed-files"
    units=Packaging/systemd/user
else
    bindir="$prefix/bin"
    plugindir="$prefix/lib/atrium/plugins"
    includedir="$prefix/include/atrium"
    mandir="$prefix/share/man"
    completions="$prefix/share"
    unitdir="$prefix/lib/systemd/system"
    manifestdir="$sysconfdir/atrium/manifests.d"
    configfile="$sysconfdir/atrium/atriumd.conf"
    record="$prefix/share/atrium/installed-files"
    units=Packaging/systemd
fi

if $uninstall; then
    if [ ! -f "$destdir$record" ]; then
        echo "install.sh: nothing to uninstall: $destdir$record does not exist" >&2
        exit 1
    fi
    # Files first (a manifest changed since it was installed is kept, and said so), then the
    # folders the install made, deepest first, where they are empty now.
    while IFS=$'\t' read -r kind path sum; do
        [ "$kind" = file ] || continue
        if [ -n "$sum" ] && [ -f "$destdir$path" ] && [ "$(sha256sum "$destdir$path" | cut -d' ' -f1)" != "$sum" ]; then
            echo "kept $path: changed since it was installed"
            continue
        fi
        rm -f "$destdir$path"
    done < "$destdir$record"
    made="$(grep $'^dir\t' "$destdir$record.dirs" 2>/dev/null | cut -f2 | sort -r || true)"
    rm -f "$destdir$record" "$destdir$record.dirs"
    while read -r dir; do
        [ -z "$dir" ] || rmdir "$destdir$dir" 2>/dev/null || true
    done <<< "$made"
    echo "uninstalled Atrium from $destdir$prefix"
    exit 0
fi

if $build_first; then
    Scripts/ensure-deps.sh
    swift build -c "$configuration" >&2
fi
build="${from:-.build/$configuration}"
for built in atriumd atrium libEcho.so libFiles.so libRomanPing.so libmathdemo.so; do
    [ -f "$build/$built" ] || { echo "install.sh: $build/$built is missing: build first" >&2; exit 1; }
done

# Every folder ends up in units and scripts as it is: only plain characters.
for path in "$bindir" "$plugindir" "$includedir" "$mandir" "$completions" "$unitdir" "$manifestdir" "$record" \
    "$sysconfdir" "$configfile"; do
    if [[ ! "$path" =~ ^[A-Za-z0-9._/+-]+$ ]]; then
        echo "install.sh: \"$path\" has characters a systemd unit cannot hold as they are; choose folders of letters, digits and ._/+-" >&2
        exit 64
    fi
done

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT

# Everything is made first, in a scratch folder: nothing is put in place unless all of it can be.
plan=()  # MODE<tab>SOURCE<tab>DEST<tab>KIND (kind "config": a file a person may edit)
plan+=("755"$'\t'"$build/atriumd"$'\t'"$bindir/atriumd"$'\t'"program")
plan+=("755"$'\t'"$build/atrium"$'\t'"$bindir/atrium"$'\t'"program")
plan+=("644"$'\t'"Sources/CAtriumPlugin/include/atrium_plugin.h"$'\t'"$includedir/atrium_plugin.h"$'\t'"file")
for library in libEcho.so libFiles.so libRomanPing.so libmathdemo.so; do
    plan+=("644"$'\t'"$build/$library"$'\t'"$plugindir/$library"$'\t'"file")
done
for manifest in manifests/*.json; do
    plan+=("644"$'\t'"$manifest"$'\t'"$manifestdir/$(basename "$manifest")"$'\t'"config")
done
# The configuration file: every option commented out at its default, but the manifests
# folder when the install's is not one atriumd reads by default.
if $user || [ "$manifestdir" = /etc/atrium/manifests.d ]; then
    manifests_line='# manifests = ["/etc/atrium/manifests.d", "/usr/share/atrium/manifests"]'
else
    manifests_line="manifests = [\"$manifestdir\"]"
fi
systemctl_user=""
! $user || systemctl_user="--user "
# The system unit's state folder (its StateDirectory), so that `sudo atriumd token create`
# manages the service's tokens; a user's is the default.
if $user; then
    state_line='# state-dir = "~/.local/state/atrium"'
else
    state_line='state-dir = "/var/lib/atrium"'
fi
sed -e "s|@MANIFESTS@|$manifests_line|" -e "s|@SYSTEMCTL@|$systemctl_user|" -e "s|@STATEDIR@|$state_line|" \
    Packaging/atriumd.conf > "$scratch/atriumd.conf"
plan+=("644"$'\t'"$scratch/atriumd.conf"$'\t'"$configfile"$'\t'"config")
# Units, with where things are filled in.
for unit in "$units"/atriumd.service "$units"/atriumd.socket; do
    sed -e "s|@BINDIR@|$bindir|g" -e "s|@CONFIGFILE@|$configfile|g" "$unit" > "$scratch/$(basename "$unit")"
    plan+=("644"$'\t'"$scratch/$(basename "$unit")"$'\t'"$unitdir/$(basename "$unit")"$'\t'"file")
done
# Man pages (from the tools' own --help, through the argument parser's dump) and completions.
for tool in atriumd atrium; do
    "$build/$tool" --experimental-dump-help > "$scratch/$tool.json"
    python3 Scripts/manpage.py "$scratch/$tool.json" "$scratch/$tool.1"
    "$build/$tool" --generate-completion-script bash > "$scratch/$tool.bash"
    "$build/$tool" --generate-completion-script zsh > "$scratch/_$tool"
    "$build/$tool" --generate-completion-script fish > "$scratch/$tool.fish"
    plan+=("644"$'\t'"$scratch/$tool.1"$'\t'"$mandir/man1/$tool.1"$'\t'"file")
    plan+=("644"$'\t'"$scratch/$tool.bash"$'\t'"$completions/bash-completion/completions/$tool"$'\t'"file")
    plan+=("644"$'\t'"$scratch/_$tool"$'\t'"$completions/zsh/site-functions/_$tool"$'\t'"file")
    plan+=("644"$'\t'"$scratch/$tool.fish"$'\t'"$completions/fish/vendor_completions.d/$tool.fish"$'\t'"file")
done

# What an earlier install put here (an upgrade replaces it): its files, with the checksums of
# those a person may edit, and the folders it made.
declare -A previous=()
previous_dirs=""
if [ -f "$destdir$record" ]; then
    while IFS=$'\t' read -r kind path sum; do
        [ "$kind" = file ] && previous["$path"]="$sum"
    done < "$destdir$record"
    previous_dirs="$(cut -f2 "$destdir$record.dirs" 2>/dev/null || true)"
fi
# A file of someone else's is never overwritten (nor, later, uninstalled).
clashes=()
for entry in "${plan[@]}"; do
    IFS=$'\t' read -r mode source dest kind <<< "$entry"
    if [ -e "$destdir$dest" ] && [ -z "${previous[$dest]+set}" ]; then clashes+=("$dest"); fi
done
if [ ${#clashes[@]} -gt 0 ]; then
    echo "install.sh: these exist and were not put there by install.sh; remove them first, or choose another --prefix:" >&2
    printf '  %s\n' "${clashes[@]}" >&2
    exit 1
fi

[ -z "$destdir" ] || mkdir -p "$destdir"
made_dirs=()
# Makes the folders of `path` that do not exist yet, and records them as they are made.
make_dirs() {
    local dir="$1" missing=()
    while [ ! -d "$destdir$dir" ] && [ "$dir" != / ]; do
        missing+=("$dir")
        dir="$(dirname "$dir")"
    done
    local index
    for ((index = ${#missing[@]} - 1; index >= 0; index--)); do
        mkdir -m 755 "$destdir${missing[index]}"
        made_dirs+=("${missing[index]}")
        [ ! -f "$destdir$record.dirs" ] || printf 'dir\t%s\n' "${missing[index]}" >> "$destdir$record.dirs"
    done
}
# The record is written as files are put in place: an install stopped half-way can still be
# uninstalled.
make_dirs "$(dirname "$record")"
{
    if [ -n "$previous_dirs" ]; then printf 'dir\t%s\n' $previous_dirs; fi
    if [ ${#made_dirs[@]} -gt 0 ]; then printf 'dir\t%s\n' "${made_dirs[@]}"; fi
} > "$destdir$record.dirs.new"
mv "$destdir$record.dirs.new" "$destdir$record.dirs"
[ ! -f "$destdir$record" ] || mv "$destdir$record" "$destdir$record.previous"
: > "$destdir$record"
installed=0
kept=()
declare -A planned=()
for entry in "${plan[@]}"; do
    IFS=$'\t' read -r mode source dest kind <<< "$entry"
    planned["$dest"]=1
    make_dirs "$(dirname "$dest")"
    if [ "$kind" = config ] && [ -f "$destdir$dest" ] && [ -n "${previous[$dest]:-}" ] &&
        [ "$(sha256sum "$destdir$dest" | cut -d' ' -f1)" != "${previous[$dest]}" ]; then
        # Changed since it was installed: it stays, the new one goes beside it.
        install -m "$mode" "$source" "$destdir$dest.new"
        printf 'file\t%s\t%s\n' "$dest" "${previous[$dest]}" >> "$destdir$record"
        printf 'file\t%s\t\n' "$dest.new" >> "$destdir$record"
        kept+=("$dest")
        continue
    fi
    install -m "$mode" "$source" "$destdir$dest"
    sum=""
    [ "$kind" != config ] || sum="$(sha256sum "$destdir$dest" | cut -d' ' -f1)"
    printf 'file\t%s\t%s\n' "$dest" "$sum" >> "$destdir$record"
    installed=$((installed + 1))
done
# What the earlier install put here and this one does not: taken away (unless changed).
for path in "${!previous[@]}"; do
    [ -z "${planned[$path]+set}" ] || continue
    [ "${path%.new}" = "$path" ] || [ -z "${planned[${path%.new}]+set}" ] || { printf 'file\t%s\t\n' "$path" >> "$destdir$record"; continue; }
    rm -f "$destdir$path"
done
rm -f "$destdir$record.previous"
for path in "${kept[@]}"; do
    echo "kept $path: changed since it was installed; the new version is $path.new"
done

echo "installed Atrium in $destdir$prefix ($installed files, listed in $record)"
if $user; then
    cat <<EOF
Next:
  systemctl --user daemon-reload && systemctl --user enable --now atriumd.socket
  atrium status
Manifests go in $manifestdir; the plugins they name are looked for in $plugindir.
The configuration is $configfile (atriumd --print-config shows it).
EOF
else
    cat <<EOF
Next:
  systemctl daemon-reload && systemctl enable --now atriumd.socket
  atrium status --socket /run/atrium/atriumd.sock
Manifests go in $manifestdir; the plugins they name are looked for in $plugindir.
The configuration is $configfile (atriumd --print-config shows it).
EOF
fi
