# syntax=docker/dockerfile:1
#
# Tollgate admission webhook image.
#   docker build -t tollgate:0.2.0 .
# Stage 1 builds wheels for Tollgate and every dependency; stage 2 installs them
# from that wheelhouse with no network and no compiler. python:3.11-slim is
# Debian (glibc): cel-expr-python ships manylinux (glibc) wheels only, so an
# Alpine/musl base would not work.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Metadata first: pyproject.toml names README.md as the long description.
COPY pyproject.toml README.md ./
COPY webhook ./webhook
RUN pip wheel --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
LABEL org.opencontainers.image.title="tollgate" \
      org.opencontainers.image.description="Kubernetes admission webhook with informer-backed caches and CEL policies" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PYTHONUNBUFFERED=1 \
    # The root filesystem is read-only in the Deployment: never try to write
    # .pyc files at runtime (pip compiled them at install time).
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Install from the build stage's wheelhouse through a bind mount, so the wheels
# never become a layer of the final image.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels tollgate \
 && groupadd --gid 65532 nonroot \
 && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin nonroot
# Numeric, so Kubernetes can verify runAsNonRoot without reading /etc/passwd.
USER 65532:65532
WORKDIR /tmp
EXPOSE 8443
ENTRYPOINT ["tollgate"]
CMD ["serve", "--cert-dir=/etc/tollgate/tls", "--port=8443"]
