#!/usr/bin/env bash
# Build and cache a real kube-apiserver 1.35 for kaisched's contract test tier (tests/kube, marker `kube`).
#
# Recipe: a throwaway Go module outside the repository that requires k8s.io/kubernetes v1.35.x and replaces
# every k8s.io/* staging module (read from that version's own go.mod) with the matching v0.35.x, then
# `go build k8s.io/kubernetes/cmd/kube-apiserver`, all from the Go module proxy with the machine's Go. The
# server runs against Debian's etcd-server 3.4 (installed here when missing).
#
# Usage:
#   scripts/kube-apiserver.sh build   idempotent; returns at once when the binary is cached and etcd installed
#   scripts/kube-apiserver.sh path    prints the cached binary's path; exit 1 when it is absent
#   scripts/kube-apiserver.sh version prints the Kubernetes version this script builds
#   scripts/kube-apiserver.sh clean   removes the cached binary and any leftover work tree
#
# Cache: ${KAISCHED_KUBE_CACHE:-$HOME/.cache/kaisched}/kube-apiserver-1.35.4/ (never inside the repository);
# the Go build and module caches are the machine's own (go env GOCACHE GOMODCACHE), so a rebuild is quick.
set -euo pipefail

readonly K8S_VERSION="1.35.4"
readonly STAGING_VERSION="v0.${K8S_VERSION#1.}"
readonly CACHE_ROOT="${KAISCHED_KUBE_CACHE:-${HOME:-/root}/.cache/kaisched}"
readonly CACHE_DIR="${CACHE_ROOT}/kube-apiserver-${K8S_VERSION}"
readonly BINARY="${CACHE_DIR}/kube-apiserver"
readonly WORK_DIR="${CACHE_DIR}/work"

log() { printf '[kube-apiserver.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# shellcheck source=scripts/apt.sh
source "$(dirname "$0")/apt.sh"

ensure_etcd() {
    if command -v etcd >/dev/null 2>&1; then
        return 0
    fi
    apt_install etcd-server
    command -v etcd >/dev/null 2>&1 || die "etcd-server installed but no 'etcd' on PATH"
    log "etcd: $(etcd --version 2>/dev/null | head -n1)"
}

# The throwaway module: require k8s.io/kubernetes and replace each staging module its go.mod names.
write_module() {
    local gomod staging
    log "go mod download k8s.io/kubernetes@v${K8S_VERSION}"
    gomod="$(cd "${WORK_DIR}" && go mod download -json "k8s.io/kubernetes@v${K8S_VERSION}" \
        | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
    [[ -n "${gomod}" && -f "${gomod}" ]] || die "could not download k8s.io/kubernetes@v${K8S_VERSION}'s go.mod"
    staging="$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\1#p' "${gomod}")"
    [[ -n "${staging}" ]] || die "no staging replace directives in ${gomod}"
    {
        printf 'module kaisched.local/kube-apiserver-build\n\ngo 1.25\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n' \
            "${K8S_VERSION}"
        local module
        for module in ${staging}; do
            printf '\t%s => %s %s\n' "${module}" "${module}" "${STAGING_VERSION}"
        done
        printf ')\n'
    } >"${WORK_DIR}/go.mod"
    printf 'package main\n\nimport _ "k8s.io/kubernetes/cmd/kube-apiserver"\n' >"${WORK_DIR}/tools.go"
    log "$(wc -w <<<"${staging}") staging modules replaced with ${STAGING_VERSION}"
}

do_build() {
    mkdir -p "${CACHE_DIR}"
    if [[ -x "${BINARY}" ]]; then
        ensure_etcd
        log "cached: ${BINARY}"
        return 0
    fi

    # One build at a time per cache directory.
    exec 9>"${CACHE_DIR}/.lock"
    if ! flock -n 9; then
        log "another build holds ${CACHE_DIR}/.lock; waiting"
        flock 9
        if [[ -x "${BINARY}" ]]; then
            ensure_etcd
            log "cached (built by the other process): ${BINARY}"
            return 0
        fi
    fi

    local started=${SECONDS}
    log "building kube-apiserver ${K8S_VERSION} into ${CACHE_DIR} (about 6 minutes on 2 cores the first time)"
    ensure_etcd
    command -v go >/dev/null 2>&1 || die "no go on PATH"
    log "toolchain: $(go version)"

    rm -rf "${WORK_DIR}"
    mkdir -p "${WORK_DIR}"
    export GOFLAGS=-mod=mod GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0
    write_module
    log "go mod tidy (log: ${WORK_DIR}/build.log)"
    (cd "${WORK_DIR}" && go mod tidy) >"${WORK_DIR}/build.log" 2>&1 \
        || { tail -n 40 "${WORK_DIR}/build.log" >&2; die "go mod tidy failed; log in ${WORK_DIR}/build.log"; }
    # The version the server reports (/version, --version), as the release's Makefile would stamp it.
    local ldflags="-s -w"
    local var
    for var in "gitVersion=v${K8S_VERSION}" "gitMajor=1" "gitMinor=$(cut -d. -f2 <<<"${K8S_VERSION}")" \
        "gitTreeState=clean"; do
        ldflags+=" -X k8s.io/component-base/version.${var%%=*}=${var#*=}"
        ldflags+=" -X k8s.io/client-go/pkg/version.${var%%=*}=${var#*=}"
    done
    log "go build k8s.io/kubernetes/cmd/kube-apiserver"
    if ! (cd "${WORK_DIR}" && go build -trimpath -ldflags "${ldflags}" -o "${BINARY}.tmp" \
            k8s.io/kubernetes/cmd/kube-apiserver) >>"${WORK_DIR}/build.log" 2>&1; then
        tail -n 40 "${WORK_DIR}/build.log" >&2 || true
        die "go build failed; full log in ${WORK_DIR}/build.log"
    fi
    "${BINARY}.tmp" --version >&2 || die "built binary does not run: ${BINARY}.tmp"
    mv -f "${BINARY}.tmp" "${BINARY}"
    cp "${WORK_DIR}/build.log" "${CACHE_DIR}/build.log"
    rm -rf "${WORK_DIR}"
    log "built ${BINARY} in $((SECONDS - started)) s"
}

main() {
    case "${1:-}" in
        build) do_build ;;
        path)
            if [[ -x "${BINARY}" ]]; then
                printf '%s\n' "${BINARY}"
            else
                log "no kube-apiserver at ${BINARY}; run: scripts/kube-apiserver.sh build (or make kube-apiserver)"
                exit 1
            fi
            ;;
        version) printf '%s\n' "${K8S_VERSION}" ;;
        clean)
            log "removing ${CACHE_DIR}"
            rm -rf "${CACHE_DIR}"
            ;;
        *)
            echo "usage: $0 build|path|version|clean" >&2
            exit 2
            ;;
    esac
}

main "$@"
