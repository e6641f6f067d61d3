#!/usr/bin/env bash
# Build and cache the real workload operators for kaisched's operator test tier (tests/operators, marker
# `operators`): the Kubeflow Training Operator and KubeRay's ray-operator, with their CRDs.
#
# Recipe, per operator: a throwaway Go module outside the repository that requires the operator's module at
# the pinned version, `go mod tidy` (so the operator's own go.mod decides every dependency's version), then
# `go build` of its manager package, all from the Go module proxy with the machine's Go (under `nice`). The CRDs
# are copied from the same module version in the module cache (go env GOMODCACHE), so binary and CRDs match.
#
# Usage:
#   scripts/operators.sh build [NAME...]  idempotent; returns at once for each operator already cached
#   scripts/operators.sh path [NAME]      prints the cache directory of all operators, or NAME's binary;
#                                         exit 1 when any asked for is absent
#   scripts/operators.sh version          prints one line per operator: NAME MODULE VERSION
#   scripts/operators.sh clean            removes the cached operators and any leftover work tree
#
# NAME is training-operator or kuberay-operator. Cache: ${KAISCHED_KUBE_CACHE:-$HOME/.cache/kaisched}/
# operators/NAME-VERSION/ holding the binary NAME, crds/*.yaml, build.log and build-seconds (the wall time of
# the build that made it). The Go build and module caches are the machine's own, so a rebuild is quick.
set -euo pipefail

readonly TRAINING_MODULE="github.com/kubeflow/training-operator"
readonly TRAINING_VERSION="v1.8.1"
readonly KUBERAY_MODULE="github.com/ray-project/kuberay/ray-operator"
readonly KUBERAY_VERSION="v1.5.0"
readonly CACHE_ROOT="${KAISCHED_KUBE_CACHE:-${HOME:-/root}/.cache/kaisched}"
readonly OPERATORS_DIR="${CACHE_ROOT}/operators"
readonly NAMES=(training-operator kuberay-operator)

