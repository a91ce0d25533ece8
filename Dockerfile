# ucx-go on Debian 13 "trixie" (UCX 1.18.1), from the same package list as
# the root filesystem that `make test` builds (ci/packages.txt).
# No Docker engine runs on the project's machines, so this file is not
# built in CI; ci/rootfs.sh builds the equivalent environment there.
FROM debian:trixie

COPY ci/packages.txt /tmp/packages.txt
RUN apt-get update \
 && sed -e 's/#.*//' /tmp/packages.txt | xargs apt-get install -y --no-install-recommends golang-go git \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY . .
# Inside the image pkg-config finds UCX 1.18.1, so the Makefile runs natively.
RUN go mod download \
 && go vet ./... \
 && go build -o /usr/local/bin/ucx-doctor ./examples/doctor \
 && go build -o /usr/local/bin/ucx-exporter ./examples/exporter \
 && go build -o /usr/local/bin/ucx-importer ./examples/importer \
 && mkdir -p /usr/local/lib/ucx-go-tests \
 && go test -c -o /usr/local/lib/ucx-go-tests/ ./...

# docker run IMAGE                       -> the doctor report
# docker run IMAGE make demo             -> exporter/importer round trip
# docker run --privileged IMAGE make test -> the test suites (the network
#                                           namespace test needs CAP_SYS_ADMIN)
CMD ["ucx-doctor"]
