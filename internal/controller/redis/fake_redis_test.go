package redis

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/kubext/kubext/internal/redisrepl"
)

// fakeRedis stands in for the Redis servers of the member pods, which
// envtest cannot run (it has no kubelet, so no containers): it keeps the
// replication state of each address and answers INFO replication and
// REPLICAOF as Redis does, a new link coming up at once. The real client
// it replaces, redisrepl.Redis, is tested against real redis-server
// processes in internal/redisrepl.
type fakeRedis struct {
	mu      sync.Mutex
	servers map[string]*fakeServer
}

type fakeServer struct {
	state    redisrepl.State
	password string
	// down: the server is gone (connections refused, its replicas' links
	// down). cut: kubext's dials time out, but its replicas still hear it
	// (kubext alone is cut off from it).
	down, cut bool
}

func newFakeRedis() *fakeRedis { return &fakeRedis{servers: map[string]*fakeServer{}} }

// start adds a fresh server (a primary without data) at addr.
func (f *fakeRedis) start(addr, password string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.servers[addr] = &fakeServer{state: redisrepl.State{Role: redisrepl.RolePrimary}, password: password}
}

// update changes the server at addr.
func (f *fakeRedis) update(addr string, change func(*fakeServer)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f.servers[addr])
}

func (f *fakeRedis) state(addr string) redisrepl.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.servers[addr].state
}

func (f *fakeRedis) connect(password string) redisrepl.Client { return fakeClient{f, password} }

type fakeClient struct {
	f        *fakeRedis
	password string
}

func (c fakeClient) server(addr string) (*fakeServer, error) {
	s, ok := c.f.servers[addr]
	if !ok || s.down {
		return nil, fmt.Errorf("dial tcp %s: %w", addr, syscall.ECONNREFUSED)
	}
	if s.cut {
		return nil, fmt.Errorf("dial tcp %s: %w", addr, os.ErrDeadlineExceeded)
	}
	if s.password != c.password {
		return nil, errors.New("WRONGPASS invalid username-password pair or user is disabled")
	}
	return s, nil
}

func (c fakeClient) Observe(_ context.Context, m redisrepl.Member) (redisrepl.State, error) {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	s, err := c.server(m.Addr)
	if err != nil {
		return redisrepl.State{}, err
	}
	if s.state.Role == redisrepl.RoleReplica {
		p, ok := c.f.servers[s.state.PrimaryAddr]
		s.state.LinkUp = ok && !p.down
		if s.state.LinkUp {
			s.state.Offset = p.state.Offset
		}
	}
	return s.state, nil
}

func (c fakeClient) Promote(_ context.Context, addr string) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	s, err := c.server(addr)
	if err != nil {
		return err
	}
	s.state = redisrepl.State{Role: redisrepl.RolePrimary, Offset: s.state.Offset}
	return nil
}

// Handover swaps the roles at once, as FAILOVER does once the replica has
// caught up.
func (c fakeClient) Handover(_ context.Context, addr, to string) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	s, err := c.server(addr)
	if err != nil {
		return err
	}
	t, err := c.server(to)
	if err != nil {
		return err
	}
	t.state = redisrepl.State{Role: redisrepl.RolePrimary, Offset: s.state.Offset}
	s.state = redisrepl.State{Role: redisrepl.RoleReplica, PrimaryAddr: to, Offset: s.state.Offset}
	return nil
}

func (c fakeClient) Follow(_ context.Context, addr, primary string) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	s, err := c.server(addr)
	if err != nil {
		return err
	}
	s.state = redisrepl.State{Role: redisrepl.RoleReplica, PrimaryAddr: primary, Offset: s.state.Offset}
	return nil
}
