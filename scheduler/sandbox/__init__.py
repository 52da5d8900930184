"""A real Kubernetes control plane on loopback (etcd, kube-apiserver, kube-controller-manager) for
`tessera sandbox`, `tessera bench e2e` and the tests: binaries from `scripts/build_control_plane.sh`."""
