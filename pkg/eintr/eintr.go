// Package eintr retries system calls that a signal interrupted. The
// daemon reads sysfs, writes cgroups and flushes its journal with plain
// system calls (os.File's poller set-up cost more than the calls), so the
// retry os.File would do is theirs to make.
package eintr

import "syscall"

// Retry runs call until it returns anything but EINTR.
func Retry(call func() (int, error)) (int, error) {
	for {
		n, err := call()
		if err != syscall.EINTR {
			return n, err
		}
	}
}