log() { printf '[operators.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Per operator: its Go module, version, the package to build (KubeRay's main.go sits at its module's root) and
# the CRD folder inside the module.
declare -A MODULE=([training-operator]="${TRAINING_MODULE}" [kuberay-operator]="${KUBERAY_MODULE}")
declare -A VERSION=([training-operator]="${TRAINING_VERSION}" [kuberay-operator]="${KUBERAY_VERSION}")
declare -A PACKAGE=([training-operator]="${TRAINING_MODULE}/cmd/training-operator.v1"
                    [kuberay-operator]="${KUBERAY_MODULE}")
declare -A CRD_DIR=([training-operator]="manifests/base/crds" [kuberay-operator]="config/crd/bases")

known() { [[ -n "${MODULE[$1]:-}" ]] || die "unknown operator '$1' (known: ${NAMES[*]})"; }
cache_dir_of() { known "$1"; echo "${OPERATORS_DIR}/$1-${VERSION[$1]}"; }

build_one() {
    local name="$1" module version package dir binary work
    dir="$(cache_dir_of "${name}")"
    module="${MODULE[${name}]}"
    version="${VERSION[${name}]}"
    package="${PACKAGE[${name}]}"
    binary="${dir}/${name}"
    work="${dir}/work"
    mkdir -p "${dir}"
    if [[ -x "${binary}" && -d "${dir}/crds" ]]; then
        log "cached: ${binary}"
        return 0
    fi

    # One build at a time per operator.
    exec 9>"${dir}/.lock"
    if ! flock -n 9; then
        log "another build holds ${dir}/.lock; waiting"
        flock 9
        if [[ -x "${binary}" && -d "${dir}/crds" ]]; then
            log "cached (built by the other process): ${binary}"
            exec 9>&-
            return 0
        fi
    fi

    local started=${SECONDS}
    command -v go >/dev/null 2>&1 || die "no go on PATH"
    log "building ${name} (${module}@${version}) into ${dir} with $(go version | cut -d' ' -f3)"
    rm -rf "${work}" "${dir}/crds"
    mkdir -p "${work}"
    export GOFLAGS="-mod=mod -buildvcs=false" GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0
    # The throwaway module: it requires the operator and imports its manager package under a build tag, so
    # that `go mod tidy` resolves the operator's dependency graph as the operator's own go.mod pins it.
    printf 'module kaisched.local/%s-build\n\ngo 1.24\n\nrequire %s %s\n' "${name}" "${module}" "${version}" \
        >"${work}/go.mod"
    printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "${package}" >"${work}/tools.go"
    log "go mod tidy (log: ${work}/build.log)"
    (cd "${work}" && nice go mod tidy) >"${work}/build.log" 2>&1 \
        || { tail -n 40 "${work}/build.log" >&2; die "go mod tidy for ${name} failed; log in ${work}/build.log"; }
    log "go build ${package}"
    if ! (cd "${work}" && nice go build -trimpath -ldflags "-s -w" -o "${binary}.tmp" "${package}") \
            >>"${work}/build.log" 2>&1; then
        tail -n 40 "${work}/build.log" >&2 || true
        die "go build ${package} failed; full log in ${work}/build.log"
    fi

    # The CRDs of the very same module version, from the module cache `go mod tidy` filled.
    local source crd_dir="${CRD_DIR[${name}]}"
    source="$(cd "${work}" && go list -m -f '{{.Dir}}' "${module}")"
    [[ -n "${source}" && -d "${source}/${crd_dir}" ]] \
        || die "no CRD folder ${crd_dir} in ${module}@${version} (${source:-not in the module cache})"
    mkdir -p "${dir}/crds.tmp"
    local crd count=0
    for crd in "${source}/${crd_dir}"/*.yaml; do
        grep -q '^kind: CustomResourceDefinition' "${crd}" || continue
        cp "${crd}" "${dir}/crds.tmp/"
        chmod u+w "${dir}/crds.tmp/$(basename "${crd}")"
        count=$((count + 1))
    done
    [[ ${count} -gt 0 ]] || die "no CustomResourceDefinition in ${source}/${crd_dir}"
    local rc=0
    "${binary}.tmp" -h >/dev/null 2>&1 || rc=$?
    [[ ${rc} -eq 0 || ${rc} -eq 2 ]] || die "the built ${binary}.tmp does not run (-h exited ${rc})"
    mv -f "${dir}/crds.tmp" "${dir}/crds"
    mv -f "${binary}.tmp" "${binary}"
    cp "${work}/build.log" "${dir}/build.log"
    rm -rf "${work}"
    echo "$((SECONDS - started))" >"${dir}/build-seconds"
    log "built ${binary} and ${count} CRDs in $((SECONDS - started)) s"
    exec 9>&-
}

do_build() {
    local names=("$@") name
    [[ ${#names[@]} -gt 0 ]] || names=("${NAMES[@]}")
    for name in "${names[@]}"; do
        build_one "${name}"
    done
}

do_path() {
    if [[ $# -gt 0 ]]; then
        local binary
        binary="$(cache_dir_of "$1")/$1"
        [[ -x "${binary}" ]] || { log "no $1 at ${binary}; run: scripts/operators.sh build (or make operators)"; exit 1; }
        printf '%s\n' "${binary}"
        return 0
    fi
    local name
    for name in "${NAMES[@]}"; do
        [[ -x "$(cache_dir_of "${name}")/${name}" ]] \
            || { log "no ${name} in ${OPERATORS_DIR}; run: scripts/operators.sh build (or make operators)"; exit 1; }
    done
    printf '%s\n' "${OPERATORS_DIR}"
}

main() {
    local command="${1:-}"
    [[ $# -gt 0 ]] && shift
    case "${command}" in
        build) do_build "$@" ;;
        path) do_path "$@" ;;
        version)
            local name
            for name in "${NAMES[@]}"; do
                printf '%s %s %s\n' "${name}" "${MODULE[${name}]}" "${VERSION[${name}]}"
            done
            ;;
        clean)
            log "removing ${OPERATORS_DIR}"
            rm -rf "${OPERATORS_DIR}"
            ;;
        *)
            echo "usage: $0 build [NAME...]|path [NAME]|version|clean" >&2
            exit 2
            ;;
    esac
}

main "$@"
