# syntax=docker/dockerfile:1.7
#
# gpu-otel-sidecar image: a glibc-dynamic Rust binary on distroless/cc (Debian 12), run as
# the distroless `nonroot` user (65532). The NVIDIA Container Toolkit injects
# libnvidia-ml.so.1 at run time (NVIDIA_DRIVER_CAPABILITIES=utility); nothing from the
# driver is baked in.
#
#   docker build -t gpu-otel-sidecar:dev .
#   docker run --rm --gpus all -e OTEL_METRICS_EXPORTER=console gpu-otel-sidecar:dev

# ---- build ----------------------------------------------------------------------------
FROM rust:1-bookworm AS builder
WORKDIR /src
# The whole workspace is needed for cargo to resolve it (tests/nvml-mock is a member), but
# only the agent package is built. .dockerignore keeps target/, .git, helm/, docker/ out.
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry,sharing=locked \
    --mount=type=cache,target=/src/target,sharing=locked \
    cargo build --release --locked -p gpu-otel-sidecar \
    && install -D -m 0755 target/release/gpu-otel-sidecar /out/gpu-otel-sidecar

# ---- run ------------------------------------------------------------------------------
# distroless/cc has glibc, libm and libgcc_s and nothing else (no shell, no curl): the
# HEALTHCHECK uses the agent's own `health` subcommand.
FROM gcr.io/distroless/cc-debian12:nonroot

ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
ARG SOURCE=""
LABEL org.opencontainers.image.title="gpu-otel-sidecar" \
      org.opencontainers.image.description="Sidecar agent that reads NVIDIA GPUs through NVML and pushes OpenTelemetry metrics and events over OTLP with Kubernetes pod attributes" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="gcr.io/distroless/cc-debian12:nonroot"

COPY --from=builder --chown=0:0 --chmod=0755 /out/gpu-otel-sidecar /gpu-otel-sidecar

# `utility` is the capability that makes the NVIDIA Container Toolkit mount
# libnvidia-ml.so.1 (and nvidia-smi); no compute libraries are needed.
# NVIDIA_VISIBLE_DEVICES is deliberately not set: which GPUs the sidecar sees is decided
# by whoever runs it (`--gpus`, compose device reservations, the Helm chart's modes).
ENV NVIDIA_DRIVER_CAPABILITIES=utility \
    GPU_SIDECAR_HEALTH_ADDR=0.0.0.0:13134

# The distroless `nonroot` user, written as numbers so that Kubernetes' runAsNonRoot can
# verify it without a runAsUser (a user *name* in the image cannot be checked).
USER 65532:65532
EXPOSE 13134

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/gpu-otel-sidecar", "health"]

ENTRYPOINT ["/gpu-otel-sidecar"]
