// fakecri: a CRI runtime without containers, for the real kubelets of `tessera sandbox` and the tests.
//
// It is Kubernetes' own fake runtime (k8s.io/cri-client/pkg/fake, the one kubemark uses) served on a Unix
// socket, with what a real kubelet needs to run pods on it for hours (see runtime.go):
//
//   - every container gets a real, empty log file at <sandbox log dir>/<log path> (the stock fake reports
//     an empty LogPath, and the kubelet, removing a container, then deletes Glob("*") in its working dir);
//   - RuntimeConfig reports the cgroupfs driver; ImageFsInfo reports an image filesystem; images "pull"
//     at once and weigh 1 MiB (the kubelet refuses images without a size);
//   - "not found" is gRPC NotFound (the kubelet's way to know a container or sandbox is gone), stopping or
//     removing what is gone succeeds, removing a sandbox removes its containers;
//   - the fakes' call logs (they only grow) are trimmed every minute;
//   - every CreateContainer is written as one JSON line to --record: what the container would have been
//     given (env, mounts, devices, CDI devices, annotations), i.e. the device plugins' Allocate answers.
//
// Containers run from StartContainer until they exit (exit.go):
//
//   - a container with env TESSERA_FAKE_EXIT_AFTER=<Go duration> exits that long after it started, with
//     TESSERA_FAKE_EXIT_CODE (default 0): init containers that should complete set it ("0s");
//
//   - otherwise, in a pod annotated tessera.dev/sim-duration=<duration>, every container exits 0 once the
//     pod's sandbox has run that long (so the pod as a whole runs for the duration, as in simulation);
//
//   - StopContainer(timeout) returns when the container exited: at once if it has, else after
//     TESSERA_FAKE_STOP_AFTER (the time the container takes to exit on SIGTERM, exit code 143) or, when
//     that is unset or longer, at the end of the timeout (killed, exit code 137), as `sleep` ignoring
//     SIGTERM as PID 1 does; so a deleted pod stays Terminating for its grace period.
//
//     fakecri --listen unix:///path/cri.sock --record /path/containers.jsonl --image-fs /path
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	kubeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/cri-client/pkg/util"
)

func main() {
	listen := flag.String("listen", "", "the CRI endpoint to serve, unix:///path/to/cri.sock")
	record := flag.String("record", "", "append one JSON line per CreateContainer to this file")
	imageFS := flag.String("image-fs", "", "the folder reported as the image filesystem (default: the socket's folder)")
	node := flag.String("node", "", "the node's name, written in each record")
	flag.Parse()
	if *listen == "" {
		fmt.Fprintln(os.Stderr, "fakecri: --listen is required")
		os.Exit(2)
	}
	if err := run(*listen, *record, *imageFS, *node); err != nil {
		fmt.Fprintf(os.Stderr, "fakecri: %v\n", err)
		os.Exit(1)
	}
}

func run(endpoint, recordPath, imageFS, node string) error {
	rec, err := openRecorder(recordPath, node)
	if err != nil {
		return err
	}
	defer rec.Close()
	listener, err := util.CreateListener(endpoint)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", endpoint, err)
	}
	if imageFS == "" {
		imageFS = socketDir(endpoint)
	}
	rt := newRuntime(rec, imageFS)
	server := grpc.NewServer()
	kubeapi.RegisterRuntimeServiceServer(server, rt)
	kubeapi.RegisterImageServiceServer(server, rt)

	stopTrim := make(chan struct{})
	go rt.trimCallLogs(time.Minute, stopTrim)
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		close(stopTrim)
		server.Stop()
	}()
	fmt.Fprintf(os.Stderr, "fakecri: serving %s (image fs %s, record %q)\n", endpoint, imageFS, recordPath)
	return server.Serve(listener)
}
