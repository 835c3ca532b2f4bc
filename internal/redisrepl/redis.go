package redisrepl

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultTimeout bounds each command when Redis.Timeout is not set:
// short, so that a member that stops answering costs a reconcile little.
const DefaultTimeout = time.Second

// Dial timeouts. A dial is answered by the member's kernel (SYN-ACK), not
// by Redis, so a busy Redis is not mistaken for a gone one: on a pod
// network the answer takes a round trip, well under a millisecond, and a
// dial that gets no answer is retried by TCP only after a second (the
// initial retransmission timeout). Any dial timeout between a few round
// trips and that second tells the same members apart; a short one keeps a
// member that is gone (its node lost, its address cut off) from holding
// every observation round of its group for a second.
const (
	// DialTimeout bounds connecting to a member that answered last time
	// (or to any member, for calls other than Observe), when it is shorter
	// than Redis.Timeout.
	DialTimeout = 500 * time.Millisecond
	// UnansweredDialTimeout bounds connecting to a member that did not
	// answer its last observation (Member.Unanswered): while a primary
	// does not answer, its group is observed again and again (see Pace),
	// and each round waits for this dial.
	UnansweredDialTimeout = 200 * time.Millisecond
)

// MaxLinkSilence is how many seconds a replica may have heard nothing from
// its primary (master_last_io_seconds_ago) and still count its link as up.
const MaxLinkSilence = 1

// Redis is the Client that talks to real Redis servers (6.2 or newer), one
// short-lived connection per call, without retries: the caller observes
// again on its next round.
type Redis struct {
	// Password is given to every member (AUTH) and, as masterauth, to the
	// replicas for their link to the primary; empty for none.
	Password string
	// Timeout bounds each command, and connecting when it is shorter than
	// DialTimeout; DefaultTimeout if zero.
	Timeout time.Duration
}

var _ Client = Redis{}

// quiet drops go-redis's own log lines: every error they tell of is
// returned to the caller, which reports it (in a status), so logging them
// too would fill the log with one line per unreachable member per round.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func init() { redis.SetLogger(quiet{}) }

// connect returns a client of the member at addr whose dials take at most
// dial (or the command timeout, if shorter).
func (r Redis) connect(addr string, dial time.Duration) *redis.Client {
	timeout := r.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	return redis.NewClient(&redis.Options{
		Addr:                  addr,
		Password:              r.Password,
		Protocol:              2,
		DisableIdentity:       true, // no CLIENT SETINFO: one command fewer per call
		DialTimeout:           min(dial, timeout),
		DialerRetries:         1,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		ContextTimeoutEnabled: true,
		MaxRetries:            -1,
		PoolSize:              1,
	})
}

// Observe reads INFO replication.
func (r Redis) Observe(ctx context.Context, m Member) (State, error) {
	dial := DialTimeout
	if m.Unanswered {
		dial = UnansweredDialTimeout
	}
	c := r.connect(m.Addr, dial)
	defer c.Close()
	info, err := c.InfoMap(ctx, "replication").Result()
	if err != nil {
		return State{}, err
	}
	return replicationState(info["Replication"])
}

// Promote sends REPLICAOF NO ONE.
func (r Redis) Promote(ctx context.Context, addr string) error {
	c := r.connect(addr, DialTimeout)
	defer c.Close()
	return c.ReplicaOf(ctx, "NO", "ONE").Err()
}

// Follow sets masterauth (when there is a password), so that the replica
// can authenticate to its primary, then sends REPLICAOF host port.
func (r Redis) Follow(ctx context.Context, addr, primary string) error {
	host, port, err := net.SplitHostPort(primary)
	if err != nil {
		return err
	}
	c := r.connect(addr, DialTimeout)
	defer c.Close()
	if r.Password != "" {
		if err := c.ConfigSet(ctx, "masterauth", r.Password).Err(); err != nil {
			return fmt.Errorf("setting masterauth: %w", err)
		}
	}
	return c.ReplicaOf(ctx, host, port).Err()
}

// HandoverTimeout bounds how long a primary holds its clients' writes
// while the replica it hands over to catches up; past it, the handover is
// abandoned and the primary goes on (kubext tries again).
const HandoverTimeout = 5 * time.Second

// Handover sends FAILOVER TO host port TIMEOUT: the primary holds its
// clients' writes until the replica has received all of them, then the
// replica becomes the primary and the old primary its replica. It returns
// once the handover has started, after having hurried it (see hurry).
func (r Redis) Handover(ctx context.Context, addr, to string) error {
	host, port, err := net.SplitHostPort(to)
	if err != nil {
		return err
	}
	c := r.connect(addr, DialTimeout)
	defer c.Close()
	if err := c.Do(ctx, "FAILOVER", "TO", host, port, "TIMEOUT", HandoverTimeout.Milliseconds()).Err(); err != nil {
		return err
	}
	r.hurry(ctx, c, to)
	return nil
}

// Hurrying a handover: at most hurryTimes nudges, hurryEvery apart.
const (
	hurryTimes = 10
	hurryEvery = 20 * time.Millisecond
)

