# syntax=docker/dockerfile:1
# raylog image, from the repository root:
#   docker build --build-arg RAYLOG_BUILD_COMMIT=$(git rev-parse --short=10 HEAD) -t raylog:0.1.0 .
# (.git is not in the build context: the commit `raylog --version` names comes from
# the build argument, else it says it was built outside a git checkout.)
#
# Stage 1 builds a release binary; stage 2 is distroless/cc (glibc, CA roots, no
# shell, no package manager) running as the non-root user 65532. The binary links
# rustls (no OpenSSL), so glibc and libgcc_s are all it needs, and bookworm in
# both stages keeps the glibc the binary was linked against.

ARG RUST_VERSION=1.95
FROM rust:${RUST_VERSION}-slim-bookworm AS build
WORKDIR /src
# Only what the build reads: the manifests and the crates' sources. Fixtures and
# benches stay out of the context (.dockerignore); nothing but the binary and the
# default config reaches the final image.
COPY Cargo.toml Cargo.lock build.rs ./
COPY parsers ./parsers
COPY src ./src
# A workspace member (the Python module); only its manifest and sources are read.
COPY python/Cargo.toml ./python/Cargo.toml
COPY python/src ./python/src
# Cargo.toml names tests/it/main.rs; the manifest must find it even for --bin.
COPY tests ./tests
# The cache mounts keep the registry and target dir between builds; the binary is
# copied out of the mount because the mount is not part of the layer.
ARG RAYLOG_BUILD_COMMIT=
# Man pages and completions are made by the binary just built, from its own clap
# definitions (`raylog man`, `raylog completions`), so they match its --help.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin raylog \
 && install -D -m 0755 target/release/raylog /out/raylog \
 && /out/raylog man /out/share/man/man1 \
 && mkdir -p /out/share/bash-completion/completions /out/share/zsh/site-functions /out/share/fish/vendor_completions.d \
 && /out/raylog completions bash > /out/share/bash-completion/completions/raylog \
 && /out/raylog completions zsh > /out/share/zsh/site-functions/_raylog \
 && /out/raylog completions fish > /out/share/fish/vendor_completions.d/raylog.fish \
 && mkdir -p /out/state

FROM gcr.io/distroless/cc-debian12:nonroot
LABEL org.opencontainers.image.title="raylog" \
      org.opencontainers.image.description="Ships Ray's log files as records tagged with Ray ids to Loki or Elasticsearch" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/raylog /usr/local/bin/raylog
COPY --from=build /out/share /usr/local/share
# The default config: read /tmp/ray, NDJSON to stdout, API on 0.0.0.0:9095.
# Mount your own over it (Kubernetes: a ConfigMap at /etc/raylog).
COPY examples/docker/raylog.toml /etc/raylog/raylog.toml
# Checkpoints live here; mount a volume (a hostPath in Kubernetes) so a restarted
# container resumes where it stopped instead of re-sending or skipping.
COPY --from=build --chown=65532:65532 /out/state /var/lib/raylog
VOLUME ["/var/lib/raylog"]
USER 65532:65532
EXPOSE 9095
ENTRYPOINT ["/usr/local/bin/raylog"]
CMD ["ship", "--config", "/etc/raylog/raylog.toml"]
