#!/usr/bin/env bash
# Build kaisched's scheduling core compiled with mypyc (docs/performance.md) into build/compiled.
#
# The package is copied to build/compiled/kaisched and the modules of the scheduling core (model, framework,
# plugins, actions, pod-grouper, the cycle engine) are compiled there to C extensions next to their sources;
# the rest (parsing, Kubernetes mode, CLI, simulator) stays interpreted. Nothing is written into src/, so an edited
# source is never shadowed by a stale extension. Use it with PYTHONPATH=build/compiled.
#
# Usage:
#   scripts/compiled.sh [build]   idempotent: rebuilds when a source file, mypyc or Python changed (~2 min)
#   scripts/compiled.sh path      prints the build's path; exit 1 when it is absent or out of date
#   scripts/compiled.sh clean     removes the build
#
# Needs the virtual environment's mypyc (the dev extra) and a C compiler with Python's headers.
set -euo pipefail

cd "$(dirname "$0")/.."
readonly OUT=build/compiled
readonly MYPYC="${MYPYC:-.venv/bin/mypyc}"
readonly PYTHON="${PYTHON_BIN:-.venv/bin/python}"
# the compiled packages (each one's modules, not its __init__), in layer order; and modules left out of them.
# Not compiled: what reads input of any type — k8s parsing (parse.py, quantity.py, loader.py), the
# simulator's traces and scenarios (sim/traces.py, openb.py, scenario.py), framework/config.py: compiled
# functions check their arguments' types and chain exceptions otherwise, and bad input must get its clear error.
readonly PACKAGES=(k8s model framework plugins plugins/proportion actions podgrouper cluster sim)
readonly EXCLUDED=(k8s/parse.py k8s/quantity.py k8s/loader.py framework/config.py sim/traces.py sim/openb.py
                   sim/scenario.py sim/validate.py)

log() { printf '[compiled.sh %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

fingerprint() {
    {
        "$PYTHON" -c 'import sys, mypy.version; print(sys.version, mypy.version.__version__)'
        printf '%s\n' "${PACKAGES[@]}" -- "${EXCLUDED[@]}"
        find src/kaisched -type f ! -path '*/__pycache__/*' -print0 | sort -z | xargs -0 sha256sum  # (assets too)
    } | sha256sum | cut -d' ' -f1
}

current() { [[ -f "$OUT/.fingerprint" && "$(cat "$OUT/.fingerprint")" == "$(fingerprint)" ]]; }

build() {
    # one build at a time (make compiled, a wheel's build hook): the second waits, then finds it current
    mkdir -p "$(dirname "$OUT")"
    exec 9>"$OUT.lock"
    flock 9
    if current; then
        echo "$OUT"
        return
    fi
    [[ -x "$MYPYC" ]] || die "$MYPYC not found: run 'make test' or 'make compiled' (they install the dev extra)"
    log "compiling the core with mypyc into $OUT (about 2 minutes)"
    rm -rf "$OUT"
    mkdir -p "$OUT"
    local print
    print="$(fingerprint)"  # (of the sources as copied: an edit during the build makes the next build run)
    cp -r src/kaisched "$OUT/kaisched"
    find "$OUT" -name __pycache__ -prune -exec rm -rf {} +
    local files=()
    local pkg f
    for pkg in "${PACKAGES[@]}"; do
        for f in "$OUT/kaisched/$pkg"/*.py; do
            [[ "$(basename "$f")" == "__init__.py" ]] && continue
            [[ " ${EXCLUDED[*]} " == *" ${f#"$OUT"/kaisched/} "* ]] && continue
            files+=("${f#"$OUT"/}")
        done
    done
    local mypyc
    mypyc="$(cd "$(dirname "$MYPYC")" && pwd)/$(basename "$MYPYC")"
    if ! (cd "$OUT" && "$mypyc" "${files[@]}" >mypyc.log 2>&1); then
        tail -40 "$OUT/mypyc.log" >&2
        rm -rf "$OUT"
        die "mypyc failed (the log's tail above)"
    fi
    rm -rf "$OUT/build"
    printf '%s\n' "$print" >"$OUT/.fingerprint"
    log "built: ${#files[@]} modules compiled"
    echo "$OUT"
}

case "${1:-build}" in
    build) build ;;
    path) current || exit 1; echo "$OUT" ;;
    clean) rm -rf "$OUT" ;;
    *) die "usage: $0 [build|path|clean]" ;;
esac
