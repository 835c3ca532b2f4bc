package ec2double

import (
	"bytes"
	"encoding/xml"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	sdkaws "github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
)

// Handler serves d over EC2's query protocol (form-encoded POST,
// Action=..., XML answers and EC2's error document), for the actions the
// aws provider calls. It is what a lab or a benchmark points the real SDK
// at (aws.Options.Endpoint), so that the provider runs over the wire
// against EC2's semantics (reassignment, association), which moto_server
// does not have. Requests are not authenticated: the SDK signs them, and
// the signature is not checked.
func (d *Double) Handler() http.Handler {
	return http.HandlerFunc(d.serve)
}

const xmlns = "http://ec2.amazonaws.com/doc/2016-11-15/"

func (d *Double) serve(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeError(w, http.StatusBadRequest, "MalformedQueryString", err.Error())
		return
	}
	f := form(r.PostForm)
	if len(f) == 0 {
		f = form(r.Form)
	}
	action := f.get("Action")
	body, err := d.dispatch(r, action, f)
	if err != nil {
		var api smithy.APIError
		if errors.As(err, &api) {
			writeError(w, http.StatusBadRequest, api.ErrorCode(), api.ErrorMessage())
			return
		}
		writeError(w, http.StatusInternalServerError, "InternalError", err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<%sResponse xmlns="%s"><requestId>00000000-0000-0000-0000-000000000000</requestId>%s</%sResponse>`,
		action, xmlns, body, action)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "text/xml;charset=UTF-8")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+`<Response><Errors><Error><Code>%s</Code><Message>%s</Message></Error></Errors><RequestID>00000000-0000-0000-0000-000000000000</RequestID></Response>`,
		esc(code), esc(msg))
}

func (d *Double) dispatch(r *http.Request, action string, f form) (string, error) {
	ctx := r.Context()
	switch action {
	case "DescribeInstances":
		out, err := d.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: f.list("InstanceId")})
		if err != nil {
			return "", err
		}
		var b bytes.Buffer
		b.WriteString("<reservationSet>")
		for _, res := range out.Reservations {
			b.WriteString("<item><instancesSet>")
			for _, in := range res.Instances {
				fmt.Fprintf(&b, "<item><instanceId>%s</instanceId><vpcId>%s</vpcId><subnetId>%s</subnetId><networkInterfaceSet>",
					esc(sdkaws.ToString(in.InstanceId)), esc(sdkaws.ToString(in.VpcId)), esc(sdkaws.ToString(in.SubnetId)))
				for _, n := range in.NetworkInterfaces {
					fmt.Fprintf(&b, "<item><networkInterfaceId>%s</networkInterfaceId><subnetId>%s</subnetId><vpcId>%s</vpcId>",
						esc(sdkaws.ToString(n.NetworkInterfaceId)), esc(sdkaws.ToString(n.SubnetId)), esc(sdkaws.ToString(n.VpcId)))
					if n.Attachment != nil && n.Attachment.DeviceIndex != nil {
						fmt.Fprintf(&b, "<attachment><deviceIndex>%d</deviceIndex></attachment>", *n.Attachment.DeviceIndex)
					}
					b.WriteString("</item>")
				}
				b.WriteString("</networkInterfaceSet></item>")
			}
			b.WriteString("</instancesSet></item>")
		}
		b.WriteString("</reservationSet>")
		return b.String(), nil
	case "DescribeSubnets":
		out, err := d.DescribeSubnets(ctx, &ec2.DescribeSubnetsInput{SubnetIds: f.list("SubnetId")})
		if err != nil {
			return "", err
		}
		var b bytes.Buffer
		b.WriteString("<subnetSet>")
		for _, s := range out.Subnets {
			fmt.Fprintf(&b, "<item><subnetId>%s</subnetId><cidrBlock>%s</cidrBlock><vpcId>%s</vpcId></item>",
				esc(sdkaws.ToString(s.SubnetId)), esc(sdkaws.ToString(s.CidrBlock)), esc(sdkaws.ToString(s.VpcId)))
		}
		b.WriteString("</subnetSet>")
		return b.String(), nil
	case "DescribeNetworkInterfaces":
		in := &ec2.DescribeNetworkInterfacesInput{NetworkInterfaceIds: f.list("NetworkInterfaceId"), Filters: f.filters()}
		if s := f.get("MaxResults"); s != "" {
			n, _ := strconv.Atoi(s)
			in.MaxResults = sdkaws.Int32(int32(n))
		}
		if s := f.get("NextToken"); s != "" {
			in.NextToken = sdkaws.String(s)
		}
		out, err := d.DescribeNetworkInterfaces(ctx, in)
		if err != nil {
			return "", err
		}
		var b bytes.Buffer
		b.WriteString("<networkInterfaceSet>")
		for _, n := range out.NetworkInterfaces {
			fmt.Fprintf(&b, "<item><networkInterfaceId>%s</networkInterfaceId><subnetId>%s</subnetId><vpcId>%s</vpcId>",
				esc(sdkaws.ToString(n.NetworkInterfaceId)), esc(sdkaws.ToString(n.SubnetId)), esc(sdkaws.ToString(n.VpcId)))
			if a := n.Attachment; a != nil {
				b.WriteString("<attachment>")
				if a.InstanceId != nil {
					fmt.Fprintf(&b, "<instanceId>%s</instanceId>", esc(*a.InstanceId))
				}
				if a.DeviceIndex != nil {
					fmt.Fprintf(&b, "<deviceIndex>%d</deviceIndex>", *a.DeviceIndex)
				}
				b.WriteString("</attachment>")
			}
			b.WriteString("<privateIpAddressesSet>")
			for _, p := range n.PrivateIpAddresses {
				fmt.Fprintf(&b, "<item><privateIpAddress>%s</privateIpAddress><primary>%t</primary></item>",
					esc(sdkaws.ToString(p.PrivateIpAddress)), sdkaws.ToBool(p.Primary))
			}
			b.WriteString("</privateIpAddressesSet>")
			writeTags(&b, n.TagSet)
			b.WriteString("</item>")
		}
		b.WriteString("</networkInterfaceSet>")
		if t := sdkaws.ToString(out.NextToken); t != "" {
			fmt.Fprintf(&b, "<nextToken>%s</nextToken>", esc(t))
		}
		return b.String(), nil
	case "DescribeAddresses":
		out, err := d.DescribeAddresses(ctx, &ec2.DescribeAddressesInput{PublicIps: f.list("PublicIp"),
			AllocationIds: f.list("AllocationId"), Filters: f.filters()})
		if err != nil {
			return "", err
		}
		var b bytes.Buffer
		b.WriteString("<addressesSet>")
		for _, a := range out.Addresses {
			b.WriteString("<item>")
			for _, kv := range [][2]string{{"publicIp", sdkaws.ToString(a.PublicIp)}, {"allocationId", sdkaws.ToString(a.AllocationId)},
				{"domain", string(a.Domain)}, {"associationId", sdkaws.ToString(a.AssociationId)},
				{"networkInterfaceId", sdkaws.ToString(a.NetworkInterfaceId)}, {"privateIpAddress", sdkaws.ToString(a.PrivateIpAddress)},
				{"instanceId", sdkaws.ToString(a.InstanceId)}} {
				if kv[1] != "" {
					fmt.Fprintf(&b, "<%s>%s</%s>", kv[0], esc(kv[1]), kv[0])
				}
			}
			writeTags(&b, a.Tags)
			b.WriteString("</item>")
		}
		b.WriteString("</addressesSet>")
		return b.String(), nil
	case "AssignPrivateIpAddresses":
		in := &ec2.AssignPrivateIpAddressesInput{NetworkInterfaceId: f.ptr("NetworkInterfaceId"),
			PrivateIpAddresses: f.list("PrivateIpAddress"), AllowReassignment: f.boolPtr("AllowReassignment")}
		if s := f.get("SecondaryPrivateIpAddressCount"); s != "" {
			n, _ := strconv.Atoi(s)
			in.SecondaryPrivateIpAddressCount = sdkaws.Int32(int32(n))
		}
		out, err := d.AssignPrivateIpAddresses(ctx, in)
		if err != nil {
			return "", err
		}
		var b bytes.Buffer
		fmt.Fprintf(&b, "<networkInterfaceId>%s</networkInterfaceId><assignedPrivateIpAddressesSet>", esc(sdkaws.ToString(out.NetworkInterfaceId)))
		for _, p := range out.AssignedPrivateIpAddresses {
			fmt.Fprintf(&b, "<item><privateIpAddress>%s</privateIpAddress></item>", esc(sdkaws.ToString(p.PrivateIpAddress)))
		}
		b.WriteString("</assignedPrivateIpAddressesSet>")
		return b.String(), nil
	case "UnassignPrivateIpAddresses":
		_, err := d.UnassignPrivateIpAddresses(ctx, &ec2.UnassignPrivateIpAddressesInput{
			NetworkInterfaceId: f.ptr("NetworkInterfaceId"), PrivateIpAddresses: f.list("PrivateIpAddress")})
		return "<return>true</return>", err
	case "AllocateAddress":
		in := &ec2.AllocateAddressInput{Domain: types.DomainType(f.get("Domain")), Address: f.ptr("Address"),
			PublicIpv4Pool: f.ptr("PublicIpv4Pool"), TagSpecifications: f.tagSpecs()}
		out, err := d.AllocateAddress(ctx, in)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("<publicIp>%s</publicIp><allocationId>%s</allocationId><domain>vpc</domain>",
			esc(sdkaws.ToString(out.PublicIp)), esc(sdkaws.ToString(out.AllocationId))), nil
	case "AssociateAddress":
		out, err := d.AssociateAddress(ctx, &ec2.AssociateAddressInput{AllocationId: f.ptr("AllocationId"),
			NetworkInterfaceId: f.ptr("NetworkInterfaceId"), PrivateIpAddress: f.ptr("PrivateIpAddress"),
			AllowReassociation: f.boolPtr("AllowReassociation")})
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("<return>true</return><associationId>%s</associationId>", esc(sdkaws.ToString(out.AssociationId))), nil
	case "DisassociateAddress":
		_, err := d.DisassociateAddress(ctx, &ec2.DisassociateAddressInput{AssociationId: f.ptr("AssociationId")})
		return "<return>true</return>", err
	case "ReleaseAddress":
		_, err := d.ReleaseAddress(ctx, &ec2.ReleaseAddressInput{AllocationId: f.ptr("AllocationId")})
		return "<return>true</return>", err
	}
	return "", APIError("InvalidAction", "The action %s is not valid for this web service.", action)
}

func writeTags(b *bytes.Buffer, tags []types.Tag) {
	if len(tags) == 0 {
		return
	}
	b.WriteString("<tagSet>")
	for _, t := range tags {
		fmt.Fprintf(b, "<item><key>%s</key><value>%s</value></item>", esc(sdkaws.ToString(t.Key)), esc(sdkaws.ToString(t.Value)))
	}
	b.WriteString("</tagSet>")
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// form is the request's parameters, EC2 query style: lists flattened as
// Name.1, Name.2, ...; structures as Name.1.Field.
type form map[string][]string

func (f form) get(k string) string {
	if v := f[k]; len(v) > 0 {
		return v[0]
	}
	return ""
}

func (f form) ptr(k string) *string {
	if v := f.get(k); v != "" {
		return sdkaws.String(v)
	}
	return nil
}

func (f form) boolPtr(k string) *bool {
	if v := f.get(k); v != "" {
		b, _ := strconv.ParseBool(v)
		return sdkaws.Bool(b)
	}
	return nil
}

// list returns prefix.1, prefix.2, ... in order.
func (f form) list(prefix string) []string {
	var out []string
	for _, i := range f.indexes(prefix) {
		out = append(out, f.get(prefix+"."+strconv.Itoa(i)))
	}
	return out
}

// indexes are the N of every key prefix.N or prefix.N.*, sorted.
func (f form) indexes(prefix string) []int {
	seen := map[int]bool{}
	for k := range f {
		rest, ok := strings.CutPrefix(k, prefix+".")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.SplitN(rest, ".", 2)[0])
		if err == nil {
			seen[n] = true
		}
	}
	out := make([]int, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Ints(out)
	return out
}

func (f form) filters() []types.Filter {
	var out []types.Filter
	for _, i := range f.indexes("Filter") {
		p := "Filter." + strconv.Itoa(i)
		out = append(out, types.Filter{Name: f.ptr(p + ".Name"), Values: f.list(p + ".Value")})
	}
	return out
}

func (f form) tagSpecs() []types.TagSpecification {
	var out []types.TagSpecification
	for _, i := range f.indexes("TagSpecification") {
		p := "TagSpecification." + strconv.Itoa(i)
		spec := types.TagSpecification{ResourceType: types.ResourceType(f.get(p + ".ResourceType"))}
		for _, j := range f.indexes(p + ".Tag") {
			t := p + ".Tag." + strconv.Itoa(j)
			spec.Tags = append(spec.Tags, types.Tag{Key: f.ptr(t + ".Key"), Value: sdkaws.String(f.get(t + ".Value"))})
		}
		out = append(out, spec)
	}
	return out
}
