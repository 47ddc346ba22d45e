# The wanlab image: `wanlab` (controller, WAN router, benchmarks) and `wanlab-agent` on
# Debian bookworm. docker-compose.yml runs the default lab from it (docs/docker.md).
#
#   docker build -t wanlab .          (docker-compose up builds it too)
#
# Build stage: the same CMake project and flags as scripts/build.sh (warnings as errors),
# only the two programs (no tests, no benchmarks), without debug information.
FROM debian:bookworm AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config ninja-build \
      libnl-3-dev libnl-route-3-dev libboost-dev libboost-system-dev \
      nlohmann-json3-dev libspdlog-dev libfmt-dev libcli11-dev libyaml-cpp-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY cmake cmake
COPY common common
COPY controller controller
COPY agents agents
# Parallel compile jobs (docker build --build-arg JOBS=N).
ARG JOBS=2
RUN cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" \
      -DWANLAB_WERROR=ON -DWANLAB_BUILD_TESTS=OFF -DWANLAB_BUILD_BENCH=OFF \
 && cmake --build build -j"$JOBS" --target wanlab wanlab-agent \
 && strip build/controller/wanlab build/agents/wanlab-agent

# Run stage: the runtime libraries, the tools the lab's checks use inside containers, and
# gnuplot, with which `wanlab bench` and `wanlab run` draw their plots (docs/metrics.md).
FROM debian:bookworm
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      libnl-3-200 libnl-route-3-200 libspdlog1.10 libfmt9 libyaml-cpp0.7 \
      iproute2 iputils-ping iperf3 gnuplot-nox \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/controller/wanlab /src/build/agents/wanlab-agent /usr/local/bin/
WORKDIR /wanlab
CMD ["wanlab", "--help"]
