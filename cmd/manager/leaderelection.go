package main

import (
	"net"
	"time"

	"k8s.io/client-go/rest"
)

// leaderElectionConfig is the configuration of the leader election's own
// client. A renewal must not wait behind the controllers' requests:
//
//   - its own connection: client-go shares one cached transport (one HTTP/2
//     connection) between every client made from equal configurations, so
//     the renewal would share a TCP stream and its flow-control window with
//     the controllers' Lists and watches; a Dial of its own gives it a
//     transport (and a connection) of its own;
//   - its own rate limiter (it makes one or two requests every retry
//     period), never the controllers' token bucket.
//
// What remains is the API server's: config/flowcontrol puts these requests
// in the leader-election priority level.
func leaderElectionConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.RateLimiter = nil
	c.QPS, c.Burst = 5, 10
	dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	c.Dial = dialer.DialContext
	return c
}
