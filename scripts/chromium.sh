#!/usr/bin/env bash
# Debian's headless browser for kaisched's dashboard test (tests/unit/test_dashboard_browser.py):
# chromium and chromium-driver, installed from the machine's apt sources when missing.
#
# Usage:
#   scripts/chromium.sh build   idempotent; returns at once when /usr/bin/chromium and /usr/bin/chromedriver exist
#   scripts/chromium.sh path    prints the browser's and the driver's paths; exit 1 when either is absent
set -euo pipefail

readonly BROWSER="${KAISCHED_CHROMIUM:-/usr/bin/chromium}"
readonly DRIVER="${KAISCHED_CHROMEDRIVER:-/usr/bin/chromedriver}"

log() { printf '[chromium.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

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

case "${1:-}" in
    build)
        if [[ -x "${BROWSER}" && -x "${DRIVER}" ]]; then
            exit 0
        fi
        apt_install chromium chromium-driver
        [[ -x "${BROWSER}" && -x "${DRIVER}" ]] || die "chromium installed but ${BROWSER} or ${DRIVER} is missing"
        log "$("${BROWSER}" --version 2>/dev/null | head -n1); $("${DRIVER}" --version 2>/dev/null | head -n1)"
        ;;
    path)
        [[ -x "${BROWSER}" && -x "${DRIVER}" ]] || exit 1
        printf '%s\n%s\n' "${BROWSER}" "${DRIVER}"
        ;;
    *)
        echo "usage: $0 build|path" >&2
        exit 2
        ;;
esac
