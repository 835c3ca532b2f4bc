package witnessnet

import (
	"context"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestListenGivesTheSocketRoom(t *testing.T) {
	c, err := Listen(context.Background(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	raw, err := c.(*net.UDPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var size int
	var serr error
	if err := raw.Control(func(fd uintptr) { size, serr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF) }); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	// The kernel reports twice what was asked (its bookkeeping share).
	if os.Geteuid() == 0 && size < ReceiveBuffer {
		t.Errorf("receive buffer %d bytes, want at least %d", size, ReceiveBuffer)
	}
	if size <= 0 {
		t.Errorf("receive buffer %d bytes", size)
	}
}
