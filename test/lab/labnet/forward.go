package labnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// dialTimeout bounds how long the forwarder waits to reach its target.
const dialTimeout = 10 * time.Second

// Forwarder is a TCP relay from an address on the lab bridge to a target in
// the root namespace, so agents inside node namespaces can reach an API
// server that listens only on the root namespace's 127.0.0.1.
type Forwarder struct {
	ln     net.Listener
	target string
	ctx    context.Context
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

// Forward listens on listen (an IP literal and port, e.g. "192.0.2.1:0" or
// "192.0.2.1:6443") and relays each connection to target (e.g.
// "127.0.0.1:6443"). Unspecified listen addresses such as 0.0.0.0 are refused,
// so the target is never exposed beyond the lab bridge. A non-empty device
// (e.g. [Network.Bridge]) also binds the listener to that interface
// (SO_BINDTODEVICE), so only connections arriving over the bridge are
// accepted; pass "" to skip that.
func Forward(listen, target, device string) (*Forwarder, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("labnet: forward listen address %q: %w", listen, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.IsUnspecified() {
		return nil, fmt.Errorf("labnet: forward listen address %q: need a specific IP address, e.g. the bridge address", listen)
	}
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("labnet: forward target %q: %w", target, err)
	}
	var lc net.ListenConfig
	if device != "" {
		lc.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			if err := c.Control(func(fd uintptr) { serr = unix.BindToDevice(int(fd), device) }); err != nil {
				return err
			}
			if serr != nil {
				return fmt.Errorf("bind to device %s: %w", device, serr)
			}
			return nil
		}
	}
	ln, err := lc.Listen(context.Background(), "tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("labnet: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Forwarder{ln: ln, target: target, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.serve()
	return f, nil
}

// Addr returns the address the forwarder listens on, with the actual port
// when ":0" was asked for; agents in node namespaces connect here.
func (f *Forwarder) Addr() string { return f.ln.Addr().String() }

// Close stops accepting, closes every open connection (both sides) and waits
// until all relaying goroutines have finished.
func (f *Forwarder) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	err := f.ln.Close()
	f.cancel()
	for c := range f.conns {
		_ = c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
	return err
}

func (f *Forwarder) serve() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Transient failure such as EMFILE: back off briefly, keep serving.
			select {
			case <-f.ctx.Done():
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		if !f.track(c) {
			continue
		}
		f.wg.Add(1)
		go f.relay(c)
	}
}

// track registers c for Close; it closes c and reports false once the
// forwarder is closed.
func (f *Forwarder) track(c net.Conn) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		_ = c.Close()
		return false
	}
	f.conns[c] = struct{}{}
	return true
}

func (f *Forwarder) untrack(cs ...net.Conn) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range cs {
		delete(f.conns, c)
		_ = c.Close()
	}
}

func (f *Forwarder) relay(client net.Conn) {
	defer f.wg.Done()
	d := net.Dialer{Timeout: dialTimeout}
	upstream, err := d.DialContext(f.ctx, "tcp", f.target)
	if err != nil {
		f.untrack(client)
		return
	}
	if !f.track(upstream) {
		f.untrack(client)
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pipe(upstream, client) }()
	go func() { defer wg.Done(); pipe(client, upstream) }()
	wg.Wait()
	f.untrack(client, upstream)
}

// pipe copies src to dst. At a clean EOF it half-closes dst so the peer sees
// the end of stream while the other direction goes on; on any error it closes
// both connections, which also ends the copy in the other direction.
func pipe(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err == nil {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			if cw.CloseWrite() == nil {
				return
			}
		}
	}
	_ = dst.Close()
	_ = src.Close()
}
