#!/usr/bin/env bash
# Build and cache KAI Scheduler's own snapshot-tool (cmd/snapshot-tool of the Go module
# github.com/kai-scheduler/KAI-scheduler), for the tests that replay the same snapshots with KAI and with kaisched
# and compare the decisions line by line (tests/unit/test_kai_snapshot_tool.py; docs/migrating-from-kai.md).
#
# The source of the version is taken from a KAI git repository when $KAISCHED_KAI_SOURCE names one (a checkout or a
# bare git directory: `git archive <version>`), else from the Go module proxy (`go mod download`); it is copied to a
# scratch directory (its go.mod has replace directives, so `go install module@version` cannot build it) and built
# there with the machine's Go (>= the module's go directive; /usr/local/go by default), once, at low priority.
#
# Usage:
#   scripts/kai-snapshot-tool.sh [build]   idempotent; prints the cached binary's path (builds it first: ~10 min)
#   scripts/kai-snapshot-tool.sh path      prints the cached binary's path; exit 1 when it is absent
#   scripts/kai-snapshot-tool.sh clean     removes the cached binary
#
# Cache: ${KAISCHED_CACHE:-$HOME/.cache/kaisched}/kai-snapshot-tool-<version>/snapshot-tool. Version:
# $KAISCHED_KAI_VERSION (default v0.17.0). Go: $GO, else /usr/local/go/bin/go, else `go` on PATH.
set -euo pipefail

readonly KAI_MODULE="github.com/kai-scheduler/KAI-scheduler"
readonly KAI_VERSION="${KAISCHED_KAI_VERSION:-v0.17.0}"
readonly CACHE_ROOT="${KAISCHED_CACHE:-${HOME:-/root}/.cache/kaisched}"
readonly CACHE_DIR="${CACHE_ROOT}/kai-snapshot-tool-${KAI_VERSION}"
readonly BINARY="${CACHE_DIR}/snapshot-tool"

SCRATCH=""
log() { printf '[kai-snapshot-tool.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

find_go() {
    if [[ -n "${GO:-}" ]]; then
        echo "$GO"
    elif [[ -x /usr/local/go/bin/go ]]; then
        echo /usr/local/go/bin/go
    elif command -v go >/dev/null 2>&1; then
        command -v go
    else
        die "no Go toolchain (set GO=/path/to/go)"
    fi
}

build() {
    if [[ -x "$BINARY" ]]; then
        echo "$BINARY"
        return 0
    fi
    local go source
    go="$(find_go)"
    SCRATCH="$(mktemp -d)"
    trap 'chmod -R u+w "$SCRATCH" 2>/dev/null; rm -rf "$SCRATCH"' EXIT
    local scratch="$SCRATCH"
    if [[ -n "${KAISCHED_KAI_SOURCE:-}" ]]; then
        log "taking ${KAI_VERSION} from the git repository ${KAISCHED_KAI_SOURCE}"
        mkdir -p "$scratch/src"
        git --git-dir="$(git -C "$KAISCHED_KAI_SOURCE" rev-parse --absolute-git-dir 2>/dev/null || echo "$KAISCHED_KAI_SOURCE")" \
            archive "$KAI_VERSION" | tar -x -C "$scratch/src"
    else
        log "fetching ${KAI_MODULE}@${KAI_VERSION} from the Go module proxy"
        source="$(cd "$scratch" && GOFLAGS=-mod=mod "$go" mod download -json "${KAI_MODULE}@${KAI_VERSION}" \
            | python3 -c 'import json, sys; d = json.load(sys.stdin); print(d.get("Dir") or d.get("Error"))')"
        [[ -d "$source" ]] || die "${KAI_MODULE}@${KAI_VERSION}: ${source} (set KAISCHED_KAI_SOURCE to a KAI git repository)"
        cp -r "$source" "$scratch/src"
        chmod -R u+w "$scratch/src"
    fi
    log "building cmd/snapshot-tool (a few minutes the first time: KAI's dependencies are downloaded)"
    mkdir -p "$CACHE_DIR"
    (cd "$scratch/src" && nice -n 19 "$go" build -o "$BINARY.tmp" ./cmd/snapshot-tool)
    mv "$BINARY.tmp" "$BINARY"
    log "built $BINARY"
    echo "$BINARY"
}

case "${1:-build}" in
    build) build ;;
    path)
        if [[ -x "$BINARY" ]]; then echo "$BINARY"; else exit 1; fi ;;
    clean) rm -rf "$CACHE_DIR" ;;
    *) die "usage: $0 [build|path|clean]" ;;
esac
