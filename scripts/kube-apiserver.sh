#!/usr/bin/env bash
# Build and cache a real kube-apiserver 1.20.2 for kaisched's contract test tier (tests/kube, marker `kube`).
#
# Recipe (docs: shared/spec/ecosystem.md section 2.4): Debian bookworm's `kubernetes` source package
# (1.20.5+really1.20.2), built with Debian's Go 1.19, with the vendored reflect2 1.0.1 swapped for Debian's
# 1.0.2 (1.0.1 segfaults the server on Go >= 1.18 at the first custom-resource write). The server runs against
# Debian's etcd-server 3.4.23.
#
# Usage:
#   scripts/kube-apiserver.sh build   idempotent; returns at once when the binary is cached and etcd installed
#   scripts/kube-apiserver.sh path    prints the cached binary's path; exit 1 when it is absent
#   scripts/kube-apiserver.sh clean   removes the cached binary and any leftover work tree
#
# Cache: ${KAISCHED_KUBE_CACHE:-$HOME/.cache/kaisched}/kube-apiserver-1.20.2/ (never inside the repository).
set -euo pipefail

readonly K8S_VERSION="1.20.2"
readonly GO_VERSION_PREFIX="go1.19"
readonly GO_ROOT="/usr/lib/go-1.19"
readonly REFLECT2_SRC="/usr/share/gocode/src/github.com/modern-go/reflect2"
readonly CACHE_ROOT="${KAISCHED_KUBE_CACHE:-${HOME:-/root}/.cache/kaisched}"
readonly CACHE_DIR="${CACHE_ROOT}/kube-apiserver-${K8S_VERSION}"
readonly BINARY="${CACHE_DIR}/kube-apiserver"
readonly WORK_DIR="${CACHE_DIR}/work"
readonly BUILD_PACKAGES=(golang-go rsync dpkg-dev golang-github-modern-go-reflect2-dev)

