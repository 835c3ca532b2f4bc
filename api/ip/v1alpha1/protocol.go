package v1alpha1

// AgentComponent names the ip-agents' heartbeat Leases: each agent renews
// the Lease ip-agent-<node> in the manager's heartbeat namespace, labelled
// with this component (internal/heartbeat). The controller takes a node
// whose Lease has not been renewed for a whole lease duration for lost,
// and only then clears status.attachedNode on its agent's behalf: by then
// that agent has fenced itself (withdrawn every address it announced), so
// two nodes never answer for one address. The agent and the controller
// agree on the name through this constant, part of the API between them
// like the status fields.
const AgentComponent = "ip-agent"
