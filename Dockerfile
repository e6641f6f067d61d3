# kaisched container image: `kaisched run` in a Kubernetes cluster (see docs/install.md).
#   docker build -t <registry>/kaisched:0.1.0 .
# The first stage builds wheels of kaisched and its pinned dependencies: kaisched's carries the scheduling core
# compiled with mypyc (hatch_build.py, docs/performance.md), hence the C compiler there; the runtime image installs
# the wheels without build tools and runs as an unprivileged user (uid/gid 10001, as in deploy/scheduler.yaml).
# `--build-arg KAISCHED_PURE_PYTHON=1` builds the interpreted core instead (same decisions, about half the speed).
FROM python:3.11-slim AS build
ARG KAISCHED_PURE_PYTHON=
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 KAISCHED_PURE_PYTHON=${KAISCHED_PURE_PYTHON}
RUN apt-get update \
    && apt-get install --yes --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml README.md hatch_build.py ./
COPY scripts/compiled.sh ./scripts/
COPY src ./src
RUN pip wheel --wheel-dir /wheels .

FROM python:3.11-slim
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib
RUN groupadd --system --gid 10001 kaisched \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin kaisched
COPY --from=build /wheels /wheels
RUN pip install --no-index --find-links /wheels kaisched && rm -rf /wheels
USER 10001:10001
WORKDIR /tmp
# /metrics, /healthz and /readyz
EXPOSE 8080
ENTRYPOINT ["kaisched"]
CMD ["run"]
