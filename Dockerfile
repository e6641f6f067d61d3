# kaisched container image: `kaisched run` in a Kubernetes cluster (see docs/install.md).
#   docker build -t <registry>/kaisched:0.1.0 .
# The first stage builds kaisched's wheel, which carries the scheduling core compiled with mypyc (hatch_build.py,
# docs/performance.md), hence the C compiler there; it installs the development lock (requirements/dev.txt: the
# locked mypyc, stubs, setuptools and hatchling, and everything the core is type-checked against) and builds
# without build isolation, so nothing in the build is resolved afresh. The runtime image installs the runtime lock
# (requirements/lock.txt: exact versions with hashes, no extras, so no matplotlib: the simulator's report is not
# part of the scheduler) and the wheel alone, without build tools, and runs as an unprivileged user (uid/gid
# 10001, as in deploy/scheduler.yaml).
# `--build-arg KAISCHED_PURE_PYTHON=1` builds the interpreted core instead (same decisions, about half the speed).
#
# The base image is pinned by digest (the tag beside it is for the reader; Debian 12 "bookworm", as the
# development machines). To move to a newer build of the tag, look its digest up and replace it here:
#   docker buildx imagetools inspect python:3.11-slim-bookworm    (the "Digest:" line), or
#   docker pull python:3.11-slim-bookworm && docker inspect --format '{{index .RepoDigests 0}}' python:3.11-slim-bookworm
ARG BASE_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

FROM ${BASE_IMAGE} AS build
ARG KAISCHED_PURE_PYTHON=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore \
    KAISCHED_PURE_PYTHON=${KAISCHED_PURE_PYTHON}
RUN apt-get update \
    && apt-get install --yes --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY requirements/dev.txt ./requirements/
RUN pip install --require-hashes --no-deps -r requirements/dev.txt && pip check
COPY pyproject.toml README.md hatch_build.py ./
COPY scripts/compiled.sh ./scripts/
COPY src ./src
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /wheels .

FROM ${BASE_IMAGE}
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --system --gid 10001 kaisched \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin kaisched
COPY requirements/lock.txt /tmp/lock.txt
COPY --from=build /wheels /wheels
RUN pip install --require-hashes --no-deps -r /tmp/lock.txt \
    && pip install --no-deps --no-index /wheels/kaisched-*.whl \
    && pip check \
    && rm -rf /wheels /tmp/lock.txt
USER 10001:10001
WORKDIR /tmp
# /metrics, /healthz and /readyz
EXPOSE 8080
ENTRYPOINT ["kaisched"]
CMD ["run"]
