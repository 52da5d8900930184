package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/fake"
)

const imageSize = 1 << 20 // bytes; the kubelet refuses an image whose size is not set

// runtime is the upstream fake with the kubelet-facing fixes listed in main.go. The fake's own methods
// serve everything not overridden here.
type runtime struct {
	*fake.RemoteRuntime
	rec     *recorder
	imageFS string
	exits   *exits
}

func newRuntime(rec *recorder, imageFS string) *runtime {
	f := fake.NewFakeRemoteRuntime() // its own gRPC server stays unused: ours serves this wrapper
	f.RuntimeService.FakeStatus = &kubeapi.RuntimeStatus{Conditions: []*kubeapi.RuntimeCondition{
		{Type: kubeapi.RuntimeReady, Status: true},
		{Type: kubeapi.NetworkReady, Status: true},
	}}
	f.RuntimeService.FakeLinuxConfiguration = &kubeapi.LinuxRuntimeConfiguration{
		CgroupDriver: kubeapi.CgroupDriver_CGROUPFS, // the kubelet checks it against its own cgroupDriver
	}
	f.ImageService.SetFakeImageSize(imageSize)
	rt := &runtime{RemoteRuntime: f, rec: rec, imageFS: imageFS}
	rt.exits = newExits(f.RuntimeService)
	return rt
}

// notFound turns the fake's "... not found" errors into gRPC NotFound, which the kubelet tests for.
func notFound(err error) error {
	if err != nil && strings.Contains(err.Error(), "not found") {
		return status.Error(codes.NotFound, err.Error())
	}
	return err
}

func (r *runtime) CreateContainer(ctx context.Context, req *kubeapi.CreateContainerRequest) (*kubeapi.CreateContainerResponse, error) {
	resp, err := r.RemoteRuntime.CreateContainer(ctx, req)
	if err != nil {
		return nil, err
	}
	logPath := ""
	if dir, rel := req.GetSandboxConfig().GetLogDirectory(), req.GetConfig().GetLogPath(); dir != "" && rel != "" {
		logPath = filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err == nil {
			if f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY, 0o640); err == nil {
				f.Close()
			}
		}
	}
	svc := r.RuntimeService
	svc.Lock()
	if c, ok := svc.Containers[resp.ContainerId]; ok {
		c.LogPath = logPath
		c.Mounts = req.GetConfig().GetMounts() // so the kubelet finds the termination-message file
	}
	svc.Unlock()
	r.exits.plan(resp.ContainerId, req)
	r.rec.write(resp.ContainerId, req)
	return resp, nil
}

func (r *runtime) StartContainer(ctx context.Context, req *kubeapi.StartContainerRequest) (*kubeapi.StartContainerResponse, error) {
	resp, err := r.RemoteRuntime.StartContainer(ctx, req)
	if err != nil {
		return nil, notFound(err)
	}
	r.exits.started(req.ContainerId)
	return resp, nil
}

func (r *runtime) StopContainer(ctx context.Context, req *kubeapi.StopContainerRequest) (*kubeapi.StopContainerResponse, error) {
	r.exits.stop(ctx, req.ContainerId, time.Duration(req.Timeout)*time.Second)
	return &kubeapi.StopContainerResponse{}, nil // idempotent: a container that is gone is stopped
}

func (r *runtime) RemoveContainer(ctx context.Context, req *kubeapi.RemoveContainerRequest) (*kubeapi.RemoveContainerResponse, error) {
	r.exits.forget(req.ContainerId)
	return r.RemoteRuntime.RemoveContainer(ctx, req)
}

func (r *runtime) ContainerStatus(ctx context.Context, req *kubeapi.ContainerStatusRequest) (*kubeapi.ContainerStatusResponse, error) {
	resp, err := r.RemoteRuntime.ContainerStatus(ctx, req)
	return resp, notFound(err)
}

func (r *runtime) PodSandboxStatus(ctx context.Context, req *kubeapi.PodSandboxStatusRequest) (*kubeapi.PodSandboxStatusResponse, error) {
	resp, err := r.RemoteRuntime.PodSandboxStatus(ctx, req)
	return resp, notFound(err)
}

// StopPodSandbox stops the sandbox's containers too (a runtime must), and succeeds on a sandbox that is gone.
func (r *runtime) StopPodSandbox(ctx context.Context, req *kubeapi.StopPodSandboxRequest) (*kubeapi.StopPodSandboxResponse, error) {
	for _, id := range r.containersOf(req.PodSandboxId) {
		r.exits.kill(id)
	}
	if _, err := r.RemoteRuntime.StopPodSandbox(ctx, req); err != nil && notFound(err) == err {
		return nil, err
	}
	return &kubeapi.StopPodSandboxResponse{}, nil
}

// RemovePodSandbox removes the sandbox's containers too (the upstream fake leaves them behind).
func (r *runtime) RemovePodSandbox(ctx context.Context, req *kubeapi.RemovePodSandboxRequest) (*kubeapi.RemovePodSandboxResponse, error) {
	ids := r.containersOf(req.PodSandboxId)
	for _, id := range ids {
		r.exits.forget(id)
	}
	svc := r.RuntimeService
	svc.Lock()
	for _, id := range ids {
		delete(svc.Containers, id)
	}
	svc.Unlock()
	return r.RemoteRuntime.RemovePodSandbox(ctx, req)
}

func (r *runtime) containersOf(sandboxID string) []string {
	svc := r.RuntimeService
	svc.Lock()
	defer svc.Unlock()
	var ids []string
	for id, c := range svc.Containers {
		if c.SandboxID == sandboxID {
			ids = append(ids, id)
		}
	}
	return ids
}

// ImageFsInfo reports one filesystem for images and containers (the folder given by --image-fs), with
// 1 MiB per image: enough for the kubelet's image GC and eviction manager to have numbers.
func (r *runtime) ImageFsInfo(ctx context.Context, req *kubeapi.ImageFsInfoRequest) (*kubeapi.ImageFsInfoResponse, error) {
	img := r.ImageService
	img.Lock()
	n := uint64(len(img.Images))
	img.Unlock()
	usage := []*kubeapi.FilesystemUsage{{
		Timestamp:  time.Now().UnixNano(),
		FsId:       &kubeapi.FilesystemIdentifier{Mountpoint: r.imageFS},
		UsedBytes:  &kubeapi.UInt64Value{Value: n * imageSize},
		InodesUsed: &kubeapi.UInt64Value{Value: n},
	}}
	return &kubeapi.ImageFsInfoResponse{ImageFilesystems: usage, ContainerFilesystems: usage}, nil
}

// trimCallLogs empties the fakes' call logs every `every` (they record every call, forever).
func (r *runtime) trimCallLogs(every time.Duration, stop <-chan struct{}) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		r.RuntimeService.Lock()
		r.RuntimeService.Called = r.RuntimeService.Called[:0]
		r.RuntimeService.Unlock()
		r.ImageService.Lock()
		r.ImageService.Called = r.ImageService.Called[:0]
		r.ImageService.Unlock()
	}
}
