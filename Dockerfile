# One image for every Tessera component; the Kubernetes objects pick the entry point with `command`:
#   tessera-scheduler       scheduler Deployment (runs as the image's non-root user)
#   tessera-agent           node agent       } DaemonSet on GPU nodes, run as root with hostPID:
#   tessera-device-plugin   device plugin    } see "Why the node pod runs as root" below
#   tessera                 CLI (simulate, nodes, ...)
#
# Build:  docker build -t REGISTRY/tessera:0.1.0 .
#
# Why the node pod runs as root: the agent maps NVML's host PIDs to pods by reading /proc/<pid>/cgroup
# in the host PID namespace (hostPID: true, host /proc mounted read-only) and, with enforcement=kill,
# signals processes of other users; the device plugin creates its gRPC socket in the kubelet's
# root-owned /var/lib/kubelet/device-plugins and registers through the kubelet's socket there. The chart
# sets runAsUser: 0 for those two containers only, drops every capability but KILL (agent), and keeps the
# root filesystem read-only. NVML itself comes from the NVIDIA container runtime
# (NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES=utility), not from this image.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/tessera
WORKDIR /src
# Metadata first so a code change does not invalidate the dependency layer.
COPY pyproject.toml README.md* ./
COPY scheduler ./scheduler
COPY node_agent ./node_agent
COPY device_plugin ./device_plugin
RUN /opt/tessera/bin/pip install .

FROM python:3.11-slim
LABEL org.opencontainers.image.title="tessera" \
      org.opencontainers.image.description="GPU-sharing batch scheduler for Kubernetes" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/tessera/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
COPY --from=build /opt/tessera /opt/tessera
# Fixed ids so the chart's runAsUser/runAsGroup (10001) and runAsNonRoot match the image.
RUN groupadd --system --gid 10001 tessera \
 && useradd --system --uid 10001 --gid 10001 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin tessera
USER 10001:10001
EXPOSE 8080 9443 9400
CMD ["tessera", "--help"]
