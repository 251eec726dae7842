# syntax=docker/dockerfile:1
#
# Two stages: the builder turns the source tree into a wheel; the runtime stage installs
# only that wheel (dependencies pinned by constraints.txt) and nothing else. The result
# runs as a numeric non-root user on a read-only root filesystem: nothing is written at
# run time (bytecode is compiled at install time, pip leaves no cache).

# The Python base of both stages: the official image by default. A machine that cannot
# pull it passes its own (`--build-arg PYTHON_BASE=...`), as the tests do with one
# assembled from Debian's packages; it needs `python` with pip.
ARG PYTHON_BASE=python:3.11.11-slim-bookworm

# The builder stage is never shipped, so the required OCI labels (.hadolint.yaml) are
# the runtime stage's alone.
# hadolint ignore=DL3049
FROM ${PYTHON_BASE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY constraints.txt ./
RUN python -m pip install -c constraints.txt build
COPY pyproject.toml README.md ./
COPY zombied ./zombied
RUN python -m build --wheel --outdir /dist .

FROM ${PYTHON_BASE} AS runtime
ARG PYTHON_BASE
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="zombied" \
      org.opencontainers.image.description="Reaps pods left Failed by node shutdowns on preemptible and Spot nodes." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${PYTHON_BASE}"
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Bind mounts keep the wheel and the constraints out of the image layers. pip compiles
# the bytecode now, so that nothing needs writing at run time.
RUN --mount=type=bind,from=builder,source=/dist,target=/wheels \
    --mount=type=bind,source=constraints.txt,target=/tmp/constraints.txt \
    python -m pip install --no-cache-dir --compile -c /tmp/constraints.txt /wheels/zombied-*.whl
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# 65532 is the conventional "nonroot" UID of distroless images; numeric so that
# Kubernetes can verify runAsNonRoot without reading /etc/passwd.
USER 65532:65532
EXPOSE 8080
# Exec form: zombied is PID 1 and receives SIGTERM itself, then drains and exits.
ENTRYPOINT ["zombied"]
CMD ["run"]