// hurry shortens the wait of a FAILOVER for its target. The primary
// (client p) goes on once the target has acknowledged every byte of the
// stream (REPLCONF ACK); Redis (7.0) sends no request for an ACK while it
// holds its clients' writes, so it waits for the replica's own ACK, sent
// once a second: the write pause lasted up to a second. hurry asks the
// target for its ACK now (REPLCONF GETACK, which any client may send a
// replica) until the primary is no longer waiting for it, for at most
// hurryTimes*hurryEvery. It changes nothing of what the primary waits for:
// the offset it compares is the target's own. Failures are left to the
// FAILOVER, which goes on without them.
func (r Redis) hurry(ctx context.Context, p *redis.Client, to string) {
	for range hurryTimes {
		if err := r.getAck(to); err != nil {
			return
		}
		time.Sleep(hurryEvery)
		info, err := p.InfoMap(ctx, "replication").Result()
		if err != nil || info["Replication"]["master_failover_state"] != "waiting-for-sync" {
			return
		}
	}
}

// getAck sends REPLCONF GETACK to the replica at addr, which then sends
// its primary an ACK at once. The command has no reply, so it is followed
// by a PING whose reply says it has been run.
func (r Redis) getAck(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, DialTimeout)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(DefaultTimeout)); err != nil {
		return err
	}
	var cmds []byte
	replies := 1 // PING's
	if r.Password != "" {
		cmds = appendCommand(cmds, "AUTH", r.Password)
		replies++
	}
	cmds = appendCommand(cmds, "REPLCONF", "GETACK", "*")
	cmds = appendCommand(cmds, "PING")
	if _, err := conn.Write(cmds); err != nil {
		return err
	}
	rd := bufio.NewReader(conn)
	for range replies {
		line, err := rd.ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.HasPrefix(line, "+") {
			return fmt.Errorf("REPLCONF GETACK: %s", strings.TrimSpace(line))
		}
	}
	return nil
}

// appendCommand appends a command in the Redis protocol (RESP) to b.
func appendCommand(b []byte, args ...string) []byte {
	b = fmt.Appendf(b, "*%d\r\n", len(args))
	for _, a := range args {
		b = fmt.Appendf(b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b
}

// replicationState reads the replication state from the fields of INFO
// replication, as go-redis's InfoMap parses them.
func replicationState(fields map[string]string) (State, error) {
	var s State
	offset := "master_repl_offset"
	switch Role(fields["role"]) {
	case RolePrimary:
		s.Role = RolePrimary
		// "no-failover" unless a FAILOVER is under way (absent before 6.2).
		st := fields["master_failover_state"]
		s.FailingOver = st != "" && st != "no-failover"
	case RoleReplica:
		s.Role = RoleReplica
		s.PrimaryAddr = net.JoinHostPort(fields["master_host"], fields["master_port"])
		// A link the primary has been silent on for longer than
		// MaxLinkSilence is down: the primary pings its replicas every
		// second (repl-ping-replica-period 1), so such a silence means it is
		// gone, long before the replica times the link out (repl-timeout).
		s.LinkUp = fields["master_link_status"] == "up"
		if io, err := strconv.Atoi(fields["master_last_io_seconds_ago"]); err == nil && io > MaxLinkSilence {
			s.LinkUp = false
		}
		// What the replica has applied of its primary's stream; it stays
		// put while the link is down, which is what a failover compares.
		if _, ok := fields["slave_repl_offset"]; ok {
			offset = "slave_repl_offset"
		}
	default:
		return State{}, fmt.Errorf("INFO replication: unknown role %q", fields["role"])
	}
	var err error
	if s.Offset, err = strconv.ParseInt(fields[offset], 10, 64); err != nil {
		return State{}, fmt.Errorf("INFO replication: %s: %w", offset, err)
	}
	// A replica that has never synced reports slave_repl_offset 1 over a
	// master_repl_offset of 0: it holds nothing, and must not seem to hold
	// more than a primary promoted from the same nothing.
	if own, err := strconv.ParseInt(fields["master_repl_offset"], 10, 64); err == nil && offset != "master_repl_offset" {
		s.Offset = min(s.Offset, own)
	}
	return s, nil
}

// Describe says in a few stable words why a member could not be reached,
// for a status message that does not change with every attempt.
func Describe(err error) string {
	var netErr net.Error
	msg := err.Error()
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to host"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &netErr) && netErr.Timeout():
		return "timed out"
	case strings.HasPrefix(msg, "WRONGPASS"), strings.Contains(msg, "invalid password"):
		return "wrong password"
	case strings.HasPrefix(msg, "NOAUTH"):
		return "password required"
	case strings.Contains(msg, "AUTH") && strings.Contains(msg, "without any password configured"):
		return "a password is set but the server has none"
	case strings.HasPrefix(msg, "redis: can't parse"), strings.Contains(msg, "HTTP/1."):
		// Something listens there, but its replies are not Redis's.
		return "not a Redis server"
	}
	return msg
}
