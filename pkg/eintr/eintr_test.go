package eintr

import (
	"syscall"
	"testing"
)

// TestRetry: EINTR is retried; any other result, errors included, is
// returned as the call gave it.
func TestRetry(t *testing.T) {
	calls := 0
	n, err := Retry(func() (int, error) {
		calls++
		if calls < 3 {
			return -1, syscall.EINTR
		}
		return 7, nil
	})
	if n != 7 || err != nil || calls != 3 {
		t.Errorf("Retry = %d, %v after %d calls; want 7, nil after 3", n, err, calls)
	}
	calls = 0
	n, err = Retry(func() (int, error) { calls++; return -1, syscall.ENOENT })
	if n != -1 || err != syscall.ENOENT || calls != 1 {
		t.Errorf("Retry = %d, %v after %d calls; want -1, ENOENT after 1", n, err, calls)
	}
}