log() { printf '[kube-apiserver.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
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

ensure_etcd() {
    if command -v etcd >/dev/null 2>&1; then
        return 0
    fi
    apt_install etcd-server
    command -v etcd >/dev/null 2>&1 || die "etcd-server installed but no 'etcd' on PATH"
    log "etcd: $(etcd --version 2>/dev/null | head -n1)"
}

# Fetch Debian bookworm's `kubernetes` source package into $1 through a private, temporary apt configuration
# (a deb-src list and a lists directory of its own): the machine's apt sources and lists are left untouched.
fetch_source() {
    local dest="$1" apt_tmp
    apt_tmp="$(mktemp -d "${CACHE_DIR}/apt.XXXXXX")"
    mkdir -p "${apt_tmp}/lists/partial" "${apt_tmp}/sources.list.d" "${apt_tmp}/cache/archives/partial"
    cat >"${apt_tmp}/sources.list.d/kaisched-deb-src.sources" <<'EOF'
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    chmod -R a+rX "${apt_tmp}"
    local apt_opts=(
        -o "Dir::Etc::SourceList=/dev/null"
        -o "Dir::Etc::SourceParts=${apt_tmp}/sources.list.d"
        -o "Dir::State::Lists=${apt_tmp}/lists"
        -o "Dir::Cache=${apt_tmp}/cache"
        -o "APT::Sandbox::User=root"
    )
    log "apt-get update (temporary deb-src entry for bookworm main)"
    apt-get "${apt_opts[@]}" update -q >&2 || { rm -rf "${apt_tmp}"; die "apt-get update for deb-src failed"; }
    mkdir -p "${dest}"
    log "apt-get source kubernetes (about 34 MB)"
    if ! (cd "${dest}" && apt-get "${apt_opts[@]}" source -q kubernetes >&2); then
        rm -rf "${apt_tmp}"
        die "apt-get source kubernetes failed"
    fi
    rm -rf "${apt_tmp}"
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
    log "building kube-apiserver ${K8S_VERSION} into ${CACHE_DIR} (about 7 minutes on 2 cores)"
    apt_install "${BUILD_PACKAGES[@]}" etcd-server
    ensure_etcd

    [[ -x "${GO_ROOT}/bin/go" ]] || die "Debian's Go 1.19 is not at ${GO_ROOT} (package golang-go)"
    export PATH="${GO_ROOT}/bin:${PATH}"
    local go_version
    go_version="$(go version)"
    [[ "${go_version}" == *" ${GO_VERSION_PREFIX}"* ]] || die "expected ${GO_VERSION_PREFIX} first on PATH, got: ${go_version}"
    log "toolchain: ${go_version}"
    [[ -f "${REFLECT2_SRC}/reflect2.go" ]] || die "reflect2 1.0.2 sources missing at ${REFLECT2_SRC}"

    # 1. Source (reused when an earlier, failed build already fetched it).
    local src
    if [[ ! -f "${WORK_DIR}/.fetched" ]]; then
        rm -rf "${WORK_DIR}"
        mkdir -p "${WORK_DIR}"
        fetch_source "${WORK_DIR}"
        touch "${WORK_DIR}/.fetched"
    else
        log "reusing fetched source in ${WORK_DIR}"
    fi
    src="$(find "${WORK_DIR}" -mindepth 1 -maxdepth 1 -type d -name 'kubernetes-*' -print -quit)"
    [[ -n "${src}" && -f "${src}/cmd/kube-apiserver/apiserver.go" ]] \
        || die "no kubernetes source tree with cmd/kube-apiserver under ${WORK_DIR}"
    log "source tree: ${src}"

    # 2. Swap the vendored reflect2 1.0.1 for Debian's 1.0.2 (sources only, no tests).
    local vendored="${src}/vendor/github.com/modern-go/reflect2"
    [[ -d "${vendored}" ]] || die "vendored reflect2 not found at ${vendored}"
    if [[ ! -f "${WORK_DIR}/.reflect2-swapped" ]]; then
        log "swapping vendor/github.com/modern-go/reflect2 for Debian's reflect2 1.0.2"
        find "${vendored}" -mindepth 1 -maxdepth 1 \( -name '*.go' -o -name '*.s' \) -delete
        local f copied=0
        for f in "${REFLECT2_SRC}"/*.go "${REFLECT2_SRC}"/*.s; do
            [[ -e "$f" ]] || continue
            [[ "$f" == *_test.go ]] && continue
            cp "$f" "${vendored}/"
            copied=$((copied + 1))
        done
        [[ ${copied} -gt 0 ]] || die "copied no reflect2 files from ${REFLECT2_SRC}"
        touch "${WORK_DIR}/.reflect2-swapped"
    fi

    # 3. Build through the Makefile (its code generation is needed: a plain `go build` lacks the OpenAPI defs).
    # The version is stamped from a version file: the tree is not a git checkout.
    cat >"${WORK_DIR}/version.env" <<EOF
KUBE_GIT_COMMIT='faecb196815e248d3ecfb03c680a4507229c2a56'
KUBE_GIT_TREE_STATE='clean'
KUBE_GIT_VERSION='v${K8S_VERSION}'
KUBE_GIT_MAJOR='1'
KUBE_GIT_MINOR='20'
EOF
    mkdir -p "${WORK_DIR}/home"
    log "make WHAT=cmd/kube-apiserver (log: ${WORK_DIR}/build.log)"
    if ! (
        cd "${src}"
        env HOME="${WORK_DIR}/home" GOPATH="${WORK_DIR}/gopath" \
            CGO_ENABLED=0 GOPROXY=off GOFLAGS=-mod=vendor GO111MODULE=on GOTOOLCHAIN=local \
            KUBE_GIT_VERSION_FILE="${WORK_DIR}/version.env" \
            make WHAT=cmd/kube-apiserver
    ) >"${WORK_DIR}/build.log" 2>&1; then
        tail -n 40 "${WORK_DIR}/build.log" >&2 || true
        die "make WHAT=cmd/kube-apiserver failed; full log in ${WORK_DIR}/build.log (work tree kept for a retry)"
    fi
    local built
    built="$(find "${src}/_output" -type f -name kube-apiserver -perm -u+x -print -quit)"
    [[ -n "${built}" ]] || die "build finished but no kube-apiserver binary under ${src}/_output"
    "${built}" --version >&2 || die "built binary does not run: ${built}"

    cp "${built}" "${BINARY}.tmp"
    mv -f "${BINARY}.tmp" "${BINARY}"
    cp "${WORK_DIR}/build.log" "${CACHE_DIR}/build.log"
    # hack/lib/golang.sh keeps its Go cache inside the tree (_output/local/go/cache): it goes with it.
    log "removing the work tree ${WORK_DIR} (2+ GB)"
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
        clean)
            log "removing ${CACHE_DIR}"
            rm -rf "${CACHE_DIR}"
            ;;
        *)
            echo "usage: $0 build|path|clean" >&2
            exit 2
            ;;
    esac
}

main "$@"
