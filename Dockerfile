# syntax=docker/dockerfile:1
# Images of orderd and paysim: static Go binaries (CGO off; the embedded
# SQLite is pure Go) on distroless/static, running as the nonroot user.
#   docker build --target orderd -t orderly/orderd .
#   docker build --target paysim -t orderly/paysim .
# Not exercised in CI (no Docker engine there); see README "Run it in containers".

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=0 GOFLAGS=-trimpath
RUN go build -ldflags='-s -w' -o /out/orderd ./cmd/orderd && \
    go build -ldflags='-s -w' -o /out/paysim ./cmd/paysim && \
    mkdir -p /out/data /out/paysim-data

FROM gcr.io/distroless/static-debian12:nonroot AS orderd
COPY --from=build /out/orderd /usr/local/bin/orderd
COPY --from=build --chown=65532:65532 /out/data /var/lib/orderd
WORKDIR /var/lib/orderd
# Inside a container the API binds every interface. The admin listener
# (no authentication) stays on loopback; a deployment that lets Prometheus
# scrape it sets ORDERD_ADMIN_ADDR=:9090 and ORDERD_ADMIN_ALLOW_REMOTE=true
# on purpose, as compose.yaml does on its own network.
ENV ORDERD_ADDR=:8080 ORDERD_ADMIN_ADDR=127.0.0.1:9090 ORDERD_DATA_DIR=/var/lib/orderd
EXPOSE 8080
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/orderd"]

FROM gcr.io/distroless/static-debian12:nonroot AS paysim
COPY --from=build /out/paysim /usr/local/bin/paysim
COPY --from=build --chown=65532:65532 /out/paysim-data /var/lib/paysim
WORKDIR /var/lib/paysim
ENV PAYSIM_ADDR=:8090 PAYSIM_DATA_DIR=/var/lib/paysim
EXPOSE 8090
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/paysim"]
