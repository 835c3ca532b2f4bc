package main

import (
	"context"
	"flag"
	"testing"
)

// The aws provider is off unless asked for, and built from the flags when
// it is.
func TestAWSFlags(t *testing.T) {
	var off options
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	off.bindFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if p, err := off.aws.provider(context.Background()); p != nil || err != nil {
		t.Fatalf("without --aws-provider: %v, %v; want no provider", p, err)
	}

	var on options
	fs = flag.NewFlagSet("manager", flag.ContinueOnError)
	on.bindFlags(fs)
	if err := fs.Parse([]string{"--aws-provider", "--aws-region=eu-west-1", "--aws-endpoint=http://127.0.0.1:1"}); err != nil {
		t.Fatal(err)
	}
	if !on.aws.enabled || on.aws.region != "eu-west-1" || on.aws.endpoint != "http://127.0.0.1:1" {
		t.Fatalf("flags parsed as %+v", on.aws)
	}
	if p, err := on.aws.provider(context.Background()); p == nil || err != nil {
		t.Fatalf("with --aws-provider: %v, %v; want a provider", p, err)
	}
}
