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

# shellcheck source=scripts/apt.sh
source "$(dirname "$0")/apt.sh"

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
