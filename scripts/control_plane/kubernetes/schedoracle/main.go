// sched-oracle answers, for a pod and a cluster snapshot, which nodes kube-scheduler's own Filter plugins
// accept: the default profile of k8s.io/kubernetes (the release the control plane is built from), its
// in-tree plugin registry and framework runtime, over a snapshot of nodes and pods and informers fed with
// the snapshot's PersistentVolumes, PersistentVolumeClaims, StorageClasses, Namespaces and CSINodes. It is
// Tessera's test oracle (tests/kube_rules): nothing in it decides anything; kube-scheduler's code does.
//
// Protocol: one JSON object per line on stdin, one answer per line on stdout, so a test keeps one process
// for thousands of cases. A request:
//
//	{"nodes": [Node], "pods": [Pod bound to a node], "pvs": [...], "pvcs": [...], "storageClasses": [...],
//	 "namespaces": [...], "csiNodes": [...], "pod": Pod}
//
// Objects are as a user writes them; they are defaulted as the API server would (the core/v1 defaulters).
// The answer:
//
//	{"feasible": [node names, sorted], "filtered": {node: {"plugin": name, "reasons": [...]}},
//	 "preFilter": {"plugin": name, "code": status code, "reasons": [...]} or absent, "error": "..." or absent}
//
// A PreFilter that rejects the pod rejects every node (kube-scheduler's own rule); one that narrows the
// nodes (PreFilterResult) filters the others with plugin "PreFilterResult".
//
// With "sequence": true and no "pod", every pod of "pods" (each with its spec.nodeName) is judged against
// the pods before it, as if it were being scheduled after them: "sequence" holds one answer per pod (a
// check of a scheduler's placements, in the order it made them, in one request).

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/dynamic-resource-allocation/resourceslice/tracker"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/apis/config/latest"
	internalcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkplugins "k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/dynamicresources"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	"k8s.io/kubernetes/pkg/scheduler/util/assumecache"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
)

type request struct {
	Nodes          []*v1.Node                  `json:"nodes"`
	Pods           []*v1.Pod                   `json:"pods"`
	PVs            []*v1.PersistentVolume      `json:"pvs"`
	PVCs           []*v1.PersistentVolumeClaim `json:"pvcs"`
	StorageClasses []*storagev1.StorageClass   `json:"storageClasses"`
	Namespaces     []*v1.Namespace             `json:"namespaces"`
	CSINodes       []*storagev1.CSINode        `json:"csiNodes"`
	Pod            *v1.Pod                     `json:"pod"`
	// Sequence: instead of one pod, judge every pod of Pods (each bound to spec.nodeName) against the
	// pods before it, as if it were being scheduled after them; the answers are in Sequence.
	Sequence bool `json:"sequence"`
}

type verdict struct {
	Plugin  string   `json:"plugin"`
	Code    string   `json:"code,omitempty"`
	Reasons []string `json:"reasons"`
}

type answer struct {
	Feasible  []string           `json:"feasible"`
	Filtered  map[string]verdict `json:"filtered"`
	PreFilter *verdict           `json:"preFilter,omitempty"`
	Error     string             `json:"error,omitempty"`
	Sequence  []*answer          `json:"sequence,omitempty"`
}

var uidCounter int

// defaulted applies the API server's defaults (core/v1 defaulters) and fills what the API server sets
// (uid, namespace), so the plugins see objects as they would read them from a real cluster.
func defaulted(obj runtime.Object) {
	legacyscheme.Scheme.Default(obj)
}

func fillMeta(kind string, ns *string, uid *types.UID, name string, namespaced bool) {
	if namespaced && *ns == "" {
		*ns = "default"
	}
	if *uid == "" {
		uidCounter++
		*uid = types.UID(fmt.Sprintf("%s-%s-%d", kind, name, uidCounter))
	}
}

