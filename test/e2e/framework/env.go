package framework

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The runtimes the suite runs against, as E2E_RUNTIME names them.
const (
	Containerd = "containerd"
	CRIO       = "crio"
)

// Env is the test runtime as described by the environment its setup script
// writes: setup-containerd.sh ($E2E_RUN/env) or setup-crio.sh
// (/run/crio-e2e/env, with E2E_RUNTIME=crio).
type Env struct {
	Runtime    string // Containerd or CRIO
	CRIAddress string // CRI gRPC socket path
	NRISocket  string // NRI socket the plugin connects to
	TestImage  string // busybox image whose default command sleeps
	RuntimePID int    // pid of the running containerd or crio
	RuntimeLog string // its log file
	RunDir     string // $E2E_RUN of the runtime

	// containerd only
	ContainerdAddress string // CRI gRPC socket path (= CRIAddress)
	Ctr               string // ctr binary matching the containerd
	ContainerdPID     int    // = RuntimePID
	ContainerdLog     string // = RuntimeLog
	SetupScript       string // absolute path of setup-containerd.sh

	// CRI-O only
	CrioConfig      string // crio.conf of the test instance
	CrioSetupScript string // setup-crio.sh (E2E_CRIO_SETUP_SCRIPT, or beside setup-containerd.sh)
}

// IsCRIO reports whether the runtime is CRI-O.
func (e Env) IsCRIO() bool { return e.Runtime == CRIO }

// LoadEnv reads the environment written by the runtime's setup script. The
// error names every variable that is missing, so a caller can skip or fail
// with a message that tells the operator what to run first.
func LoadEnv() (Env, error) {
	var missing []string
	get := func(name string) string {
		v := os.Getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	}
	var e Env
	var pidVar string
	switch rt := os.Getenv("E2E_RUNTIME"); rt {
	case "", Containerd:
		e = Env{
			Runtime:           Containerd,
			ContainerdAddress: get("CONTAINERD_ADDRESS"),
			NRISocket:         get("NRI_SOCKET"),
			TestImage:         get("E2E_TEST_IMAGE"),
			Ctr:               get("E2E_CTR"),
			ContainerdLog:     get("E2E_CONTAINERD_LOG"),
			SetupScript:       get("E2E_SETUP_SCRIPT"),
			RunDir:            get("E2E_RUN"),
		}
		e.CRIAddress, e.RuntimeLog = e.ContainerdAddress, e.ContainerdLog
		pidVar = "E2E_CONTAINERD_PID"
		if len(missing) > 0 {
			return Env{}, fmt.Errorf("environment of setup-containerd.sh not loaded, missing %v: run scripts/e2e.sh (make e2e), or `bash scripts/setup-containerd.sh` and `source /run/nri-e2e/env`", missing)
		}
	case CRIO:
		e = Env{
			Runtime:    CRIO,
			CRIAddress: strings.TrimPrefix(get("CRI_RUNTIME_ENDPOINT"), "unix://"),
			NRISocket:  get("NRI_SOCKET"),
			TestImage:  get("E2E_TEST_IMAGE"),
			RuntimeLog: get("E2E_CRIO_LOG"),
			CrioConfig: get("E2E_CRIO_CONFIG"),
			RunDir:     get("E2E_RUN"),
		}
		e.CrioSetupScript = os.Getenv("E2E_CRIO_SETUP_SCRIPT")
		if e.CrioSetupScript == "" && os.Getenv("E2E_SETUP_SCRIPT") != "" {
			e.CrioSetupScript = filepath.Join(filepath.Dir(os.Getenv("E2E_SETUP_SCRIPT")), "setup-crio.sh")
		}
		pidVar = "E2E_CRIO_PID"
		if len(missing) > 0 {
			return Env{}, fmt.Errorf("environment of setup-crio.sh not loaded, missing %v: run scripts/e2e.sh (make e2e) on a machine with a CRI-O, or `bash scripts/setup-crio.sh` and `source /run/crio-e2e/env`", missing)
		}
	default:
		return Env{}, fmt.Errorf("E2E_RUNTIME=%q: want %q or %q (unset means containerd)", rt, Containerd, CRIO)
	}
	pid := os.Getenv(pidVar)
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return Env{}, fmt.Errorf("%s=%q is not a process id", pidVar, pid)
	}
	e.RuntimePID = n
	if e.Runtime == Containerd {
		e.ContainerdPID = n
	}
	return e, nil
}
