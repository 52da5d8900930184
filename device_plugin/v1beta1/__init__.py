"""Generated kubelet Device Plugin API v1beta1 stubs; regenerate with scripts/gen_proto.sh, do not edit."""