func evaluate(ctx context.Context, req *request) (*answer, error) {
	if req.Pod == nil && !req.Sequence {
		return nil, fmt.Errorf("no pod in the request")
	}
	objects := []runtime.Object{}
	for _, n := range req.Nodes {
		defaulted(n)
		fillMeta("node", &n.Namespace, &n.UID, n.Name, false)
	}
	all := append([]*v1.Pod{}, req.Pods...)
	if req.Pod != nil {
		all = append(all, req.Pod)
	}
	for _, p := range all {
		defaulted(p)
		fillMeta("pod", &p.Namespace, &p.UID, p.Name, true)
	}
	for _, o := range req.PVs {
		defaulted(o)
		fillMeta("pv", &o.Namespace, &o.UID, o.Name, false)
		objects = append(objects, o)
	}
	for _, o := range req.PVCs {
		defaulted(o)
		fillMeta("pvc", &o.Namespace, &o.UID, o.Name, true)
		objects = append(objects, o)
	}
	for _, o := range req.StorageClasses {
		defaulted(o)
		objects = append(objects, o)
	}
	for _, o := range req.Namespaces {
		defaulted(o)
		objects = append(objects, o)
	}
	for _, o := range req.CSINodes {
		objects = append(objects, o)
	}
	client := fake.NewClientset(objects...)
	handlers := &handlerTracker{}
	informerFactory := trackedFactory{informers.NewSharedInformerFactory(client, 0), handlers}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var draManager framework.SharedDRAManager
	if utilfeature.DefaultFeatureGate.Enabled(features.DynamicResourceAllocation) {
		logger := klog.FromContext(ctx)
		claimInformer := trackedInformer{informerFactory.Resource().V1().ResourceClaims().Informer(), handlers}
		claimCache := assumecache.NewAssumeCache(logger, claimInformer, "ResourceClaim", "", nil)
		opts := tracker.Options{
			EnableDeviceTaints:       utilfeature.DefaultFeatureGate.Enabled(features.DRADeviceTaints),
			EnableConsumableCapacity: utilfeature.DefaultFeatureGate.Enabled(features.DRAConsumableCapacity),
			SliceInformer:            informerFactory.Resource().V1().ResourceSlices(),
			KubeClient:               client,
		}
		if opts.EnableDeviceTaints {
			opts.TaintInformer = informerFactory.Resource().V1alpha3().DeviceTaintRules()
			opts.ClassInformer = informerFactory.Resource().V1().DeviceClasses()
		}
		sliceTracker, err := tracker.StartTracker(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("resource slice tracker: %w", err)
		}
		draManager = dynamicresources.NewDRAManager(ctx, claimCache, sliceTracker, informerFactory)
	}

	cfg, err := latest.Default()
	if err != nil {
		return nil, err
	}
	profile := &cfg.Profiles[0]
	// One framework, made before the informers start (its plugins register their event handlers then,
	// and see every object as the informers sync), over a snapshot swapped for each pod judged.
	lister := &swapLister{}
	f, err := frameworkruntime.NewFramework(ctx, frameworkplugins.NewInTreeRegistry(), profile,
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(informerFactory),
		frameworkruntime.WithSharedDRAManager(draManager),
		frameworkruntime.WithSnapshotSharedLister(lister),
		frameworkruntime.WithEventRecorder(events.NewFakeRecorder(100)),
	)
	if err != nil {
		return nil, fmt.Errorf("framework: %w", err)
	}
	// client-go's WaitForCacheSync polls every 100 ms, most of a case's time: ask it with a closed stop
	// channel (one immediate check of every informer the plugins started) until all have synced, and
	// every handler registered on the claim and volume informers (the volume binder's and DRA's assume
	// caches: tracked.go) has been told of every object.
	if handlers.count() < 2 {
		// The volume binder no longer takes its informers from the factory's typed accessors: the wait
		// below would not cover its caches, and a case could be judged before they are filled.
		return nil, fmt.Errorf("the volume binder registered %d handlers on the tracked informers, want 2", handlers.count())
	}
	informerFactory.Start(ctx.Done())
	checkOnce := make(chan struct{})
	close(checkOnce)
	for deadline := time.Now().Add(10 * time.Second); ; {
		all := true
		for _, ok := range informerFactory.WaitForCacheSync(checkOnce) {
			all = all && ok
		}
		all = all && handlers.synced()
		if all {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("informers did not sync")
		}
		time.Sleep(100 * time.Microsecond)
	}

	if !req.Sequence {
		return filterNodes(ctx, f, lister, req.Pods, req.Nodes, req.Pod)
	}
	out := &answer{Feasible: []string{}, Filtered: map[string]verdict{}}
	for i, p := range req.Pods {
		pending := p.DeepCopy()
		pending.Spec.NodeName = ""
		ans, err := filterNodes(ctx, f, lister, req.Pods[:i], req.Nodes, pending)
		if err != nil {
			return nil, err
		}
		out.Sequence = append(out.Sequence, ans)
	}
	return out, nil
}

