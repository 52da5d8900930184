package main

import (
	"context"
	"strconv"
	"sync"
	"time"

	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	apitest "k8s.io/cri-api/pkg/apis/testing"
)

const (
	envExitAfter = "TESSERA_FAKE_EXIT_AFTER" // Go duration from the container's start: it exits then
	envExitCode  = "TESSERA_FAKE_EXIT_CODE"  // its exit code (default 0)
	envStopAfter = "TESSERA_FAKE_STOP_AFTER" // Go duration it takes to exit on SIGTERM (default: never)
	simDuration  = "tessera.dev/sim-duration"
	exitKilled   = 137 // SIGKILL at the end of the grace period
	exitTermed   = 143 // exited on SIGTERM
)

// plan is when one container exits by itself, and how it answers SIGTERM.
type plan struct {
	after     time.Duration // from its start; < 0: never by itself
	deadline  time.Time     // or at this time (the pod's sim-duration), when not zero
	code      int32
	stopAfter time.Duration // < 0: ignores SIGTERM (killed at the end of StopContainer's timeout)
	timer     *time.Timer
	done      chan struct{} // closed once the container has exited
	once      sync.Once
}

// exits drives the containers' exits; the container states themselves live in the upstream fake.
type exits struct {
	svc   *apitest.FakeRuntimeService
	mu    sync.Mutex
	plans map[string]*plan
}

func newExits(svc *apitest.FakeRuntimeService) *exits {
	return &exits{svc: svc, plans: map[string]*plan{}}
}

func envOf(cfg *kubeapi.ContainerConfig) map[string]string {
	out := map[string]string{}
	for _, kv := range cfg.GetEnvs() {
		out[kv.Key] = kv.Value
	}
	return out
}

// duration reads a Go duration ("0s", "1m30s") or a number of seconds; ok is false when unset or invalid.
func duration(raw string) (time.Duration, bool) {
	if raw == "" {
		return 0, false
	}
	if d, err := time.ParseDuration(raw); err == nil && d >= 0 {
		return d, true
	}
	if s, err := strconv.ParseFloat(raw, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second)), true
	}
	return 0, false
}

func (e *exits) plan(id string, req *kubeapi.CreateContainerRequest) {
	env := envOf(req.GetConfig())
	p := &plan{after: -1, stopAfter: -1, done: make(chan struct{})}
	if d, ok := duration(env[envExitAfter]); ok {
		p.after = d
		if code, err := strconv.Atoi(env[envExitCode]); err == nil {
			p.code = int32(code)
		}
	} else if d, ok := duration(req.GetSandboxConfig().GetAnnotations()[simDuration]); ok {
		e.svc.Lock()
		if sb, found := e.svc.Sandboxes[req.PodSandboxId]; found {
			p.deadline = time.Unix(0, sb.CreatedAt).Add(d)
		}
		e.svc.Unlock()
	}
	if d, ok := duration(env[envStopAfter]); ok {
		p.stopAfter = d
	}
	e.mu.Lock()
	e.plans[id] = p
	e.mu.Unlock()
}

func (e *exits) started(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	p, ok := e.plans[id]
	if !ok {
		return
	}
	var delay time.Duration
	switch {
	case p.after >= 0:
		delay = p.after
	case !p.deadline.IsZero():
		delay = max(0, time.Until(p.deadline))
	default:
		return // runs until stopped
	}
	code := p.code
	p.timer = time.AfterFunc(delay, func() { e.exit(id, code) })
}

// exit marks the container exited with `code` (if it has not exited yet).
func (e *exits) exit(id string, code int32) {
	e.svc.Lock()
	if c, ok := e.svc.Containers[id]; ok && c.State != kubeapi.ContainerState_CONTAINER_EXITED {
		c.State = kubeapi.ContainerState_CONTAINER_EXITED
		c.FinishedAt = time.Now().UnixNano()
		c.ExitCode = code
		c.Reason = "Completed"
		if code != 0 {
			c.Reason = "Error"
		}
	}
	e.svc.Unlock()
	e.mu.Lock()
	if p, ok := e.plans[id]; ok {
		p.once.Do(func() { close(p.done) })
	}
	e.mu.Unlock()
}

// stop is StopContainer: SIGTERM, then SIGKILL after `timeout`. It returns once the container exited.
func (e *exits) stop(ctx context.Context, id string, timeout time.Duration) {
	e.mu.Lock()
	p, ok := e.plans[id]
	e.mu.Unlock()
	if !ok {
		e.exit(id, exitKilled)
		return
	}
	wait, code := timeout, int32(exitKilled)
	if p.stopAfter >= 0 && p.stopAfter < timeout {
		wait, code = p.stopAfter, exitTermed
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-p.done: // it had exited, or exited meanwhile
	case <-timer.C:
		e.exit(id, code)
	case <-ctx.Done():
		e.exit(id, exitKilled)
	}
}

// kill is SIGKILL now (the sandbox is being stopped).
func (e *exits) kill(id string) { e.exit(id, exitKilled) }

// forget drops a removed container's plan.
func (e *exits) forget(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if p, ok := e.plans[id]; ok {
		if p.timer != nil {
			p.timer.Stop()
		}
		p.once.Do(func() { close(p.done) })
		delete(e.plans, id)
	}
}
