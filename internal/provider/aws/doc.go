// Package aws attaches static IP addresses to Kubernetes nodes running on
// EC2, for IPPools with spec.provider aws.
//
// Private mode (no spec.aws.publicIPv4Pool): the address is a secondary
// private IP of the holder node's network interface (ENI). A move is one
// AssignPrivateIpAddresses with AllowReassignment, so that EC2 itself takes
// the address off the previous ENI: there is no window in which the provider
// has to remove it first.
//
// Public mode (spec.aws.publicIPv4Pool, a BYOIP pool): the address is an
// Elastic IP allocated from that pool and associated with a secondary private
// IP of the holder's ENI. The provider tags what it allocates
// (kubext.io/ip=<IP name>) and releases only tagged allocations; an Elastic
// IP a user allocated by hand is associated and disassociated, never
// released.
//
// Safety argument: the provider never declares a move done on the word of a
// mutating call. After every move it lists the network interfaces of the
// VPC and the Elastic IP, and requires that the address is on the target ENI
// and on no other (private mode), or that the Elastic IP's association names
// the target ENI and private IP (public mode). An ENI that still lists the
// address after a reassignment (EC2 should never leave one; moto does) gets
// an explicit UnassignPrivateIpAddresses before success is reported, and a
// check that still fails is an error with reason VerificationFailed. The
// listing is filtered by VPC only and the address is matched on the client,
// so the check does not rest on how the server interprets an address filter
// either (moto's addresses.private-ip-address filter sees primary addresses
// only).
package aws
