#!/usr/bin/env bash
# Debian's Prometheus server for kaisched's time-based fair-share contract test (tests/kube/test_usage_contract.py):
# the package `prometheus`, installed from the machine's apt sources when missing. The test starts its own server
# on loopback with a configuration of its own; the package's service is never started here.
#
# Usage:
#   scripts/prometheus.sh build   idempotent; returns at once when the binary exists
#   scripts/prometheus.sh path    prints the binary's path; exit 1 when it is absent
set -euo pipefail

readonly BINARY="${KAISCHED_PROMETHEUS:-/usr/bin/prometheus}"

log() { printf '[prometheus.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# shellcheck source=scripts/apt.sh
source "$(dirname "$0")/apt.sh"

case "${1:-}" in
    build)
        if [[ -x "${BINARY}" ]]; then
            exit 0
        fi
        apt_install prometheus
        [[ -x "${BINARY}" ]] || die "prometheus installed but ${BINARY} is missing"
        log "$("${BINARY}" --version 2>&1 | head -n1)"
        ;;
    path)
        [[ -x "${BINARY}" ]] || exit 1
        printf '%s\n' "${BINARY}"
        ;;
    *)
        echo "usage: $0 build|path" >&2
        exit 2
        ;;
esac
