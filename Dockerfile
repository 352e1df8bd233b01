# enrichd: `daemon run` in a container, on Python 3.11 with a Java 17 runtime for Spark.
#
#   docker build -t enrichd .
#   docker run --rm -v $PWD/my-pipelines.toml:/etc/enrichd/pipelines.toml:ro enrichd
#   docker run --rm enrichd demo                  # any other `daemon` command, the same way
#
# The same image runs a Spark standalone master and worker (docker-compose.yml starts them
# with `spark-class`), so executors import the same enrichd and joiners as the driver.
#
# BASE_IMAGE: any Debian 12 image with Python 3.11 and its venv module (CI, which reaches no
# container registry, builds one with debootstrap: .ci/containers).
ARG BASE_IMAGE=python:3.11-slim-bookworm

# Build stage: enrichd and its dependencies in a virtual environment at /opt/enrichd, the
# path the systemd unit uses too. Only that folder reaches the final image, so pip's cache
# and anything else the installation leaves behind stay here.
FROM ${BASE_IMAGE} AS build
RUN python3 -m venv /opt/enrichd
WORKDIR /src
COPY pyproject.toml README.md ./
COPY daemon ./daemon
COPY examples ./examples
COPY schemas ./schemas
# pandas' and pyarrow's test suites and pyarrow's C++ headers are never used at run time.
RUN /opt/enrichd/bin/pip install . \
    && cd /opt/enrichd/lib/python3*/site-packages \
    && rm -rf pandas/tests pyarrow/tests pyarrow/include

FROM ${BASE_IMAGE}

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

COPY --from=build /opt/enrichd /opt/enrichd
# Relative schema paths in a pipeline file mounted at /etc/enrichd/pipelines.toml resolve here.
COPY schemas /etc/enrichd/schemas

# Spark's class archive (docs/operations.md, "Start-up and rolling restarts"), recorded once
# here by a demo run, so that every container maps it (ENRICHD_CLASS_ARCHIVE=map below) and
# none pays for recording one that would die with it: each start is ~5 s shorter.
# (A build container's host name need not resolve: Spark is told to use loopback.)
ENV ENRICHD_CLASS_ARCHIVE_DIR=/opt/enrichd/class-archive
RUN SPARK_LOCAL_IP=127.0.0.1 SPARK_LOCAL_HOSTNAME=localhost /opt/enrichd/bin/daemon demo >/dev/null \
    && rm -rf /tmp/* /root/.cache

USER enrichd
WORKDIR /var/lib/enrichd
ENV PATH=/opt/enrichd/bin:$PATH \
    HOME=/var/lib/enrichd \
    PYTHONUNBUFFERED=1 \
    ENRICHD_HTTP=0.0.0.0:9464 \
    ENRICHD_LOG_FORMAT=json \
    ENRICHD_SPARK_LOG=stdout \
    ENRICHD_CLASS_ARCHIVE=map
# ENRICHD_SPARK_LOG=stdout: `daemon run`'s Spark log goes to the container's output (its
# own lines go to stderr, as JSON), not to a file inside the container.
# /healthz, /readyz, /metrics (the health check is in the compose files: the image also
# runs Spark's master and worker, which do not serve it).
EXPOSE 9464

ENTRYPOINT ["tini", "--", "daemon"]
CMD ["run", "/etc/enrichd/pipelines.toml"]
