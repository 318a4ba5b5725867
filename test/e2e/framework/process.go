package framework

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// PluginProcess is the real nri-cpualign binary running as a child process,
// so that a test can crash it (SIGKILL) and start it again, as a DaemonSet
// would.
type PluginProcess struct {
	cmd     *exec.Cmd
	log     *os.File
	LogPath string
	exited  chan struct{}
	waitErr error
}

// StartPlugin starts bin with args, stdout and stderr appended to logPath.
// The child gets SIGKILL when the starting process dies (Pdeathsig): a
// leftover plugin with the same name would make every later CreateContainer
// fail with a conflict. If pidFile is not empty the pid is appended to it so a
// wrapper script can kill survivors of a crashed test binary.
func StartPlugin(bin string, args []string, logPath, pidFile string) (*PluginProcess, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("plugin log: %w", err)
	}
	fmt.Fprintf(f, "=== %s start: %s %s\n", time.Now().Format(time.RFC3339Nano), bin, strings.Join(args, " "))
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	p := &PluginProcess{cmd: cmd, log: f, LogPath: logPath, exited: make(chan struct{})}
	if pidFile != "" {
		if pf, err := os.OpenFile(pidFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			fmt.Fprintln(pf, cmd.Process.Pid)
			pf.Close()
		}
	}
	go func() {
		p.waitErr = cmd.Wait()
		fmt.Fprintf(f, "=== %s exit: %v\n", time.Now().Format(time.RFC3339Nano), p.waitErr)
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

// Pid is the process id.
func (p *PluginProcess) Pid() int { return p.cmd.Process.Pid }

// Exited is closed once the process has exited and been reaped.
func (p *PluginProcess) Exited() <-chan struct{} { return p.exited }

// ExitErr is the process' exit status; valid once Exited is closed.
func (p *PluginProcess) ExitErr() error {
	<-p.exited
	return p.waitErr
}

// Running reports whether the process has not exited yet.
func (p *PluginProcess) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Kill sends SIGKILL (a crash: no goodbye to the runtime) and waits until the
// process is reaped. It is a no-op on an exited process.
func (p *PluginProcess) Kill() {
	if !p.Running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// Terminate sends SIGTERM and waits up to grace for a clean exit, then kills.
func (p *PluginProcess) Terminate(grace time.Duration) error {
	if !p.Running() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("plugin pid %d ignored SIGTERM for %s, killed", p.Pid(), grace)
	}
}

// FileSize is the current size of path (0 if it does not exist): an offset
// from which WaitForLine looks for lines written later.
func FileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// WaitForLine polls path from byte offset for a line containing every one of
// substrs, until ctx ends. It returns the line.
func WaitForLine(ctx context.Context, path string, offset int64, substrs ...string) (string, error) {
	for {
		if l, ok, err := findLine(path, offset, substrs); err != nil {
			return "", err
		} else if ok {
			return l, nil
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no line with %q in %s after offset %d: %w", substrs, path, offset, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// metricsLine is the daemon's start-up line naming its metrics address.
var metricsLine = regexp.MustCompile(`serving /metrics.*address="?([0-9.]+:[0-9]+)`)

// HTTPGet fetches url (the plugin's /metrics, /state, /healthz) and
// returns the status code and the body.
func HTTPGet(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// MetricsAddress is the host:port that a plugin started with
// metrics_address = "127.0.0.1:0" serves /metrics, /state and /healthz on,
// from the line its log has about it after offset (written before it
// connects to the runtime).
func MetricsAddress(logPath string, offset int64) (string, error) {
	line, ok, err := FindLine(logPath, offset, "serving /metrics")
	if err != nil {
		return "", err
	}
	if !ok {
		return "", fmt.Errorf("%s: the plugin did not log its metrics address", logPath)
	}
	m := metricsLine.FindStringSubmatch(line)
	if m == nil {
		return "", fmt.Errorf("%s: no address in %q", logPath, line)
	}
	return m[1], nil
}

// FindLine reports the first line of path after offset containing every one
// of substrs.
func FindLine(path string, offset int64, substrs ...string) (string, bool, error) {
	return findLine(path, offset, substrs)
}

func findLine(path string, offset int64, substrs []string) (string, bool, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", false, nil
		}
		return "", false, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return "", false, err
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
next:
	for sc.Scan() {
		l := sc.Text()
		for _, s := range substrs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		return l, true, nil
	}
	return "", false, sc.Err()
}

// ProcessGone reports whether pid has exited: no such process, or a zombie
// (this VM's PID 1 reaps lazily, and kill -0 succeeds on zombies).
func ProcessGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// the state follows the parenthesised command name
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// RestartContainerd stops the test containerd (SIGTERM; its containers keep
// running in their shims), waits for it to exit, and starts it again with
// setup-containerd.sh. It updates e (and the process environment) with the
// new pid.
func RestartContainerd(ctx context.Context, e *Env) error {
	if e.Runtime == CRIO {
		return errors.New("RestartContainerd on a CRI-O environment: use RestartRuntime")
	}
	return RestartRuntime(ctx, e)
}

// RestartRuntime stops the test runtime with SIGTERM (containerd's shims
// and CRI-O's conmon keep the containers running), waits for it to exit,
// and starts it again with its setup script. It updates e (and the process
// environment) with the new pid.
func RestartRuntime(ctx context.Context, e *Env) error {
	script, pidVar := e.SetupScript, "E2E_CONTAINERD_PID"
	if e.Runtime == CRIO {
		script, pidVar = e.CrioSetupScript, "E2E_CRIO_PID"
	}
	if script == "" {
		return fmt.Errorf("no setup script known for %s", e.Runtime)
	}
	if err := syscall.Kill(e.RuntimePID, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("SIGTERM %s %d: %w", e.Runtime, e.RuntimePID, err)
	}
	for !ProcessGone(e.RuntimePID) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s %d did not exit: %w", e.Runtime, e.RuntimePID, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	cmd := exec.CommandContext(ctx, "bash", script)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("bash %s: %w\n%s", script, err, stderr.String())
	}
	for _, l := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(l, "export "+pidVar+"="); ok {
			pid, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("setup printed %s=%q", pidVar, v)
			}
			e.RuntimePID = pid
			if e.Runtime == Containerd {
				e.ContainerdPID = pid
			}
			os.Setenv(pidVar, v)
			return nil
		}
	}
	return fmt.Errorf("setup printed no %s:\n%s", pidVar, out)
}
