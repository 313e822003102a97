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
# ca-certificates: the system roots agentgate adds to its upstream trust store.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# A fixed non-root uid, so volume ownership is predictable across rebuilds.
RUN groupadd --system --gid 10001 agentgate \
    && useradd --system --uid 10001 --gid agentgate --home-dir /var/lib/agentgate --shell /usr/sbin/nologin agentgate \
    && install -d -o agentgate -g agentgate -m 0755 /var/lib/agentgate /var/lib/agentgate/logs /var/lib/agentgate/public \
    && install -d -o agentgate -g agentgate -m 0700 /var/lib/agentgate/certs
COPY --from=build /usr/local/bin/agentgate /usr/local/bin/agentgate
COPY docker/agentgate.toml /etc/agentgate/agentgate.toml
USER agentgate
WORKDIR /var/lib/agentgate
# Fail the image build, not the first start, if the shipped config is wrong.
RUN agentgate config check /etc/agentgate/agentgate.toml
# The CA (certificate + 0600 key): keep it across upgrades, or every agent must re-trust.
VOLUME ["/var/lib/agentgate/certs"]
# 8080: the proxy; 9090: the admin API (publish it on loopback only).
EXPOSE 8080 9090
ENTRYPOINT ["agentgate"]
CMD ["run", "--config", "/etc/agentgate/agentgate.toml"]
