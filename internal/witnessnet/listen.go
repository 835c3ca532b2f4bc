package witnessnet

import (
	"context"
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// ReceiveBuffer is the witness socket's receive buffer: room for a few
// thousand datagrams, so that the peers' probes and answers still find
// room while the reader is descheduled during a burst (the kernel default,
// about 200 KiB, holds a few hundred). The guard (internal/witnessguard)
// keeps floods out before they reach it.
const ReceiveBuffer = 4 << 20

// Listen opens the witness socket on addr with ReceiveBuffer. With
// CAP_NET_ADMIN (the ip-agent has it) the size is set past the system's
// net.core.rmem_max; without, it is what rmem_max allows.
func Listen(ctx context.Context, addr string) (net.PacketConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, ReceiveBuffer); errors.Is(serr, unix.EPERM) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, ReceiveBuffer)
			}
		})
		return errors.Join(err, serr)
	}}
	return lc.ListenPacket(ctx, "udp", addr)
}
