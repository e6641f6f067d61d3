#!/usr/bin/env bash
# Shared by the set-up scripts (sourced, not run): install Debian packages from the machine's apt sources.
# The sourcing script defines log() and die().

as_root() {
    if [[ $(id -u) -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

# apt-get install the given packages, refreshing the package lists once when an install fails (stale lists).
apt_install() {
    local missing=() pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
    done
    [[ ${#missing[@]} -eq 0 ]] && return 0
    log "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    if ! as_root apt-get install -y -q --no-install-recommends "${missing[@]}" >&2; then
        log "install failed; running apt-get update and retrying"
        as_root apt-get update -q >&2 || die "apt-get update failed"
        as_root apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 \
            || die "apt-get install ${missing[*]} failed"
    fi
}
