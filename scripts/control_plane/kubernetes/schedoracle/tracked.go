package main

import (
	"sync"
	"time"

	"k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core"
	corev1informers "k8s.io/client-go/informers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

// The volume binder keeps claims and volumes in assume caches filled by event handlers of its own, each
// run by the shared informer in a goroutine of its own: an informer's store being synced does not mean
// those caches are. Under load a case was judged before the PV cache had its volume ("pvc(s) bound to
// non-existent pv(s)"). trackedFactory hands the plugins informers that record every handler registered
// on them, so evaluate waits until each of those handlers, theirs included, has seen the initial list.
type handlerTracker struct {
	mu   sync.Mutex
	regs []toolscache.ResourceEventHandlerRegistration
}

func (t *handlerTracker) add(reg toolscache.ResourceEventHandlerRegistration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.regs = append(t.regs, reg)
}

func (t *handlerTracker) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.regs)
}

// synced tells whether every registered handler has been told of every object of the initial list.
func (t *handlerTracker) synced() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, reg := range t.regs {
		if !reg.HasSynced() {
			return false
		}
	}
	return true
}

// trackedInformer records the registrations of the handlers added to it.
type trackedInformer struct {
	toolscache.SharedIndexInformer
	t *handlerTracker
}

func (i trackedInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	reg, err := i.SharedIndexInformer.AddEventHandler(h)
	if err == nil {
		i.t.add(reg)
	}
	return reg, err
}

func (i trackedInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, resync time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	reg, err := i.SharedIndexInformer.AddEventHandlerWithResyncPeriod(h, resync)
	if err == nil {
		i.t.add(reg)
	}
	return reg, err
}

func (i trackedInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	reg, err := i.SharedIndexInformer.AddEventHandlerWithOptions(h, o)
	if err == nil {
		i.t.add(reg)
	}
	return reg, err
}

// The factory, core group and core/v1 version, each passing through all but the claim and volume informers.
type trackedFactory struct {
	informers.SharedInformerFactory
	t *handlerTracker
}

func (f trackedFactory) Core() coreinformers.Interface {
	return trackedCore{f.SharedInformerFactory.Core(), f.t}
}

type trackedCore struct {
	coreinformers.Interface
	t *handlerTracker
}

func (c trackedCore) V1() corev1informers.Interface { return trackedCoreV1{c.Interface.V1(), c.t} }

type trackedCoreV1 struct {
	corev1informers.Interface
	t *handlerTracker
}

func (v trackedCoreV1) PersistentVolumes() corev1informers.PersistentVolumeInformer {
	return trackedPVs{v.Interface.PersistentVolumes(), v.t}
}

func (v trackedCoreV1) PersistentVolumeClaims() corev1informers.PersistentVolumeClaimInformer {
	return trackedPVCs{v.Interface.PersistentVolumeClaims(), v.t}
}

type trackedPVs struct {
	corev1informers.PersistentVolumeInformer
	t *handlerTracker
}

func (p trackedPVs) Informer() toolscache.SharedIndexInformer {
	return trackedInformer{p.PersistentVolumeInformer.Informer(), p.t}
}

type trackedPVCs struct {
	corev1informers.PersistentVolumeClaimInformer
	t *handlerTracker
}

func (p trackedPVCs) Informer() toolscache.SharedIndexInformer {
	return trackedInformer{p.PersistentVolumeClaimInformer.Informer(), p.t}
}
