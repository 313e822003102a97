# syntax=docker/dockerfile:1
# agentgate container image: see docker/compose.yml for a proxy + example agent setup.

# ---- build -------------------------------------------------------------------------------
FROM rust:1-bookworm AS build
WORKDIR /src
# Only what the build reads (benches/ because Cargo.toml declares a [[bench]] target).
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY config ./config
COPY benches ./benches
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin agentgate \
    && install -m 0755 target/release/agentgate /usr/local/bin/agentgate

# ---- runtime -----------------------------------------------------------------------------
FROM debian:bookworm-slim
# ca-certificates: the system roots agentgate adds to its upstream trust store; curl: the
# HEALTHCHECK below.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*
# A fixed non-root uid, so volume ownership is predictable across rebuilds.
RUN groupadd --system --gid 10001 agentgate \
    && useradd --system --uid 10001 --gid agentgate --home-dir /var/lib/agentgate --shell /usr/sbin/nologin agentgate \
    && install -d -o agentgate -g agentgate -m 0755 /var/lib/agentgate /var/lib/agentgate/logs \
    && install -d -o agentgate -g agentgate -m 0700 /var/lib/agentgate/certs
COPY --from=build /usr/local/bin/agentgate /usr/local/bin/agentgate
COPY docker/agentgate.toml /etc/agentgate/agentgate.toml
# For agent images built FROM this one or copying it: installs the CA into a trust store.
COPY docker/trust-ca.sh /usr/local/bin/agentgate-trust-ca
USER agentgate
WORKDIR /var/lib/agentgate
# Fail the image build, not the first start, if the shipped config is wrong.
RUN agentgate config check /etc/agentgate/agentgate.toml
# The CA (certificate + 0600 key): keep it across upgrades, or every agent must re-trust.
# The decision log: keep it for the audit (agentgate audit summary reads rotated files).
VOLUME ["/var/lib/agentgate/certs", "/var/lib/agentgate/logs"]
# 8080: the proxy. The admin API listens on the container's loopback (docker/agentgate.toml),
# where the health check reaches it; read it with `docker compose exec agentgate curl ...`.
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:9090/healthz"]
ENTRYPOINT ["agentgate"]
CMD ["run", "--config", "/etc/agentgate/agentgate.toml"]
