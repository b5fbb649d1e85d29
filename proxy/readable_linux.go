package proxy

import (
	"net"

	"golang.org/x/sys/unix"
)

// waitReadable blocks until c has bytes queued to read, or has reached
// EOF or an error (its read deadline included), and returns how many
// bytes are queued (0 at EOF). It holds no buffer and no pipe while it
// waits: net.TCPConn.ReadFrom's splice takes a pipe (two descriptors and
// up to 64 KiB of kernel memory) from the moment it starts waiting for
// data, which for an idle tunnel is its whole life. Asking first how
// much is there, then splicing exactly that, keeps an idle tunnel at its
// two sockets.
func waitReadable(c *net.TCPConn) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var opErr error
	err = rc.Read(func(fd uintptr) bool {
		// Bytes queued already (a busy tunnel): one system call.
		if q, e := unix.IoctlGetInt(int(fd), unix.SIOCINQ); e == nil && q > 0 {
			n = q
			return true
		}
		// None: tell "wait" from EOF or an error without taking a byte.
		var b [1]byte
		m, _, e := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		switch {
		case e == unix.EAGAIN || e == unix.EINTR:
			return false // not yet: wait for the poller
		case e != nil:
			opErr = e
		case m > 0:
			n, opErr = unix.IoctlGetInt(int(fd), unix.SIOCINQ)
		}
		return true
	})
	if err != nil {
		return 0, err
	}
	return n, opErr
}
