# One image for every role (docs/operations.md):
#   talos server ...             a cluster member (k8s/base/server-deployment.yaml)
#   talos metering run ...       the metering job, Spark in local mode (k8s/overlays/dev)
#   driver | executor ...        the metering job's Spark pods under the spark-operator (k8s/overlays/prod)
#   talos connect run FILE       connectors (k8s/base/connectors-deployment.yaml)
# Build: docker build -t talos:0.1.0 .
FROM python:3.11-slim-bookworm AS build
# gcc builds the compiled record codec (talos/_speedups.c); only this stage has it
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/talos
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY talos talos
COPY server server
COPY hashring hashring
COPY fencing fencing
COPY connectors connectors
COPY metering metering
RUN /opt/talos/bin/pip install --no-cache-dir ".[server,connect,metering]"

FROM python:3.11-slim-bookworm
# Java runs Spark (the metering job); tini forwards SIGTERM so a server hands its partitions off.
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless tini procps \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/talos /opt/talos
COPY scripts/container-entrypoint /usr/local/bin/container-entrypoint
RUN useradd --uid 10001 --home-dir /var/lib/talos --create-home talos
ENV PATH=/opt/talos/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYSPARK_PYTHON=/opt/talos/bin/python \
    TALOS_HOST=0.0.0.0 \
    TALOS_PORT=8080
USER 10001
WORKDIR /var/lib/talos
EXPOSE 8080
ENTRYPOINT ["/usr/bin/tini", "--", "/usr/local/bin/container-entrypoint"]
CMD ["talos", "--help"]
