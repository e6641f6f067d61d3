# kaisched container image: `kaisched run` in a Kubernetes cluster (see docs/install.md).
#   docker build -t <registry>/kaisched:0.1.0 .
# The first stage builds wheels of kaisched and its pinned dependencies; the runtime image installs them
# without build tools and runs as an unprivileged user (uid/gid 10001, as in deploy/scheduler.yaml).
FROM python:3.11-slim AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
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
