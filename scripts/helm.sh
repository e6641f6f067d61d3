#!/usr/bin/env bash
# Build and cache helm (v3) for kaisched's chart tests and for rendering deploy/ from the chart.
#
# helm is built from the Go module proxy with the machine's Go (>= 1.23; /usr/local/go by default), once,
# and cached outside the repository; the Go module and build caches are removed after a successful build.
#
# Usage:
#   scripts/helm.sh [build]   idempotent; prints the cached binary's path (builds it first when absent, ~4 min)
#   scripts/helm.sh path      prints the cached binary's path; exit 1 when it is absent
#   scripts/helm.sh clean     removes the cached binary
#
# Cache: ${KAISCHED_CACHE:-$HOME/.cache/kaisched}/helm-<version>/helm. Version: $KAISCHED_HELM_VERSION
# (default v3.17.3). Go: $GO, else /usr/local/go/bin/go, else `go` on PATH.
set -euo pipefail

readonly HELM_VERSION="${KAISCHED_HELM_VERSION:-v3.17.3}"
readonly CACHE_ROOT="${KAISCHED_CACHE:-${HOME:-/root}/.cache/kaisched}"
readonly CACHE_DIR="${CACHE_ROOT}/helm-${HELM_VERSION}"
readonly BINARY="${CACHE_DIR}/helm"

log() { printf '[helm.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

find_go() {
    if [[ -n "${GO:-}" ]]; then
        echo "$GO"
    elif [[ -x /usr/local/go/bin/go ]]; then
        echo /usr/local/go/bin/go
    elif command -v go >/dev/null 2>&1; then
        command -v go
    else
        die "no Go toolchain (set GO=/path/to/go; helm ${HELM_VERSION} needs Go >= 1.23)"
    fi
}

build() {
    if [[ -x "$BINARY" ]]; then
        echo "$BINARY"
        return 0
    fi
    mkdir -p "$CACHE_DIR"
    exec 9>"${CACHE_DIR}/.lock"
    flock 9  # one build at a time; a second caller waits and then finds the binary
    if [[ -x "$BINARY" ]]; then
        echo "$BINARY"
        return 0
    fi
    local go tmp
    go="$(find_go)"
    tmp="${CACHE_DIR}/build"
    rm -rf "$tmp"
    mkdir -p "$tmp/bin"
    log "building helm ${HELM_VERSION} with $("$go" version) (a few minutes)"
    GOPATH="$tmp/gopath" GOCACHE="$tmp/gocache" GOBIN="$tmp/bin" GOFLAGS="-mod=mod -buildvcs=false" \
        GOTOOLCHAIN=local CGO_ENABLED=0 \
        "$go" install -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
        "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}" >&2 || die "go install helm ${HELM_VERSION} failed"
    "$tmp/bin/helm" version --short >&2 || die "the built helm does not run"
    mv "$tmp/bin/helm" "$BINARY"
    GOPATH="$tmp/gopath" GOCACHE="$tmp/gocache" "$go" clean -modcache >/dev/null 2>&1 || true
    rm -rf "$tmp"
    log "cached $BINARY"
    echo "$BINARY"
}

case "${1:-build}" in
    build) build ;;
    path) [[ -x "$BINARY" ]] || { log "helm ${HELM_VERSION} is not built (run scripts/helm.sh)"; exit 1; }
          echo "$BINARY" ;;
    clean) rm -rf "$CACHE_DIR"; log "removed $CACHE_DIR" ;;
    *) die "usage: scripts/helm.sh [build|path|clean]" ;;
esac
