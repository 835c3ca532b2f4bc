package agenthealth

// The Lease names of the tests: a Tracker of ip-agents' heartbeats.
const (
	testNS        = "kubext-system"
	testComponent = "ip-agent"
)
