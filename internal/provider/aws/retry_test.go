package aws_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/kubext/kubext/internal/provider/aws"
)

// throttlingEC2 answers the first n requests (all when n < 0) with EC2's
// RequestLimitExceeded, the rest with an empty DescribeNetworkInterfaces,
// and records when each request came.
type throttlingEC2 struct {
	mu    sync.Mutex
	n     int
	times []time.Time
}

func (s *throttlingEC2) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.times = append(s.times, time.Now())
	throttle := s.n < 0 || len(s.times) <= s.n
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/xml")
	if throttle {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Response><Errors><Error><Code>RequestLimitExceeded</Code><Message>Request limit exceeded.</Message></Error></Errors><RequestID>r1</RequestID></Response>`))
		return
	}
	_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><DescribeNetworkInterfacesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/"><requestId>r2</requestId><networkInterfaceSet/></DescribeNetworkInterfacesResponse>`))
}

func isolateAWSConfig(t *testing.T) {
	t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_NEW_RETRIES_2026", "")
}

// TestThrottlingRetriedBounded drives the real SDK client New builds (the
// adaptive retryer) against a server that throttles: attempts stop at
// MaxAttempts, are spaced by the backoff rather than a tight loop, and the
// failure has reason Throttled; a throttle that clears is retried through.
func TestThrottlingRetriedBounded(t *testing.T) {
	isolateAWSConfig(t)
	const attempts, backoff = 4, 50 * time.Millisecond
	newProvider := func(url string) *aws.Provider {
		p, err := aws.New(context.Background(), aws.Options{Region: "us-east-1", Endpoint: url, MaxAttempts: attempts, MaxBackoff: backoff,
			Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", "")})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := aws.Address{Name: "web", IP: netip.MustParseAddr("10.0.1.50")}

	always := &throttlingEC2{n: -1}
	srv := httptest.NewServer(always)
	defer srv.Close()
	_, err := newProvider(srv.URL).Observe(context.Background(), a, "vpc-1")
	if aws.ReasonOf(err) != aws.ReasonThrottled {
		t.Fatalf("got %v, want reason Throttled", err)
	}
	if len(always.times) != attempts {
		t.Fatalf("%d requests, want exactly MaxAttempts=%d", len(always.times), attempts)
	}
	for i := 1; i < len(always.times); i++ {
		if gap := always.times[i].Sub(always.times[i-1]); gap < backoff/2 {
			t.Errorf("retry %d came %v after the previous attempt: a tight loop, want a backoff near %v", i, gap, backoff)
		}
	}

	twice := &throttlingEC2{n: 2}
	srv2 := httptest.NewServer(twice)
	defer srv2.Close()
	if _, err := newProvider(srv2.URL).Observe(context.Background(), a, "vpc-1"); err != nil || len(twice.times) != 3 {
		t.Fatalf("throttled twice then answered: %v after %d requests, want success after 3", err, len(twice.times))
	}
}
