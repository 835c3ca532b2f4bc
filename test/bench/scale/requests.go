package main

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// requestCounts counts the requests a set of clients sent, by verb,
// resource and status code, as the API server's apiserver_request_total
// does; the bench wraps the light agents' clients in it, so that what the
// server sees can be split between the agents and the rest (the manager,
// kwok, the bench's observer).
type requestCounts struct {
	mu     sync.Mutex
	counts map[string]int
	last   map[string]int
	lastAt time.Time
}

func newRequestCounts() *requestCounts {
	return &requestCounts{counts: map[string]int{}, last: map[string]int{}, lastAt: time.Now()}
}

// wrap is a rest.Config's WrapTransport.
func (rc *requestCounts) wrap(rt http.RoundTripper) http.RoundTripper {
	return countingTransport{rt, rc}
}

type countingTransport struct {
	rt http.RoundTripper
	rc *requestCounts
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	code := "error"
	if err == nil {
		code = fmt.Sprint(resp.StatusCode)
	}
	verb := req.Method
	if req.URL.Query().Get("watch") == "true" {
		verb = "WATCH"
	}
	t.rc.mu.Lock()
	t.rc.counts[verb+" "+resourceOf(req.URL.Path)+" "+code]++
	t.rc.mu.Unlock()
	return resp, err
}

// resourceOf is the resource (and subresource) of an API path:
// /api/v1/namespaces/ns/pods/name/status is "pods/status".
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return path
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) > 2 {
		parts = parts[2:]
	}
	switch len(parts) {
	case 0:
		return "?"
	case 1, 2:
		return parts[0]
	default:
		return parts[0] + "/" + parts[2]
	}
}

// rates returns the rates since the last call, highest first, those of at
// least min a second.
func (rc *requestCounts) rates(minRate float64) string {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	secs := time.Since(rc.lastAt).Seconds()
	type row struct {
		key  string
		rate float64
	}
	var rows []row
	for k, n := range rc.counts {
		if r := float64(n-rc.last[k]) / secs; r >= minRate {
			rows = append(rows, row{k, r})
		}
		rc.last[k] = n
	}
	rc.lastAt = time.Now()
	slices.SortFunc(rows, func(a, b row) int {
		switch {
		case a.rate > b.rate:
			return -1
		case a.rate < b.rate:
			return 1
		}
		return strings.Compare(a.key, b.key)
	})
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprintf("%s %.1f/s", r.key, r.rate))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
