# One image for the manager and the node agents; each Deployment or
# DaemonSet picks its binary with `command`.
FROM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH

WORKDIR /workspace
# Download modules in their own layer so that source edits do not refetch them.
COPY go.mod go.sum ./
RUN go mod download

COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/

# TARGETOS/TARGETARCH are set by `docker buildx --platform`; plain builds use the host's.
RUN CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags="-s -w" -o out/ ./cmd/manager ./cmd/ip-agent ./cmd/reboot-agent ./cmd/pulsar-consumer

# Distroless static: no shell, no package manager, runs as nonroot (65532).
FROM gcr.io/distroless/static:nonroot
WORKDIR /
COPY --from=builder /workspace/out/ /
USER 65532:65532

ENTRYPOINT ["/manager"]