// swapLister is the framework's snapshot, replaced for each pod judged (the plugins read it at each call).
type swapLister struct{ current *internalcache.Snapshot }

func (l *swapLister) NodeInfos() framework.NodeInfoLister       { return l.current.NodeInfos() }
func (l *swapLister) StorageInfos() framework.StorageInfoLister { return l.current.StorageInfos() }

// filterNodes runs the PreFilter and Filter plugins for `pod` on every node, with `pods` bound.
func filterNodes(ctx context.Context, f framework.Framework, lister *swapLister, pods []*v1.Pod, nodes []*v1.Node,
	pod *v1.Pod) (*answer, error) {
	snapshot := internalcache.NewSnapshot(pods, nodes)
	lister.current = snapshot
	ans := &answer{Feasible: []string{}, Filtered: map[string]verdict{}}
	state := framework.NewCycleState()
	pre, status, _ := f.RunPreFilterPlugins(ctx, state, pod)
	nodeInfos, err := snapshot.NodeInfos().List()
	if err != nil {
		return nil, err
	}
	if !status.IsSuccess() {
		v := verdict{Plugin: status.Plugin(), Code: status.Code().String(), Reasons: status.Reasons()}
		ans.PreFilter = &v
		for _, ni := range nodeInfos {
			ans.Filtered[ni.Node().Name] = v
		}
		return ans, nil
	}
	for _, ni := range nodeInfos {
		name := ni.Node().Name
		if !pre.AllNodes() && !pre.NodeNames.Has(name) {
			ans.Filtered[name] = verdict{Plugin: "PreFilterResult", Reasons: []string{"not among the nodes a PreFilter plugin chose"}}
			continue
		}
		st := f.RunFilterPlugins(ctx, state, pod, ni)
		if st.IsSuccess() {
			ans.Feasible = append(ans.Feasible, name)
			continue
		}
		ans.Filtered[name] = verdict{Plugin: st.Plugin(), Code: st.Code().String(), Reasons: st.Reasons()}
	}
	sort.Strings(ans.Feasible)
	return ans, nil
}

func main() {
	klog.SetOutput(os.Stderr)
	klog.LogToStderr(true)
	metrics.Register()
	in := bufio.NewReaderSize(os.Stdin, 1<<20)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	for {
		line, err := in.ReadBytes('\n')
		if len(line) > 0 {
			var req request
			var ans *answer
			if jerr := json.Unmarshal(line, &req); jerr != nil {
				ans = &answer{Error: "bad request: " + jerr.Error()}
			} else {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				a, eerr := evaluate(ctx, &req)
				cancel()
				if eerr != nil {
					ans = &answer{Error: eerr.Error()}
				} else {
					ans = a
				}
			}
			if werr := enc.Encode(ans); werr != nil {
				fmt.Fprintln(os.Stderr, "sched-oracle:", werr)
				os.Exit(1)
			}
			out.Flush()
		}
		if err != nil {
			return
		}
	}
}
