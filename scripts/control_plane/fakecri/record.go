package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// recorder appends one JSON line per CreateContainer: what a real runtime would have been told to give the
// container. The device plugins' Allocate answers show up here as the kubelet passes them on: envs,
// mounts, devices, CDI devices and annotations.
type recorder struct {
	mu   sync.Mutex
	f    *os.File
	node string
}

type mount struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	ReadOnly      bool   `json:"readOnly,omitempty"`
}

type device struct {
	ContainerPath string `json:"containerPath"`
	HostPath      string `json:"hostPath"`
	Permissions   string `json:"permissions,omitempty"`
}

type record struct {
	Time        string            `json:"time"`
	Node        string            `json:"node,omitempty"`
	Namespace   string            `json:"namespace"`
	Pod         string            `json:"pod"`
	PodUID      string            `json:"podUID"`
	Container   string            `json:"container"`
	Attempt     uint32            `json:"attempt"`
	ContainerID string            `json:"containerID"`
	Image       string            `json:"image"`
	Envs        map[string]string `json:"envs"`
	Mounts      []mount           `json:"mounts"`
	Devices     []device          `json:"devices"`
	CDIDevices  []string          `json:"cdiDevices"`
	Annotations map[string]string `json:"annotations"`
}

func openRecorder(path, node string) (*recorder, error) {
	r := &recorder{node: node}
	if path == "" {
		return r, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open --record %s: %w", path, err)
	}
	r.f = f
	return r, nil
}

func (r *recorder) Close() {
	if r.f != nil {
		r.f.Close()
	}
}

func (r *recorder) write(id string, req *kubeapi.CreateContainerRequest) {
	if r.f == nil {
		return
	}
	cfg, meta := req.GetConfig(), req.GetSandboxConfig().GetMetadata()
	rec := record{
		Time:        time.Now().UTC().Format(time.RFC3339Nano),
		Node:        r.node,
		Namespace:   meta.GetNamespace(),
		Pod:         meta.GetName(),
		PodUID:      meta.GetUid(),
		Container:   cfg.GetMetadata().GetName(),
		Attempt:     cfg.GetMetadata().GetAttempt(),
		ContainerID: id,
		Image:       cfg.GetImage().GetImage(),
		Envs:        envOf(cfg),
		Mounts:      []mount{},
		Devices:     []device{},
		CDIDevices:  []string{},
		Annotations: cfg.GetAnnotations(),
	}
	for _, m := range cfg.GetMounts() {
		rec.Mounts = append(rec.Mounts, mount{m.ContainerPath, m.HostPath, m.Readonly})
	}
	for _, d := range cfg.GetDevices() {
		rec.Devices = append(rec.Devices, device{d.ContainerPath, d.HostPath, d.Permissions})
	}
	for _, d := range cfg.GetCDIDevices() {
		rec.CDIDevices = append(rec.CDIDevices, d.Name)
	}
	line, err := json.Marshal(rec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fakecri: record of %s not written: %v\n", id, err)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.f.Write(append(line, '\n')); err != nil {
		fmt.Fprintf(os.Stderr, "fakecri: record of %s not written: %v\n", id, err)
	}
}

// socketDir is the folder of a unix:// endpoint.
func socketDir(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil && u.Scheme == "unix" {
		return filepath.Dir(u.Path)
	}
	return "."
}
