# enrichd: `daemon run` in a container, on Python 3.11 with a Java 17 runtime for Spark.
#
#   docker build -t enrichd .
#   docker run --rm -v $PWD/my-pipelines.toml:/etc/enrichd/pipelines.toml:ro enrichd
#
# The same image runs a Spark standalone master and worker (docker-compose.yml starts them
# with `spark-class`), so executors import the same enrichd and joiners as the driver.

FROM python:3.11-slim-bookworm

# procps: Spark's launch scripts call `ps`. tini: PID 1 that forwards SIGTERM and reaps
# Spark's child processes.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps tini \
    && rm -rf /var/lib/apt/lists/*

RUN useradd --system --uid 10001 --user-group --home-dir /var/lib/enrichd --create-home \
        --shell /usr/sbin/nologin enrichd \
    && mkdir -p /etc/enrichd /var/lib/enrichd/state /var/lib/enrichd/work \
    && chown -R enrichd:enrichd /var/lib/enrichd
# (A named volume mounted on /var/lib/enrichd/state starts with this owner: writable.)

WORKDIR /opt/enrichd
COPY pyproject.toml README.md ./
COPY daemon ./daemon
RUN pip install --no-cache-dir . && rm -rf /opt/enrichd/daemon /opt/enrichd/build

COPY schemas /etc/enrichd/schemas

USER enrichd
WORKDIR /var/lib/enrichd
ENV HOME=/var/lib/enrichd \
    PYTHONUNBUFFERED=1 \
    ENRICHD_HTTP=0.0.0.0:9464 \
    ENRICHD_LOG_FORMAT=json
# /healthz, /readyz, /metrics (the health check is in docker-compose.yml: the image also
# runs Spark's master and worker, which do not serve it).
EXPOSE 9464

ENTRYPOINT ["tini", "--", "daemon", "run"]
CMD ["/etc/enrichd/pipelines.toml"]
