#!/usr/bin/env bash
# Build a Kubernetes control plane for tests, `tessera sandbox` and `tessera bench e2e`, from Go modules:
# etcd (go.etcd.io/etcd/server/v3) and kube-apiserver, kube-controller-manager, kube-scheduler, kubectl,
# kubelet (k8s.io/kubernetes), plus fakecri, our CRI runtime without containers for the sandbox's kubelets
# (scripts/control_plane/fakecri, on k8s.io/cri-client's fake at the same release). Output: one folder in
# envtest layout; its path is the last line printed.
#
# Idempotent and cached: a complete folder whose stamp matches the pinned modules is reused at once.
# KUBEBUILDER_ASSETS is honoured: binaries found there are linked, only the missing ones are built
# (setup-envtest's folders hold etcd, kube-apiserver and kubectl).
#
# The build modules are ours (scripts/control_plane/{kubernetes,etcd}/go.mod): they only require the
# upstream modules at one release. k8s.io/kubernetes requires its ~30 staging modules at v0.0.0, so the
# kubernetes module pins each one with a `replace` line to the matching v0.X.Y (that release's own replace
# block, with ./staging/src/k8s.io/NAME rewritten to k8s.io/NAME v0.X.Y). fakecri's module requires
# k8s.io/cri-client and k8s.io/cri-api at that v0.X.Y; it is rebuilt whenever its sources change.
#
# Environment:
#   TESSERA_CONTROL_PLANE_DIR  output folder (default: ~/.cache/tessera/control-plane/<versions>)
#   KUBEBUILDER_ASSETS         a folder of prebuilt binaries to reuse
#   GOMODCACHE, GOCACHE        Go's caches (defaults are shared by every build on the machine)
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
src="$here/control_plane"
k8s_version="$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" {print $3}' "$src/kubernetes/go.mod")"
etcd_version="$(awk '$1 == "require" && $2 == "go.etcd.io/etcd/server/v3" {print $3}' "$src/etcd/go.mod")"
out="${TESSERA_CONTROL_PLANE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera/control-plane/k8s-${k8s_version}_etcd-${etcd_version}}"
fakecri_stamp="$(cat "$src"/fakecri/go.mod "$src"/fakecri/go.sum "$src"/fakecri/*.go | sha256sum | cut -c1-16)"
stamp_want="$( (cat "$src"/kubernetes/go.mod "$src"/kubernetes/go.sum "$src"/etcd/go.mod "$src"/etcd/go.sum
               echo "$fakecri_stamp") | sha256sum | cut -c1-16)"

say() { printf '[control-plane] %s\n' "$*" >&2; }

k8s_bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet)
all_bins=(etcd "${k8s_bins[@]}" fakecri)

complete() {
    [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp_want" ] || return 1
    for b in "${all_bins[@]}"; do [ -x "$out/$b" ] || return 1; done
}

# sched-oracle (tests and `tessera bench e2e`): kube-scheduler's own Filter plugins over a snapshot, a small
# program of the kubernetes module (scripts/control_plane/kubernetes/schedoracle, the same pins). It has a
# stamp of its own (its sources and the pins): a cached folder rebuilds it only when they change, whatever
# state the rest of the folder is in. Without Go it is left out (what needs it says so).
build_sched_oracle() {
    local want have t0
    want="$(cat "$src"/kubernetes/go.mod "$src"/kubernetes/go.sum "$src"/kubernetes/schedoracle/*.go | sha256sum | cut -c1-16)"
    have="$(cat "$out/.sched-oracle.stamp" 2>/dev/null || true)"
    if [ "$have" = "$want" ] && [ -x "$out/sched-oracle" ]; then return 0; fi
    command -v go >/dev/null || { say "sched-oracle not built: Go is needed"; return 0; }
    mkdir -p "$out"
    t0=$(date +%s)
    say "building sched-oracle ..."
    (cd "$src/kubernetes" && GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0 \
        go build -trimpath -ldflags="-s -w" -o "$out/sched-oracle.tmp" ./schedoracle)
    mv "$out/sched-oracle.tmp" "$out/sched-oracle"
    echo "$want" > "$out/.sched-oracle.stamp"
    say "built sched-oracle in $(( $(date +%s) - t0 )) s"
}
build_sched_oracle

if complete; then
    say "up to date: Kubernetes $k8s_version, etcd $etcd_version"
    echo "$out"
    exit 0
fi

command -v go >/dev/null || { say "error: Go is needed to build the control plane (or set KUBEBUILDER_ASSETS)"; exit 2; }
mkdir -p "$out"
rm -f "$out/.stamp"

# fakecri is ours: a source change rebuilds it (the other binaries change only with the pins, which name the
# folder).
[ "$(cat "$out/.fakecri.stamp" 2>/dev/null)" = "$fakecri_stamp" ] || rm -f "$out/fakecri"

# Reuse what KUBEBUILDER_ASSETS already has.
if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ -d "$KUBEBUILDER_ASSETS" ]; then
    for b in etcd "${k8s_bins[@]}"; do
        if [ -x "$KUBEBUILDER_ASSETS/$b" ] && [ ! -x "$out/$b" ]; then
            ln -sf "$KUBEBUILDER_ASSETS/$b" "$out/$b"
            say "using $KUBEBUILDER_ASSETS/$b"
        fi
    done
fi

# Version stamps, as Kubernetes' own build writes them (hack/lib/version.sh): without them the binaries
# call themselves v0.0.0-master and kubectl warns about version skew.
k8s_minor="$(echo "$k8s_version" | cut -d. -f2)"
k8s_ldflags=""
for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    k8s_ldflags="$k8s_ldflags -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
    k8s_ldflags="$k8s_ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
etcd_ldflags="-X go.etcd.io/etcd/api/v3/version.GitSHA=${etcd_version}"

build() {  # build MODULE_DIR PACKAGE NAME EXTRA_LDFLAGS
    local dir="$1" pkg="$2" name="$3" ldflags="-s -w $4" t0
    if [ -x "$out/$name" ]; then return 0; fi
    t0=$(date +%s)
    say "building $name ($pkg) ..."
    (cd "$dir" && CGO_ENABLED=0 go build -trimpath -ldflags="$ldflags" -o "$out/$name.tmp" "$pkg")
    mv "$out/$name.tmp" "$out/$name"
    say "built $name in $(( $(date +%s) - t0 )) s"
}

export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
say "Kubernetes $k8s_version, etcd $etcd_version: a cold build takes minutes (modules are downloaded as needed)"
build "$src/etcd" go.etcd.io/etcd/server/v3 etcd "$etcd_ldflags"
for b in "${k8s_bins[@]}"; do
    build "$src/kubernetes" "k8s.io/kubernetes/cmd/$b" "$b" "$k8s_ldflags"
done
build "$src/fakecri" . fakecri ""
echo "$fakecri_stamp" > "$out/.fakecri.stamp"

echo "$stamp_want" > "$out/.stamp"
say "done: $(du -shL "$out" | cut -f1) in $out"
echo "$out"
