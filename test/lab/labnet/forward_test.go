package labnet

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

// echoServer listens on the root namespace's loopback and echoes every
// connection, half-closing its write side after the client's EOF.
func echoServer(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
				_ = c.(*net.TCPConn).CloseWrite()
				// Stay open until the peer closes, to see that close propagate.
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return ln
}

// roundTrip sends msg, half-closes, and reads everything back.
func roundTrip(c net.Conn, msg string) (string, error) {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, msg); err != nil {
		return "", err
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

func TestForwardLoopback(t *testing.T) {
	// No namespaces needed: relay from one loopback address to another.
	g := NewWithT(t)
	echo := echoServer(t)
	f, err := Forward("127.0.0.1:0", echo.Addr().String(), "")
	g.Expect(err).NotTo(HaveOccurred())
	defer f.Close()

	// Many concurrent connections, each with its own payload and half-close.
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", f.Addr())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			msg := fmt.Sprintf("conn %d %s", i, make([]byte, 64<<10))
			got, err := roundTrip(c, msg)
			if err == nil && got != msg {
				err = fmt.Errorf("conn %d: echoed %d bytes, want %d", i, len(got), len(msg))
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	// A target that refuses: the client connection is closed, not left hanging.
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	g.Expect(err).NotTo(HaveOccurred())
	deadAddr := dead.Addr().String()
	dead.Close()
	f2, err := Forward("127.0.0.1:0", deadAddr, "")
	g.Expect(err).NotTo(HaveOccurred())
	defer f2.Close()
	c, err := net.Dial("tcp", f2.Addr())
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Read(make([]byte, 1))
	g.Expect(err).To(HaveOccurred())
	g.Expect(err).NotTo(MatchError(ContainSubstring("timeout")))
}

func TestForwardFromNodeNamespace(t *testing.T) {
	needRoot(t)
	g := NewWithT(t)
	n := newLab(t, "a", "b")
	echo := echoServer(t)

	_, err := Forward(netip.AddrPortFrom(n.Gateway(), 0).String(), echo.Addr().String(), testPrefix+"-nodev")
	g.Expect(err).To(MatchError(ContainSubstring("bind to device")))

	// Bound to the bridge, as the lab runs it.
	f, err := Forward(netip.AddrPortFrom(n.Gateway(), 0).String(), echo.Addr().String(), n.Bridge())
	g.Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	host, _, _ := net.SplitHostPort(f.Addr())
	g.Expect(host).To(Equal(n.Gateway().String()))

	// The root namespace reaches it too (a readiness probe from the CLI).
	c, err := net.DialTimeout("tcp", f.Addr(), 5*time.Second)
	g.Expect(err).NotTo(HaveOccurred())
	got, err := roundTrip(c, "from root")
	c.Close()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(got).To(Equal("from root"))

	// From each node namespace, through the bridge address, to the root's loopback.
	for _, node := range []string{"a", "b"} {
		c, err := dialFrom(n.NodeNamespace(node), f.Addr())
		g.Expect(err).NotTo(HaveOccurred())
		got, err := roundTrip(c, "hello from "+node)
		c.Close()
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got).To(Equal("hello from " + node))
	}

	// Close tears down live connections: a connection mid-conversation
	// sees EOF or reset promptly.
	c, err = dialFrom(n.NodeNamespace("a"), f.Addr())
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = io.WriteString(c, "ping")
	g.Expect(err).NotTo(HaveOccurred())
	buf := make([]byte, 4)
	_, err = io.ReadFull(c, buf)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(string(buf)).To(Equal("ping"))

	closed := make(chan error, 1)
	go func() { closed <- f.Close() }()
	select {
	case err := <-closed:
		g.Expect(err).NotTo(HaveOccurred())
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not return with a live connection")
	}
	_, err = c.Read(buf)
	g.Expect(err).To(HaveOccurred())
	g.Expect(err).NotTo(MatchError(ContainSubstring("timeout")))
	g.Expect(f.Close()).To(Succeed(), "Close is idempotent")

	// And it no longer accepts.
	_, err = dialFrom(n.NodeNamespace("a"), f.Addr())
	g.Expect(err).To(HaveOccurred())
}
