# batchgate's container image: Debian 12, the binary, the demo model, a
# default config listening on 0.0.0.0:8000. scripts/build-image builds it
# (with podman or buildah, making the Debian base from Debian's own packages
# where no registry is reachable); docs/DEPLOY.md says how to run it.
#
#   scripts/build-image                       # CPU build, tag localhost/batchgate:latest
#   podman build --format docker -t batchgate .   # the same by hand (a registry must serve debian:bookworm)
#
# GPU builds. The CUDA parts are built only where the build stage has nvcc:
# `--build-arg CUDA=ON` (scripts/build-image --cuda) adds Debian's non-free
# component and installs `nvidia-cuda-toolkit` (CUDA 11.8 in Debian 12; the
# build stage grows to about 8 GB, none of it in the final image). CMake
# links the CUDA runtime statically (CMAKE_CUDA_RUNTIME_LIBRARY Static), so
# the binary needs no CUDA library of its own: the one image serves with or
# without a GPU. The driver (libcuda.so.1, and libnvidia-ml.so.1 for the
# device metrics) is not in the image: on a GPU host the NVIDIA container
# toolkit mounts the host's driver into the container at run time (`podman
# run --device nvidia.com/gpu=all`, `docker run --gpus all`, or the
# Kubernetes device plugin for `nvidia.com/gpu` limits). Without one, the
# cuda backend reports no device and `"backend": "auto"` models run on the
# CPU. Extra CMake options (other CUDA architectures, a host compiler) go in
# `--build-arg CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=80;90"`.
#
# Build with `--format docker`: the OCI image format has no HEALTHCHECK
# (podman and buildah drop it from OCI images with a warning).

# The Debian 12 image both stages start from. scripts/build-image passes a
# local one made with mmdebstrap where no registry is reachable.
ARG BASE=docker.io/library/debian:bookworm

# ---------------------------------------------------------------- build
FROM ${BASE} AS build
ARG CUDA=OFF
ARG CMAKE_ARGS=""
ARG JOBS=0
# The build dependencies of scripts/install-deps (less the test-only ones:
# prometheus, chromium, fonts, curl); cmocka and python3 because CMake
# requires them even for the batchgate target alone.
RUN set -eu; \
    export DEBIAN_FRONTEND=noninteractive; \
    if [ "$CUDA" = ON ]; then \
        if [ -f /etc/apt/sources.list.d/debian.sources ]; then \
            sed -i 's/^Components: main$/Components: main contrib non-free non-free-firmware/' /etc/apt/sources.list.d/debian.sources; \
        else \
            sed -i 's/ main$/ main contrib non-free non-free-firmware/' /etc/apt/sources.list; \
        fi; \
        cuda_pkgs=nvidia-cuda-toolkit; \
    else \
        cuda_pkgs=; \
    fi; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends \
        build-essential cmake pkg-config libevent-dev libjansson-dev libcmocka-dev \
        libsqlite3-dev libutf8proc-dev zlib1g-dev libnghttp2-dev libprotobuf-c-dev protobuf-c-compiler node-llhttp python3 $cuda_pkgs >/dev/null; \
    rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# Only the server: the tests run from a source tree (make test), not here.
RUN set -eu; \
    rm -rf build-image; \
    cmake -S . -B build-image -DCMAKE_BUILD_TYPE=RelWithDebInfo -DBATCHGATE_CUDA=$CUDA $CMAKE_ARGS >/dev/null; \
    cmake --build build-image --target batchgate -j "$([ "$JOBS" -gt 0 ] && echo "$JOBS" || nproc)"; \
    strip --strip-debug build-image/batchgate; \
    build-image/batchgate --version

# ---------------------------------------------------------------- runtime
FROM ${BASE}
# Only the libraries the binary links (ldd build/batchgate), and tzdata for
# the IANA time zones of governance windows (docs/TENANTS.md).
RUN set -eu; \
    export DEBIAN_FRONTEND=noninteractive; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends \
        libevent-2.1-7 libevent-core-2.1-7 libevent-pthreads-2.1-7 libjansson4 libsqlite3-0 libutf8proc2 zlib1g libnghttp2-14 libprotobuf-c1 \
        tzdata >/dev/null; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/debconf/*-old /var/log/apt /var/log/dpkg.log; \
    groupadd --gid 10001 batchgate; \
    useradd --uid 10001 --gid 10001 --home-dir /var/lib/batchgate --no-create-home --no-log-init \
        --shell /usr/sbin/nologin batchgate; \
    mkdir -p /var/lib/batchgate/state; \
    chown -R 10001:10001 /var/lib/batchgate

COPY --from=build /src/build-image/batchgate /usr/local/bin/batchgate
COPY models/digits/config.json models/digits/labels.txt models/digits/model.safetensors \
     models/digits/README.md /opt/batchgate/models/digits/
# The default config: every interface (a container's port is reached
# through its network namespace), the bundled model, and state (the SQLite
# database, packed weights, job files) under the volume. shutdown_timeout_ms
# stays at its default, 30 s; the stop timeout of whatever runs the
# container (podman stop -t, Kubernetes' terminationGracePeriodSeconds)
# must be longer (docs/DEPLOY.md).
COPY deploy/image/config.json /etc/batchgate/config.json

# The driver's libraries the NVIDIA container toolkit mounts: compute for
# libcuda, utility for NVML (device memory and power in /metrics).
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility
# Numeric, so Kubernetes' runAsNonRoot can check it without /etc/passwd.
USER 10001:10001
WORKDIR /var/lib/batchgate
VOLUME ["/var/lib/batchgate"]
EXPOSE 8000 8001
# SIGTERM drains: stop accepting, answer what was accepted, exit 0, within
# shutdown_timeout_ms (docs/RELIABILITY.md). It is the default, said anyway.
STOPSIGNAL SIGTERM
# Ready, not merely live: "healthy" is what compose's depends_on and a
# load balancer wait for. It fails while models load (start-period covers a
# slow load) and while draining. Bash's /dev/tcp and grep are in every Debian
# image, so the check needs nothing installed: HTTP/1.0, the server answers
# and closes, the status line must say 200.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD ["/bin/bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8000 && printf 'GET /v2/health/ready HTTP/1.0\\r\\n\\r\\n' >&3 && head -n 1 <&3 | grep -q ' 200 '"]
ENTRYPOINT ["/usr/local/bin/batchgate"]
CMD ["--config", "/etc/batchgate/config.json"]
