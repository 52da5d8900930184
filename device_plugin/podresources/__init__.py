"""Generated kubelet PodResources API v1 stubs; regenerate with scripts/gen_proto.sh, do not edit."""
