package aws

import (
	"context"
	"fmt"
	"time"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
)

// EC2 is the part of *ec2.Client the provider uses, so that tests can put a
// double in its place. Every method is the SDK's, with the SDK's types.
type EC2 interface {
	DescribeInstances(context.Context, *ec2.DescribeInstancesInput, ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error)
	DescribeSubnets(context.Context, *ec2.DescribeSubnetsInput, ...func(*ec2.Options)) (*ec2.DescribeSubnetsOutput, error)
	DescribeNetworkInterfaces(context.Context, *ec2.DescribeNetworkInterfacesInput, ...func(*ec2.Options)) (*ec2.DescribeNetworkInterfacesOutput, error)
	DescribeAddresses(context.Context, *ec2.DescribeAddressesInput, ...func(*ec2.Options)) (*ec2.DescribeAddressesOutput, error)
	AssignPrivateIpAddresses(context.Context, *ec2.AssignPrivateIpAddressesInput, ...func(*ec2.Options)) (*ec2.AssignPrivateIpAddressesOutput, error)
	UnassignPrivateIpAddresses(context.Context, *ec2.UnassignPrivateIpAddressesInput, ...func(*ec2.Options)) (*ec2.UnassignPrivateIpAddressesOutput, error)
	AllocateAddress(context.Context, *ec2.AllocateAddressInput, ...func(*ec2.Options)) (*ec2.AllocateAddressOutput, error)
	AssociateAddress(context.Context, *ec2.AssociateAddressInput, ...func(*ec2.Options)) (*ec2.AssociateAddressOutput, error)
	DisassociateAddress(context.Context, *ec2.DisassociateAddressInput, ...func(*ec2.Options)) (*ec2.DisassociateAddressOutput, error)
	ReleaseAddress(context.Context, *ec2.ReleaseAddressInput, ...func(*ec2.Options)) (*ec2.ReleaseAddressOutput, error)
}

var _ EC2 = (*ec2.Client)(nil)

// TagKey is the tag the provider puts on the Elastic IPs it allocates; its
// value is the IP object's name. Only Elastic IPs carrying it are released.
const TagKey = "kubext.io/ip"

// Options configure New.
type Options struct {
	// Region is the EC2 region, e.g. eu-west-1. Empty: the SDK's default
	// chain (AWS_REGION, the shared config file, ...).
	Region string
	// Endpoint overrides the EC2 endpoint, e.g. a VPC endpoint
	// (https://vpce-....ec2.eu-west-1.vpce.amazonaws.com) or a test server.
	Endpoint string
	// MaxAttempts bounds the attempts of one API call, retries of throttled
	// calls included (default 5).
	MaxAttempts int
	// MaxBackoff bounds the wait between two attempts (default 20s).
	MaxBackoff time.Duration
	// Credentials replaces the SDK's default chain (IRSA, EKS Pod Identity,
	// instance profile, environment); for tests.
	Credentials sdkaws.CredentialsProvider
	// PublicDeviceIndex is the device index of the ENI that Elastic IPs are
	// associated with in public mode (default 0, the primary ENI).
	PublicDeviceIndex int32
}

// Provider attaches addresses to EC2 instances. It keeps no state: what is
// attached where is read from EC2 on every call.
type Provider struct {
	ec2               EC2
	publicDeviceIndex int32
}

// New loads credentials the standard way (config.LoadDefaultConfig: IRSA,
// EKS Pod Identity, instance profile, environment), with the SDK's adaptive
// retryer for throttling, and returns a Provider using the EC2 API.
func New(ctx context.Context, o Options) (*Provider, error) {
	client, err := NewEC2Client(ctx, o)
	if err != nil {
		return nil, err
	}
	return NewWithEC2(client, o), nil
}

// NewEC2Client returns the EC2 client New uses: credentials from the SDK's
// default chain (or o.Credentials), o.Region, o.Endpoint, and the adaptive
// retryer bounded by o.MaxAttempts and o.MaxBackoff.
func NewEC2Client(ctx context.Context, o Options) (*ec2.Client, error) {
	maxAttempts := o.MaxAttempts
	if maxAttempts <= 0 {
		maxAttempts = 5
	}
	loadOpts := []func(*config.LoadOptions) error{
		config.WithRetryer(func() sdkaws.Retryer {
			return retry.NewAdaptiveMode(func(a *retry.AdaptiveModeOptions) {
				a.StandardOptions = append(a.StandardOptions, func(s *retry.StandardOptions) {
					s.MaxAttempts = maxAttempts
					if o.MaxBackoff > 0 {
						s.MaxBackoff = o.MaxBackoff
					}
				})
			})
		}),
	}
	if o.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(o.Region))
	}
	if o.Credentials != nil {
		loadOpts = append(loadOpts, config.WithCredentialsProvider(o.Credentials))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("loading AWS configuration: %w", err)
	}
	return ec2.NewFromConfig(cfg, func(eo *ec2.Options) {
		if o.Endpoint != "" {
			eo.BaseEndpoint = sdkaws.String(o.Endpoint)
		}
	}), nil
}

// NewWithEC2 returns a Provider that calls api; only PublicDeviceIndex of o
// is used. For tests, and for callers that build their own client.
func NewWithEC2(api EC2, o Options) *Provider {
	return &Provider{ec2: api, publicDeviceIndex: o.PublicDeviceIndex}
}
