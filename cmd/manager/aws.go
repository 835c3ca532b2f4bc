package main

import (
	"context"
	"flag"

	awsprov "github.com/kubext/kubext/internal/provider/aws"
)

// awsOptions are the flags of the aws provider of static IPs. The manager
// is the only component that talks to EC2; node agents get no AWS
// credentials.
type awsOptions struct {
	enabled  bool
	region   string
	endpoint string
}

func (o *awsOptions) bindFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.enabled, "aws-provider", false,
		"Attach the addresses of IPPools with provider aws through EC2 (secondary private IPs, Elastic IPs). "+
			"Credentials come from the AWS SDK's default chain: IRSA, EKS Pod Identity, the instance profile or the environment. "+
			"Without it, such pools are reported ProviderNotSupported.")
	fs.StringVar(&o.region, "aws-region", "",
		"EC2 region of the nodes, e.g. eu-west-1; default: the SDK's (AWS_REGION, the shared config file).")
	fs.StringVar(&o.endpoint, "aws-endpoint", "",
		"EC2 endpoint URL instead of the region's public one: a VPC interface endpoint, or a test server.")
}

// provider returns the aws provider, or nil when it is not enabled.
func (o *awsOptions) provider(ctx context.Context) (*awsprov.Provider, error) {
	if !o.enabled {
		return nil, nil
	}
	return awsprov.New(ctx, awsprov.Options{Region: o.region, Endpoint: o.endpoint})
}
