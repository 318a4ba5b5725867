package framework

import (
	"fmt"
	"os"
	"strconv"
)

// Env is the test containerd as described by setup-containerd.sh's
// environment file ($E2E_RUN/env).
type Env struct {
	ContainerdAddress string // CRI gRPC socket path
	NRISocket         string // NRI socket the plugin connects to
	TestImage         string // busybox image whose default command sleeps
	Ctr               string // ctr binary matching the containerd
	ContainerdPID     int    // pid of the running containerd
	ContainerdLog     string // containerd's log file
	SetupScript       string // absolute path of setup-containerd.sh
	RunDir            string // $E2E_RUN
}

// LoadEnv reads the environment written by setup-containerd.sh. The error
// names every variable that is missing, so a caller can skip or fail with a
// message that tells the operator what to run first.
func LoadEnv() (Env, error) {
	var missing []string
	get := func(name string) string {
		v := os.Getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	}
	e := Env{
		ContainerdAddress: get("CONTAINERD_ADDRESS"),
		NRISocket:         get("NRI_SOCKET"),
		TestImage:         get("E2E_TEST_IMAGE"),
		Ctr:               get("E2E_CTR"),
		ContainerdLog:     get("E2E_CONTAINERD_LOG"),
		SetupScript:       get("E2E_SETUP_SCRIPT"),
		RunDir:            get("E2E_RUN"),
	}
	pid := get("E2E_CONTAINERD_PID")
	if len(missing) > 0 {
		return Env{}, fmt.Errorf("environment of setup-containerd.sh not loaded, missing %v: run `bash ../shared/e2e/setup-containerd.sh` and `source /run/nri-e2e/env`", missing)
	}
	n, err := strconv.Atoi(pid)
	if err != nil || n <= 0 {
		return Env{}, fmt.Errorf("E2E_CONTAINERD_PID=%q is not a process id", pid)
	}
	e.ContainerdPID = n
	return e, nil
}
